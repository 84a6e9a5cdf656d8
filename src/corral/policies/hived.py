"""HiveD: virtual private clusters of cells, bound by buddy allocation.

HiveD (Zhao et al., OSDI '20) observed a *sharing anomaly* in quota-based
multi-tenant clusters: a virtual cluster (VC) with enough quota still waits,
because the free GPUs it is owed are scattered over nodes by other tenants'
jobs, and a gang needing one node or one PCIe switch cannot start. HiveD's
fix is to guarantee each VC its quota in *cells* (GPU, GPU pair, socket, node,
rack: :mod:`corral.placement.cells`) rather than in GPU counts, and to bind a VC's
cells to physical ones only while it uses them, by buddy allocation, so that
any request the VC's private cluster could serve is served in the shared one
(*sharing safety*).

A pass, in submit order (higher priority first when jobs have priorities):

1. **Guaranteed**: a job runs within its VC's cells when they can hold it:
   in a cell its VC already holds (the fullest that fits: packing, as HiveD's
   intra-VC scheduler does), else in a newly bound cell of the smallest level
   that fits. The binding prefers physical cells with the fewest opportunistic
   jobs on them (HiveD's lazy preemption); opportunistic jobs still in the
   chosen GPUs are preempted. A job wider than a node runs inside a rack cell
   of its VC, on as few nodes as it can, or else takes whole node cells of its
   VC (in one rack where possible).
   **Priorities**: a job that finds no room stops its VC's lower-priority
   guaranteed jobs, the fewest and lowest first, when that makes room in a
   cell the VC holds (HiveD's preemption inside a VC; another VC's cells are
   never touched), and the pass runs again right after so they take the room
   left.
2. **Opportunistic**: a job beyond its VC's cells (over its quota, or wider
   than its cells can ever hold) runs, at low priority, on idle GPUs, first
   those in no VC's bound cells (far from guaranteed jobs, so less likely to
   be preempted). Such a job is preempted whenever an owner's guaranteed job
   needs its GPUs. A job its VC's cells could hold waits for them, as on its
   private cluster. ``opportunistic=False`` makes every job wait.

A bound cell is released when its last guaranteed job leaves, merging with its
buddies. Failed hardware is kept out: ``bad_nodes`` (simulator) names nodes
whose cells are never bound, and live, GPUs the service withholds (drained
nodes) count as bad; a VC whose cells cannot all be bound on healthy hardware
then waits ("CellsUnavailable"). Quotas are GPU counts per VC (as Philly's, see
:mod:`corral.policies.vcs`), carved into whole cells of the cluster.

This module is the policy: the order of a pass and where each job goes. The
VCs' cells, their binding to physical cells, bad hardware and doomed cells are
the cell model's (:mod:`corral.placement.cell_binding`, over
:mod:`corral.placement.cells`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import numpy as np

from corral.model.cluster import Cluster
from corral.model.free_gpus import FreeGPUs
from corral.model.plan import Plan
from corral.model.state import RUNNING, SchedulerState
from corral.placement.cell_binding import CellBinding, level_for
from corral.placement.cells import CellTree, parse_rack_nodes, parse_sizes
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy, option_flag
from corral.policies.options import Option
from corral.policies.vcs import (
    GUARANTEED,
    OPPORTUNISTIC,
    QuotaClassReasons,
    VirtualClusters,
)

REQUEUE_AFTER = 1e-3
"""Seconds after a priority preemption at which the pass runs again, so that its
victims are placed in what room their VC has left at once, not at whatever
unrelated event comes next (which would make a VC's decisions depend on other
VCs' events, against sharing safety)."""


class HiveD(QuotaClassReasons, Policy):
    node_layouts = False  # (jobs are bound to cells of one node or a whole set of nodes)
    name = "hived"
    options: ClassVar[dict[str, Option]] = {
        "quotas": Option(
            "VC quotas as vc=GPUs,... (unset: each VC's share of the trace's GPU-time demand)",
            "text",
            unset=True,
        ),
        "cell_sizes": Option(
            "cell sizes in GPUs, comma-separated (auto: halving each node's GPU count)", "text"
        ),
        "rack_nodes": Option(
            "nodes per rack cell (auto: the most common run in a rack; 0: no rack cells)", "text"
        ),
        "opportunistic": Option(
            "run jobs beyond a VC's cells opportunistically on idle cells", "flag"
        ),
        "bad_nodes": Option("nodes never bound, comma-separated", "text"),
    }
    description = (
        "VC quotas as topology cells bound by buddy allocation; opportunistic jobs on idle cells"
    )
    live_note = (
        "VC quotas come from the service's 'vcs' setting (else equal shares, re-carved as "
        "VCs appear); drained nodes count as bad hardware"
    )

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        quotas: str | dict[str, float] | None = None,
        cell_sizes: str = "auto",
        rack_nodes: Any = "auto",
        opportunistic: Any = True,
        bad_nodes: str = "",
    ) -> None:
        super().__init__(placement)
        self.vcs = VirtualClusters(quotas)
        self.sizes = parse_sizes(cell_sizes)
        self.rack_nodes = parse_rack_nodes(rack_nodes)
        self.opportunistic = option_flag(opportunistic, "opportunistic")
        self.bad_node_names = [v.strip() for v in str(bad_nodes or "").split(",") if v.strip()]
        self._n = -1
        self._carved = -1
        self.tree: CellTree | None = None

    # ------------------------------------------------------------ set-up
    def _init(self, state: SchedulerState) -> None:
        cluster = state.cluster
        n = len(state.submit)
        self._n = n
        if self.tree is None or self.tree.cluster is not cluster:
            self.tree = CellTree(cluster, self.sizes, self.rack_nodes)
        self.vcs.ensure(state)
        self.kind = np.zeros(n, dtype=np.int8)
        """GUARANTEED or OPPORTUNISTIC for the job's current (or last) attempt."""
        self.tried = np.full(n, -1, dtype=np.int64)
        """The VC version at a job's last failed guaranteed try (retry when it moves)."""
        self.why: dict[int, str] = {}
        self.binding = CellBinding(self.tree, self.vcs, n, self.bad_node_names)
        self._carved_now()

    def _vc_setup(self) -> None:
        """(Re)carve the VCs' cells from their quotas; keep what is bound."""
        self.binding.recarve()
        self._carved_now()

    def _carved_now(self) -> None:
        k = len(self.vcs.names)
        self.fail_version = np.full(k, -1, dtype=np.int64)
        self.fail_size = np.zeros(k, dtype=np.int64)
        """The smallest job of any type a VC failed to place at ``fail_version``."""
        self.tried[:] = -1
        self._carved = self.vcs.version

    @property
    def doomed(self) -> dict[int, Counter[tuple[int, int]]]:
        """Cells each VC owns but cannot bind (see :meth:`CellBinding.doom`)."""
        return self.binding.doomed

    def prepare(self, state: SchedulerState) -> None:
        """Carve the VCs' cells for this state's jobs and cluster now (reports
        read ``cells`` before any pass; the first pass does it otherwise)."""
        if self._n != len(state.submit):
            self._init(state)

    def vc_cells(self) -> dict[str, dict[str, int]]:
        """Each VC's cells, as "<type> x<node GPUs>: <cell size>" -> count (reports)."""
        return self.binding.vc_cells()

    def quotas(self) -> dict[str, float]:
        return self.vcs.quotas()

    def private_cluster(self, v: int) -> Cluster | None:
        """The cluster VC ``v`` would own alone (see :meth:`CellBinding.private_cluster`)."""
        return self.binding.private_cluster(v)

    # ------------------------------------------------------------ the pass
    def schedule(self, state: SchedulerState) -> Plan:
        if self._n != len(state.submit):
            self._init(state)
        builder = PlanBuilder(state)
        self.vcs.see_live(state)
        if not state.known_in_advance:
            if self._carved != self.vcs.version:
                self._vc_setup()
            self.binding.sync_health(state)
        self._reconcile(state)
        self.binding.doom()
        self._gpu_job: np.ndarray | None = None
        if not len(state.pending):
            return builder.build()
        order = state.pending_in_order()
        if state.tiered:  # higher priority first, then submit order
            order = order[np.argsort(-state.priority[order], kind="stable")]
        vc = self.vcs.vc[order]
        need = state.gpus[order]
        owned = self.binding.vc_owned - self.binding.vc_doomed
        room = owned[vc] - self.binding.vc_used[vc]
        nominal = self.binding.vc_owned[vc] - self.binding.vc_used[vc]
        version = self.binding.vc_version[vc]
        # a VC that could not place a g-GPU job cannot place a larger one either
        # (a cell with room for more has a sub-cell with room for fewer), until
        # its cells change: only jobs of any type are skipped so
        smaller = (self.fail_version[vc] != version) | (need < self.fail_size[vc])
        due = (
            (room >= need)
            & (self.tried[order] != version)
            & (smaller | (state.type_req[order] >= 0))
        )
        live = not state.known_in_advance
        if live:
            self.why = {}
        lowest = self._lowest_priorities(state)
        if lowest is not None:
            # a preemption frees room mid-pass for the jobs after it: try them all
            due[:] = True
        started: set[int] = set()
        wake: float | None = None
        room_list = (owned - self.binding.vc_used).tolist()
        for i, v, g in zip(order[due].tolist(), vc[due].tolist(), need[due].tolist(), strict=True):
            if room_list[v] >= g:
                typed = state.type_req[i] >= 0
                now_version = self.binding.vc_version[v]
                if typed or self.fail_version[v] != now_version or g < self.fail_size[v]:
                    if self._place_guaranteed(builder, state, i, v, g):
                        room_list[v] -= g
                        started.add(i)
                        continue
                    self.tried[i] = now_version
                    if not typed:
                        if self.fail_version[v] != now_version:
                            self.fail_version[v], self.fail_size[v] = now_version, g
                        else:
                            self.fail_size[v] = min(self.fail_size[v], g)
            if (
                lowest is not None
                and state.priority[i] > lowest[v]
                and self.binding.vc_largest[v] >= g  # else its cells never hold it: opportunistic
            ):
                freed = self._preempt_for(builder, state, i, v, g)
                if freed is not None:
                    room_list[v] += freed - g
                    started.add(i)
                    lowest = self._lowest_priorities(state)
                    assert lowest is not None
                    wake = state.now + REQUEUE_AFTER
        if self.opportunistic:
            # only jobs beyond their VC's cells (its quota, or wider than its cells
            # can ever hold): one its cells could hold waits for them, as on its
            # private cluster (on idle GPUs, the VC's own later jobs would evict it)
            beyond = (np.asarray(room_list)[vc] < need) | (self.binding.vc_largest[vc] < need)
            self._place_opportunistic(builder, state, order[beyond], started)
        if live:
            self._note_reasons(builder, state, order, room, nominal)
        return builder.build(wake)

    # ------------------------------------------------------------ bookkeeping
    def _reconcile(self, state: SchedulerState) -> None:
        """Release the cells of guaranteed jobs that stopped; adopt running jobs
        the policy does not know (live, after the service restarted)."""
        tracked = self.binding.guaranteed.array()
        if len(tracked):
            gone = tracked[state.status[tracked] != RUNNING]
            for i in gone.tolist():
                self._release(i)
        running = state.running.array()
        if len(running):
            unknown = running[self.kind[running] == 0]
            for i in np.sort(unknown).tolist():
                adopted = self.binding.adopt(state, i)
                self.kind[i] = GUARANTEED if adopted else OPPORTUNISTIC

    def _release(self, i: int) -> None:
        self.binding.release(i)
        self.kind[i] = 0

    def _record(self, i: int, v: int, gpus: list[int], cells: list[int]) -> None:
        self.binding.record(i, v, gpus, cells)
        self.kind[i] = GUARANTEED

    # ------------------------------------------------------------ guaranteed
    def _place_guaranteed(
        self, builder: PlanBuilder, state: SchedulerState, i: int, v: int, g: int
    ) -> bool:
        tree = self.tree
        assert tree is not None
        usable = self.binding.usable()
        # prefix sums: a block's usable and free GPUs by two lookups (a sum over
        # each block of each held cell, for every job placed, was most of a pass)
        usable_before = np.concatenate(([0], np.cumsum(usable, dtype=np.int64)))
        free_before = np.concatenate(([0], np.cumsum(builder.free.mask, dtype=np.int64))).tolist()
        best: tuple[tuple[int, int, int, tuple[int, int, int], int], int, int] | None = None
        for cell, size, rank in self.binding.held_cells(state, i, v, g):
            first, span = tree.first_list[cell], tree.size_list[cell]
            avail = np.diff(usable_before[first : first + span + 1 : size])
            # best fit: the fullest cell the VC holds
            left = int(usable_before[first + span] - usable_before[first]) - g
            for k in np.flatnonzero(avail >= g).tolist():
                start = first + k * size
                busy = size - (free_before[start + size] - free_before[start])
                key = (left, int(avail[k]) - g, busy, rank, k)
                if best is None or key < best[0]:
                    best = (key, cell, start)
        if best is not None:
            _, cell, start = best
            return self._start_in(builder, state, i, v, g, [cell], start, usable)
        wide: list[int] = []
        spare: list[tuple[int, int, int, int]] = []  # (cell size, chain, level, job's level)
        for c in self.binding.chains_for(state, i):
            chain = tree.chains[c]
            if g > chain.node_gpus:
                wide.append(c)  # whole node cells, if no rack cell can hold it
            level = level_for(chain, g)
            if level < 0:
                continue
            for lv in range(level, len(chain.sizes)):
                if self.binding.spare(v, (c, lv)) > 0:
                    spare.append((chain.sizes[lv], c, lv, level))
                    break
        for _, c, lv, level in sorted(spare):
            cell = self.binding.buddy.bind(c, lv, self.binding.busy_cost(builder.free.mask))
            if cell < 0:
                continue  # only bad hardware left for this cell
            self.binding.bind_cell(v, cell)
            size = tree.chains[c].sizes[level]
            first, span = tree.first_list[cell], tree.size_list[cell]
            idle = builder.free.mask[first : first + span].reshape(-1, size)
            start = first + size * int(np.argmax(idle.sum(axis=1)))
            return self._start_in(builder, state, i, v, g, [cell], start, usable)
        return any(self._place_wide(builder, state, i, v, g, c) for c in wide)

    def _place_wide(
        self,
        builder: PlanBuilder,
        state: SchedulerState,
        i: int,
        v: int,
        g: int,
        c: int,
    ) -> bool:
        """A job wider than a node: whole node cells of its VC, plus one cell for
        the remainder; all newly bound, in one rack where the cells allow."""
        tree = self.tree
        assert tree is not None
        chain = tree.chains[c]
        top = chain.node_level
        whole, rest = divmod(g, chain.node_gpus)
        levels = [top] * whole
        if rest:
            fit = next(lv for lv, s in enumerate(chain.sizes) if s >= rest)
            spare = [lv for lv in range(fit, top) if self.binding.spare(v, (c, lv)) > 0]
            levels.append(spare[0] if spare else top)
        if levels.count(top) > self.binding.spare(v, (c, top)):
            return False
        cost = self.binding.busy_cost(builder.free.mask)
        rack_of = state.cluster.node_rack_list
        cells: list[int] = []
        for lv in levels:
            rack = rack_of[tree.node_of(cells[0])] if cells else -1

            def near(cell: int, rack: int = rack) -> float:
                off = rack >= 0 and rack_of[tree.node_of(cell)] != rack
                return cost(cell) + (1e6 if off else 0.0)

            cell = self.binding.buddy.bind(c, lv, near)
            if cell < 0:
                for back in cells:  # could not get them all: give back what was bound
                    self.binding.buddy.release(back)
                return False
            cells.append(cell)
        for cell in cells:
            self.binding.bind_cell(v, cell)
        gpus = [x for cell in cells for x in tree.gpus(cell)][:g]
        return self._take(builder, state, i, v, gpus, cells)

    def _start_in(
        self,
        builder: PlanBuilder,
        state: SchedulerState,
        i: int,
        v: int,
        g: int,
        cells: list[int],
        start: int,
        usable: np.ndarray,
    ) -> bool:
        """``g`` GPUs from the level cell beginning at ``start``: idle ones first,
        then those of opportunistic jobs (which are preempted)."""
        tree = self.tree
        assert tree is not None
        cell = cells[0]
        chain = tree.chains[tree.chain_list[cell]]
        size = next(s for s in chain.sizes if s >= g)
        mask = builder.free.mask
        width = min(size, chain.node_gpus)
        # within a rack cell, the nodes with the most GPUs to give first (the
        # gang spans as few nodes as it can)
        blocks = []
        for first in range(start, start + size, width):
            span = range(first, first + width)
            idle = [x for x in span if usable[x] and mask[x]]
            taken = [x for x in span if usable[x] and not mask[x]]
            blocks.append((-(len(idle) + len(taken)), -len(idle), first, idle + taken))
        blocks.sort()
        gpus = [x for block in blocks for x in block[3]][:g]
        return self._take(builder, state, i, v, gpus, cells)

    def _take(
        self,
        builder: PlanBuilder,
        state: SchedulerState,
        i: int,
        v: int,
        gpus: list[int],
        cells: list[int],
    ) -> bool:
        mask = builder.free.mask
        victims: list[int] = []
        for x in gpus:
            if not mask[x]:
                j = self._holder(state, builder, x)
                if j is None:
                    raise RuntimeError(f"GPU {x} is busy but no running job holds it")
                if j not in victims:
                    victims.append(j)
        for j in victims:
            builder.stop(j)
        builder.start(i, gpus)
        self._record(i, v, gpus, cells)
        return True

    def _holder(self, state: SchedulerState, builder: PlanBuilder, gpu: int) -> int | None:
        """The opportunistic job running on ``gpu`` (not one this plan already stopped)."""
        if self._gpu_job is None:
            self._gpu_job = np.full(state.cluster.total_gpus, -1, dtype=np.int64)
            for j, gpus in state.allocations().items():
                if self.kind[j] == OPPORTUNISTIC:
                    self._gpu_job[list(gpus)] = j
        j = int(self._gpu_job[gpu])
        if j < 0 or j in builder.plan.stops:
            return None
        return j

    # ------------------------------------------------------------ priorities
    def _lowest_priorities(self, state: SchedulerState) -> np.ndarray | None:
        """Per VC, the lowest priority among its guaranteed jobs still running in
        this plan (+inf: none); None when no job has a priority (traces).

        HiveD's priorities inside a VC: a waiting guaranteed job of a higher
        priority preempts its VC's lower-priority guaranteed jobs
        (:meth:`_preempt_for`); opportunistic jobs rank below them all.
        """
        if not state.tiered:
            return None
        out = np.full(len(self.vcs.names), np.inf)
        running = self.binding.guaranteed.array()
        if len(running):
            np.minimum.at(out, self.vcs.vc[running], state.priority[running].astype(np.float64))
        return out

    def _preempt_for(
        self, builder: PlanBuilder, state: SchedulerState, i: int, v: int, g: int
    ) -> int | None:
        """Stop the fewest, lowest-priority guaranteed jobs of VC ``v`` that make
        room for job ``i`` in one of the VC's bound cells, and start it there;
        the victims' GPUs in use (None: no cell would have room)."""
        tree = self.tree
        assert tree is not None
        mine = int(state.priority[i])
        usable = self.binding.usable()
        stopped = builder.plan.stops
        best: tuple[tuple[int, int, int, tuple[int, int, int], int], int, int, list[int]] | None
        best = None
        for cell, size, rank in self.binding.held_cells(state, i, v, g):
            first, span = tree.first_list[cell], tree.size_list[cell]
            for k, start in enumerate(range(first, first + span, size)):
                block = range(start, start + size)
                have = sum(1 for x in block if usable[x])
                if have >= g:
                    continue  # room without preempting: the pass' own business
                owners = np.where(self.binding.bad[block], -1, self.binding.g_used[block])
                held = Counter(int(j) for j in owners[owners >= 0])
                lower = [j for j in held if state.priority[j] < mine and j not in stopped]
                # lowest priority first, then the latest started
                lower.sort(key=lambda j: (int(state.priority[j]), -state.seg_start[j], -j))
                victims: list[int] = []
                for j in lower:
                    if have >= g:
                        break
                    victims.append(j)
                    have += held[j]
                if have < g:
                    continue
                top = max(int(state.priority[j]) for j in victims)
                key = (top, len(victims), sum(held[j] for j in victims), rank, k)
                if best is None or key < best[0]:
                    best = (key, cell, start, victims)
        if best is None:
            return None
        _, cell, start, victims = best
        freed = 0
        self.binding.cell_jobs[cell].add(-1)  # the cell stays bound while its victims leave
        for j in victims:
            freed += int(state.gpus[j])
            builder.stop(j)
            self._release(j)
        self.binding.cell_jobs[cell].discard(-1)
        self._start_in(builder, state, i, v, g, [cell], start, self.binding.usable())
        return freed

    # ------------------------------------------------------------ opportunistic
    def _place_opportunistic(
        self, builder: PlanBuilder, state: SchedulerState, order: np.ndarray, started: set[int]
    ) -> None:
        free = builder.free
        if free.total == 0:
            return
        gpus = state.gpus
        fits = gpus[order] <= free.total
        if not fits.any():  # the common case under load: nothing to place
            return
        order = order[fits]
        if started:
            order = order[~np.isin(order, list(started))]
            if not len(order):
                return
        mask = free.mask & ~self.binding.bad
        if not mask.any():
            return
        usable = FreeGPUs(state.cluster, mask)
        outside = FreeGPUs(state.cluster, mask & (self.binding.owner < 0))
        for i in order.tolist():
            if usable.total == 0:
                break
            g = int(gpus[i])
            if i in started or g > usable.total:
                continue
            bound = int(state.type_req[i])
            pools = (
                (outside, usable) if bound < 0 else (outside.of_type(bound), usable.of_type(bound))
            )
            chosen = None
            for pool in pools:
                if g <= pool.total:
                    chosen = self.placement.choose_for(pool, state, i)
                    if chosen is not None:
                        break
            if chosen is None:
                continue
            builder.start(i, chosen)
            usable.take(chosen)
            outside_ids = [x for x in chosen if outside.mask[x]]
            if outside_ids:
                outside.take(outside_ids)
            self.kind[i] = OPPORTUNISTIC

    # ------------------------------------------------------------ reasons
    def _note_reasons(
        self,
        builder: PlanBuilder,
        state: SchedulerState,
        order: np.ndarray,
        room: np.ndarray,
        nominal: np.ndarray,
    ) -> None:
        starts = builder.plan.starts
        for k, i in enumerate(order.tolist()):
            if i in starts:
                continue
            if nominal[k] < state.gpus[i]:  # beyond its VC's cells: waits for idle GPUs
                self.why[i] = "QuotaExceeded"
            elif room[k] < state.gpus[i] or self.binding.cell_bad.any():
                self.why[i] = "CellsUnavailable"  # some of its cells doomed, or bad hardware
            else:
                self.why[i] = "Resources"
