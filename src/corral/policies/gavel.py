"""Gavel: heterogeneity-aware policies realised by round-based scheduling.

Each policy solves one of Gavel's allocation problems
(:mod:`corral.optimize.gavel_lp`) for the jobs present, giving ``X[j, t]``,
the fraction of time job ``j`` should spend on GPU type ``t``. The LP is
solved again whenever jobs arrive or finish. Gavel's mechanism turns ``X``
into leases: every ``round`` seconds (360 s by default) the (job, type)
pairs are ranked by priority = ``X[j, t]`` / the fraction of its time the job
has actually received on ``t`` since it arrived (never-served pairs first),
and taken greedily while the type has GPUs for the gang; a job runs on one
type in a round. A job given the same type again keeps its GPUs (no
restart). Between rounds, GPUs freed by finishing jobs go to the waiting
pairs in the same priority order (Gavel itself leaves them idle until the
round ends).

The space-sharing variant ranks combinations (a job alone, or a measured
pair sharing one gang, packed at the pair's measured speeds) the same way.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from corral.model.plan import Plan
from corral.model.state import PENDING, SchedulerState
from corral.optimize.gavel_lp import (
    AllocationProblem,
    finish_time_fairness,
    max_min_fairness,
    max_min_fairness_packed,
    max_throughput,
    min_makespan,
)
from corral.perf.throughputs import ThroughputTable, gavel_throughputs
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy, place_wide_jobs, wider_than_any_type

Combo = tuple[int, ...]


class GavelPolicy(Policy):
    """Round-based realisation of an allocation; subclasses choose the LP."""

    name: ClassVar[str] = "gavel-max-min-fairness"
    description: ClassVar[str] = (
        "Gavel: weighted max-min fairness over heterogeneity-normalised throughput (LP), "
        "realised in rounds"
    )
    packed: ClassVar[bool] = False

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        round: float = 360.0,
        fill_between_rounds: int = 1,
        **params: Any,
    ) -> None:
        super().__init__(placement, **params)
        if round <= 0:
            raise ValueError(f"round must be positive, got {round}")
        self.round = float(round)
        self.fill_between_rounds = bool(fill_between_rounds)
        self.received: np.ndarray | None = None
        """Seconds each job has run on each GPU type (jobs x types)."""
        self._combo_received: dict[tuple[Combo, int], float] = {}
        self._last = 0.0
        self._round_end = -np.inf
        self._active_key: tuple[int, int, int] | None = None
        self._combos: list[Combo] = []
        self._x = np.zeros((0, 0))
        self.solves = 0
        self.rounds = 0

    # --------------------------------------------------------- allocation
    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        """X for ``jobs`` (rows in their order)."""
        return max_min_fairness(self._problem(state, jobs))

    def _problem(self, state: SchedulerState, jobs: np.ndarray) -> AllocationProblem:
        return AllocationProblem(
            throughput=state.type_speed[jobs],
            gpus=state.gpus[jobs],
            capacity=state.cluster.type_gpus,
            weights=state.weight[jobs],
        )

    def _solve(self, state: SchedulerState, active: np.ndarray) -> None:
        self.solves += 1
        x = self.allocate(state, active)
        self._combos = [(int(j),) for j in active]
        self._x = x

    # --------------------------------------------------------- mechanism
    def _account(self, state: SchedulerState) -> None:
        n, k = len(state.gpus), len(state.cluster.gpu_type_names)
        if self.received is None:
            self.received = np.zeros((n, k))
        dt = state.now - self._last
        self._last = state.now
        if dt <= 0:
            return
        type_of = state.cluster.gpu_type_id
        for i in state.running:
            gpus = state.alloc[i]
            assert gpus is not None
            t = int(type_of[gpus[0]])
            self.received[i, t] += dt
            host = int(state.host[i])
            if host >= 0:
                key = (tuple(sorted((host, i))), t)
                self._combo_received[key] = self._combo_received.get(key, 0.0) + dt
            elif state.guest[i] < 0:
                key = ((i,), t)
                self._combo_received[key] = self._combo_received.get(key, 0.0) + dt

    def _priorities(self, state: SchedulerState) -> list[tuple[Combo, int]]:
        """(combination, type) pairs with a positive share, best priority first."""
        now = state.now
        ranked: list[tuple[float, float, int, Combo, int]] = []
        rows, cols = np.nonzero(self._x > 1e-6)
        for r, t in zip(rows.tolist(), cols.tolist(), strict=True):
            combo = self._combos[r]
            share = float(self._x[r, t])
            elapsed = max(now - float(state.submit[list(combo)].max()), 1e-9)
            got = self._combo_received.get((combo, t), 0.0) / elapsed
            priority = np.inf if got <= 0 else share / got
            ranked.append((-priority, -share, int(min(combo)), combo, t))
        ranked.sort()
        return [(combo, t) for *_, combo, t in ranked]

    def schedule(self, state: SchedulerState) -> Plan:
        self._account(state)
        active = np.sort(np.concatenate([state.pending.array(), state.running.array()]))
        key = (
            (len(active), int(active.sum()), int((active * active).sum())) if len(active) else None
        )
        changed = key != self._active_key
        if changed:
            self._active_key = key
            if len(active):
                self._solve(state, active)
            else:
                self._combos, self._x = [], np.zeros((0, 0))
        builder = PlanBuilder(state)
        if state.now >= self._round_end:
            self.rounds += 1
            self._round_end = state.now + self.round
            self._assign(state, builder, reassign=True)
        elif self.fill_between_rounds and len(state.pending) and state.free.total:
            self._assign(state, builder, reassign=False)
        wake = self._round_end if len(active) else None
        return builder.build(wake)

    def _assign(self, state: SchedulerState, builder: PlanBuilder, reassign: bool) -> None:
        cluster = state.cluster
        type_of = cluster.gpu_type_id
        current: dict[int, tuple[Combo, int]] = {}
        for i in state.running:
            if state.host[i] >= 0:
                continue
            gpus = state.alloc[i]
            assert gpus is not None
            guest = int(state.guest[i])
            combo = (i,) if guest < 0 else tuple(sorted((i, guest)))
            current[i] = (combo, int(type_of[gpus[0]]))
        if reassign:
            room = cluster.type_gpus.copy()
            taken: set[int] = set()
        else:
            room = state.free.by_type()
            taken = {j for combo, _ in current.values() for j in combo}
        chosen: list[tuple[Combo, int]] = []
        for combo, t in self._priorities(state):
            if any(j in taken for j in combo):
                continue
            need = int(state.gpus[combo[0]])
            if room[t] < need:
                continue
            room[t] -= need
            taken.update(combo)
            chosen.append((combo, t))
        if reassign:
            keep = {(combo, t) for combo, t in chosen}
            wide = wider_than_any_type(state)
            for host, (combo, t) in current.items():
                if (combo, t) not in keep and not wide[host]:
                    builder.stop(host)
            chosen = [(c, t) for c, t in chosen if not _runs_as(state, c, t, current)]
        for combo, t in chosen:
            self._start(state, builder, combo, t)
        place_wide_jobs(state, builder, self.placement)

    def _start(self, state: SchedulerState, builder: PlanBuilder, combo: Combo, t: int) -> None:
        for j in combo:  # a job this plan stops is pending again once the stop is applied
            if state.status[j] != PENDING and j not in builder.plan.stops:
                return
        host = combo[0]
        free = builder.free.of_type(t)
        gpus = self.placement.choose(free, int(state.gpus[host]))
        if gpus is None:
            return  # the type has the GPUs but not on few enough servers: next round
        builder.start(host, gpus)
        if len(combo) == 2:
            guest = combo[1]
            g_factor, h_factor = self._pair_factors(state, guest, host, t)
            builder.pack(guest, host, g_factor, h_factor)

    def _pair_factors(
        self, state: SchedulerState, guest: int, host: int, t: int
    ) -> tuple[float, float]:
        return 1.0, 1.0


def _runs_as(
    state: SchedulerState, combo: Combo, t: int, current: dict[int, tuple[Combo, int]]
) -> bool:
    return any(c == combo and tt == t for c, tt in current.values())


class GavelMaxMinAgnostic(GavelPolicy):
    name = "gavel-max-min-fairness-agnostic"
    description = "Gavel's heterogeneity-agnostic max-min fairness (every GPU type alike)"

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        return max_min_fairness(self._problem(state, jobs), agnostic=True)


class GavelFinishTimeFairness(GavelPolicy):
    name = "gavel-finish-time-fairness"
    description = "Gavel: minimise the worst finish-time fairness rho (Themis' metric), LPs"

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        remaining = np.maximum(state.total_steps[jobs] - state.done_steps(jobs), 1e-9)
        elapsed = state.now - state.submit[jobs]
        x, _ = finish_time_fairness(
            self._problem(state, jobs), elapsed, remaining, state.total_steps[jobs]
        )
        return x


class GavelMinMakespan(GavelPolicy):
    name = "gavel-min-makespan"
    description = "Gavel: finish the jobs present as early as possible (LP)"

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        remaining = np.maximum(state.total_steps[jobs] - state.done_steps(jobs), 1e-9)
        return min_makespan(self._problem(state, jobs), remaining)


class GavelMaxThroughput(GavelPolicy):
    name = "gavel-max-throughput"
    description = "Gavel: maximise the total normalised throughput (LP)"

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        return max_throughput(self._problem(state, jobs))


class GavelMaxMinPacked(GavelPolicy):
    name = "gavel-max-min-fairness-packed"
    description = "Gavel with space sharing: max-min fairness where measured pairs may share a gang"
    packed = True

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        round: float = 360.0,
        fill_between_rounds: int = 1,
        partners: int = 3,
    ) -> None:
        super().__init__(placement, round, fill_between_rounds)
        self.partners = int(partners)
        self.table: ThroughputTable = gavel_throughputs()

    def _pair(
        self, state: SchedulerState, a: int, b: int, gpu_type: str
    ) -> tuple[float, float] | None:
        """Measured (a, b) throughputs packed together, relative to each alone."""
        key = (gpu_type, True)
        ta, tb = state.job_type[a], state.job_type[b]
        g = int(state.gpus[a])
        pair = self.table.paired.get(key, {}).get((ta, g), {}).get((tb, g))
        alone = self.table.alone.get(key, {})
        if pair is None or (ta, g) not in alone or (tb, g) not in alone:
            return None
        return pair[0] / alone[(ta, g)], pair[1] / alone[(tb, g)]

    def _solve(self, state: SchedulerState, active: np.ndarray) -> None:
        self.solves += 1
        names = state.cluster.gpu_type_names
        base = self._problem(state, active)
        local = {int(j): r for r, j in enumerate(active)}
        combos: list[Combo] = [(int(j),) for j in active]
        rows: list[np.ndarray] = [
            np.stack([base.throughput[r], np.zeros(len(names))]) for r in range(len(active))
        ]
        by_size: dict[int, list[int]] = {}
        for j in active.tolist():
            by_size.setdefault(int(state.gpus[j]), []).append(j)
        for group in by_size.values():
            for a in group:
                scored = []
                for b in group:
                    if b <= a:
                        continue
                    rel = [self._pair(state, a, b, t) for t in names]
                    if any(r is None for r in rel):
                        continue
                    gain = sum(r[0] + r[1] for r in rel if r is not None) / len(names)
                    if gain > 1.0:
                        scored.append((gain, b, rel))
                scored.sort(reverse=True)
                for _, b, rel in scored[: self.partners]:
                    combos.append((a, b))
                    ta = base.throughput[local[a]]
                    tb = base.throughput[local[b]]
                    rows.append(
                        np.stack(
                            [ta * [r[0] for r in rel], tb * [r[1] for r in rel]]  # type: ignore[index]
                        )
                    )
        problem = AllocationProblem(
            throughput=base.throughput,
            gpus=base.gpus,
            capacity=base.capacity,
            weights=base.weights,
            combos=[tuple(local[j] for j in c) for c in combos],
            combo_throughput=np.stack(rows),
        )
        self._x = max_min_fairness_packed(problem)
        self._combos = combos

    def _pair_factors(
        self, state: SchedulerState, guest: int, host: int, t: int
    ) -> tuple[float, float]:
        rel = self._pair(state, host, guest, state.cluster.gpu_type_names[t])
        assert rel is not None
        return rel[1], rel[0]


GAVEL_POLICIES: tuple[type[GavelPolicy], ...] = (
    GavelPolicy,
    GavelMaxMinAgnostic,
    GavelFinishTimeFairness,
    GavelMinMakespan,
    GavelMaxThroughput,
    GavelMaxMinPacked,
)
