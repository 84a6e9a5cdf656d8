"""Gandiva: introspective time-slicing, packing, migration and grow-shrink.

Gandiva (Xiao et al., OSDI '18) exploits the fact that training is a loop of
mini-batches. One pass here does, in order:

1. **Unpack**: a packed pair that has run a quantum is "measured" (its
   throughputs come from Gavel's pair measurements); if the two jobs'
   normalised throughputs add up to 1 or less, packing did not help: the
   guest is suspended and that pair of job types is not packed again.
2. **Shrink**: jobs grown onto idle GPUs give them back when others wait.
3. **Time-slice**: when more GPUs are asked for than exist, jobs take turns in
   ``quantum``-second slices (suspend/resume at an iteration boundary, the
   engine's switch cost): a job that has run a quantum yields to the one that
   has waited longest; a job runs at least one quantum once started.
4. **Migrate**: a multi-GPU job that fits on one server only if small jobs
   move is given that server after they migrate elsewhere (cost from
   :func:`corral.perf.switching.migration_seconds`); otherwise it is placed
   as compactly as possible.
5. **Pack**: a job still waiting shares the GPUs of a running job of the same
   size. With ``probe`` (Gandiva's way) any pair not yet known to be bad is
   tried and judged after a quantum; without it only pairs whose measured
   combined throughput exceeds 1 are packed.
6. **Grow**: when nobody waits, a running job doubles onto idle GPUs of its
   own server (speed x ``1 + grow_efficiency``), paying a migration.

Packing needs job types that Gavel measured (``--job-types gavel`` gives
Philly's generic jobs such types); jobs of unknown types are never packed.
"""

from __future__ import annotations

import math

import numpy as np

from corral.model.free_gpus import FreeGPUs
from corral.model.plan import Plan
from corral.model.state import PENDING, SchedulerState
from corral.perf.switching import migration_seconds
from corral.perf.throughputs import ThroughputTable, gavel_throughputs
from corral.placement.strategies import Consolidate, PlacementStrategy
from corral.policies.base import PlanBuilder, Policy, greedy_fit

PAIR_GPU = ("V100", True)
"""The measured pair table used: Gavel's V100, consolidated."""


class Gandiva(Policy):
    name = "gandiva"
    description = (
        "time-slicing in quanta, packing by measured pair throughput, migration, grow-shrink"
    )
    elastic = True

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        quantum: float = 60.0,
        packing: int = 1,
        probe: int = 1,
        migration: int = 1,
        grow: int = 1,
        grow_efficiency: float = 0.8,
    ) -> None:
        super().__init__(placement or Consolidate())
        if quantum <= 0:
            raise ValueError(f"quantum must be positive, got {quantum}")
        if not 0 <= grow_efficiency <= 1:
            raise ValueError(f"grow_efficiency must be in [0, 1], got {grow_efficiency}")
        self.quantum = float(quantum)
        self.packing = bool(packing)
        self.probe = bool(probe)
        self.migration = bool(migration)
        self.grow = bool(grow)
        self.grow_efficiency = float(grow_efficiency)
        self.table: ThroughputTable = gavel_throughputs()
        self.bad_pairs: set[tuple[str, str]] = set()
        self.packed_at: dict[int, float] = {}
        self.pack_log: list[tuple[float, str, str]] = []
        """(time, host type, guest type) of every packing tried."""
        self.counts = {"packs": 0, "unpacks": 0, "migrations": 0, "grows": 0, "shrinks": 0}

    # ------------------------------------------------------------ measures
    def pair_factors(
        self, state: SchedulerState, host: int, guest: int
    ) -> tuple[float, float] | None:
        """(host, guest) throughput when packed, each relative to running alone."""
        alone = self.table.alone.get(PAIR_GPU, {})
        pairs = self.table.paired.get(PAIR_GPU, {})
        hk = (state.job_type[host], int(state.gpus[host]))
        gk = (state.job_type[guest], int(state.gpus[guest]))
        measured = pairs.get(hk, {}).get(gk)
        if measured is None or hk not in alone or gk not in alone or min(measured) <= 0:
            return None  # not measured, or the pair does not fit on one GPU together
        return measured[0] / alone[hk], measured[1] / alone[gk]

    # ------------------------------------------------------------ the pass
    def schedule(self, state: SchedulerState) -> Plan:
        builder = PlanBuilder(state)
        now = state.now
        leaving: set[int] = set()
        self._unpack(state, builder, leaving)
        waiting = len(state.pending) > 0
        if waiting:
            for i in state.running.array().tolist():
                if state.held[i] > state.gpus[i] and i not in leaving:
                    builder.stop(i)
                    leaving.add(i)
                    self.counts["shrinks"] += 1
        self._time_slice(state, builder, leaving)
        still = [i for i in state.pending_order if i not in builder.plan.starts]
        if self.packing and still:
            self._pack(state, builder, still, leaving)
        pending_left = len(state.pending) + len(leaving) - len(builder.plan.starts)
        grow_later = False
        if self.grow and pending_left <= 0:
            grow_later = self._grow(state, builder, leaving)
            # jobs started now may grow into what is still idle after a quantum
            grow_later |= bool(builder.plan.starts) and builder.free.total > 0
        wake = None
        if pending_left > 0 or self.packed_at or grow_later:
            wake = (math.floor(now / self.quantum) + 1) * self.quantum
        return builder.build(wake)

    def _unpack(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> None:
        for guest, since in list(self.packed_at.items()):
            host = int(state.host[guest])
            if host < 0:  # the pair ended by itself (a job finished or was preempted)
                del self.packed_at[guest]
                continue
            if state.now - since < self.quantum:
                continue
            factors = self.pair_factors(state, host, guest)
            if factors is not None and sum(factors) > 1.0:
                continue
            pair = (state.job_type[host], state.job_type[guest])
            self.bad_pairs.update((pair, pair[::-1]))
            builder.stop(guest)
            leaving.add(guest)
            del self.packed_at[guest]
            self.counts["unpacks"] += 1

    def _time_slice(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> None:
        now = state.now
        running = np.array(
            [i for i in state.running if state.host[i] < 0 and i not in leaving], dtype=np.int64
        )
        queued = np.concatenate(
            (state.pending.array(), np.array(sorted(leaving), dtype=np.int64))
        ).astype(np.int64)
        queued = queued[state.host[queued] < 0] if len(queued) else queued
        if not len(queued):
            return
        if builder.free.total >= int(state.gpus[queued].sum()):
            for i in sorted(queued.tolist()):
                self._place(state, builder, i, leaving)
            return
        pinned = state.running_for(running) < self.quantum if len(running) else np.zeros(0, bool)
        movable = running[~pinned]
        # longest waiting first; jobs that just ran (or are yielding now) go last
        keys = np.concatenate(
            (
                np.full(len(movable), now),
                np.where(state.status[queued] == PENDING, state.queued_since[queued], now),
            )
        )
        candidates = np.concatenate((movable, queued))
        ranked = candidates[np.lexsort((candidates, keys))]
        capacity = state.cluster.total_gpus - int(state.held[running[pinned]].sum())
        take = greedy_fit(state.gpus[ranked], capacity)
        for i in ranked[~take].tolist():
            if state.status[i] != PENDING and i not in leaving:
                builder.stop(i)
                leaving.add(i)
        for i in ranked[take].tolist():
            if state.status[i] == PENDING or i in leaving:
                self._place(state, builder, i, leaving)

    def _place(
        self, state: SchedulerState, builder: PlanBuilder, i: int, leaving: set[int]
    ) -> None:
        if i in builder.plan.starts:  # already placed in this pass (moved to make room)
            return
        n = int(state.gpus[i])
        free = builder.free
        if (
            self.migration
            and 1 < n <= state.cluster.max_node_gpus
            and int(free.node_free.max()) < n
            and free.total >= n
            and self._defragment(state, builder, n, leaving)
        ):
            pass
        builder.place(i, self.placement)

    def _defragment(
        self, state: SchedulerState, builder: PlanBuilder, n: int, leaving: set[int]
    ) -> bool:
        """Migrate small jobs off one server so ``n`` GPUs there are free together."""
        cluster = state.cluster
        free = builder.free
        movers_by_node: dict[int, list[int]] = {}
        for j in state.running.array().tolist():
            if j in leaving or state.host[j] >= 0 or state.guest[j] >= 0:
                continue
            gpus = state.alloc[j]
            assert gpus is not None
            node = cluster.gpu_node_list[gpus[0]]
            if all(cluster.gpu_node_list[g] == node for g in gpus) and len(gpus) < n:
                movers_by_node.setdefault(node, []).append(j)
        best: tuple[int, int, list[int]] | None = None
        for node, movers in movers_by_node.items():
            have = int(free.node_free[node])
            chosen: list[int] = []
            for j in sorted(movers, key=lambda j: -int(state.held[j])):
                if have >= n:
                    break
                chosen.append(j)
                have += int(state.held[j])
            if have < n:
                continue
            moved = sum(int(state.held[j]) for j in chosen)
            if best is None or moved < best[1]:
                best = (node, moved, chosen)
        if best is None:
            return False
        node, _, chosen = best
        trial = free.copy()
        first = cluster.node_first_gpu_list[node]
        block = [g for g in range(first, first + cluster.node_gpus_list[node]) if trial.mask[g]]
        trial.take(block)  # the target server is off limits to the movers
        targets: list[list[int]] = []
        for j in chosen:
            gpus = Consolidate().choose(trial, int(state.held[j]))
            if gpus is None:
                return False
            trial.take(gpus)
            targets.append(gpus)
        for j, gpus in zip(chosen, targets, strict=True):
            builder.stop(j)
            builder.start(j, gpus)
            builder.plan.overheads[j] = migration_seconds(len(gpus))
            leaving.add(j)
            self.counts["migrations"] += 1
        return True

    def _pack(
        self, state: SchedulerState, builder: PlanBuilder, waiting: list[int], leaving: set[int]
    ) -> None:
        hosts = [
            h
            for h in sorted(state.running.array().tolist(), key=lambda h: state.seg_start[h])
            if h not in leaving
            and state.host[h] < 0
            and state.guest[h] < 0
            and state.held[h] == state.gpus[h]
        ]
        taken: set[int] = set()
        for i in waiting:
            if state.host[i] >= 0:
                continue
            for h in hosts:
                if h in taken or state.gpus[h] != state.gpus[i]:
                    continue
                if (state.job_type[h], state.job_type[i]) in self.bad_pairs:
                    continue
                factors = self.pair_factors(state, h, i)
                if factors is None or (not self.probe and sum(factors) <= 1.0):
                    continue
                builder.pack(i, h, factors[1], factors[0])
                taken.add(h)
                self.packed_at[i] = state.now
                self.pack_log.append((state.now, state.job_type[h], state.job_type[i]))
                self.counts["packs"] += 1
                break

    def _grow(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> bool:
        """Grow jobs into idle GPUs of their server; True if one could grow after its quantum."""
        later = False
        if builder.free.total <= 0:
            return later
        cluster = state.cluster
        for i in state.running.array().tolist():
            if i in leaving or state.host[i] >= 0 or state.guest[i] >= 0:
                continue
            if state.held[i] != state.gpus[i]:
                continue
            gpus = state.alloc[i]
            assert gpus is not None
            node = cluster.gpu_node_list[gpus[0]]
            n = len(gpus)
            if int(builder.free.node_free[node]) < n or any(
                cluster.gpu_node_list[g] != node for g in gpus
            ):
                continue
            if state.now - state.seg_start[i] < self.quantum:
                later = True
                continue
            trial: FreeGPUs = builder.free
            extra = trial.in_node(node, n)
            builder.stop(i)
            builder.start(i, sorted([*gpus, *extra]))
            builder.plan.factors[i] = 1.0 + self.grow_efficiency
            builder.plan.overheads[i] = migration_seconds(n)
            leaving.add(i)
            self.counts["grows"] += 1
        return later
