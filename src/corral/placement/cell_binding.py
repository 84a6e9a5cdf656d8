"""HiveD's virtual clusters as cells, and their binding to physical cells.

:mod:`corral.placement.cells` describes the cluster as cells and allocates
them by buddy allocation. This module holds what HiveD keeps on top of it for
every virtual cluster (VC): the cells its quota is carved into, which of them
are bound to which physical cells, the GPUs its guaranteed jobs use there, the
hardware that is bad (so never bound), and the *doomed* cells a VC loses when
bad hardware leaves too few healthy ones. The policy
(:mod:`corral.policies.hived`) decides which job goes where; every change to
the binding goes through here, so that the books (cells bound per VC, GPUs
used per VC, the version that tells the policy to try a waiting job again)
stay consistent.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from corral.errors import CorralError
from corral.model.cluster import Cluster, Node
from corral.model.state import IndexSet, SchedulerState
from corral.placement.cells import BuddyAllocator, CellTree, Chain, carve


class Quotas(Protocol):
    """What the binding reads of the VCs (:class:`corral.policies.vcs.VirtualClusters`)."""

    names: list[str]
    quota: np.ndarray
    vc: np.ndarray


def level_for(chain: Chain, g: int) -> int:
    """The level of the smallest cell of ``chain`` that holds ``g`` GPUs (-1: none)."""
    return next((lv for lv, s in enumerate(chain.sizes) if s >= g), -1)


class CellBinding:
    """The VCs' cells and their binding to the cluster's, for one job table."""

    def __init__(
        self,
        tree: CellTree,
        vcs: Quotas,
        jobs: int,
        bad_node_names: list[str],
    ) -> None:
        cluster = tree.cluster
        self.tree = tree
        self.vcs = vcs
        self.bad = np.zeros(cluster.total_gpus, dtype=bool)
        names = {node.name: k for k, node in enumerate(cluster.nodes)}
        for name in bad_node_names:
            node = names.get(name)
            if node is None and name.isdigit() and int(name) < cluster.num_nodes:
                node = int(name)
            if node is None:
                raise CorralError(f"bad_nodes: cluster '{cluster.name}' has no node '{name}'")
            first = int(cluster.node_first_gpu[node])
            self.bad[first : first + int(cluster.node_gpus[node])] = True
        self.configured_bad = self.bad.copy()
        self.count_bad()
        self.buddy = BuddyAllocator(tree, self.healthy)
        self.guaranteed = IndexSet(jobs)
        """Jobs running in their VC's cells."""
        self.job_cells: dict[int, list[int]] = {}
        self.cell_jobs: dict[int, set[int]] = {}
        self.cell_vc: dict[int, int] = {}
        self.cell_vid: dict[int, int] = {}
        """Each bound cell's virtual cell: its rank among its VC's cells of that kind."""
        self.virtual_free: dict[tuple[int, tuple[int, int]], list[int]] = {}
        """(VC, kind) -> virtual cells given back (a heap), reused lowest first."""
        self.g_used = np.full(cluster.total_gpus, -1, dtype=np.int64)
        """The guaranteed job on each GPU (-1: none)."""
        self.owner = np.full(cluster.total_gpus, -1, dtype=np.int64)
        """The VC whose bound cell holds each GPU (-1: none)."""
        self.bound: dict[int, Counter[tuple[int, int]]] = {}
        self.vc_used = np.zeros(0, dtype=np.int64)
        self.vc_cells_bound: dict[int, set[int]] = {}
        self.recarve()

    # ------------------------------------------------------------ carving
    def recarve(self) -> None:
        """(Re)carve the VCs' cells from their quotas; keep what is bound."""
        tree = self.tree
        k = len(self.vcs.names)
        quotas = {v: round(float(q)) for v, q in enumerate(self.vcs.quota)}
        self.cells: dict[int, Counter[tuple[int, int]]] = carve(tree, quotas, self.healthy)
        self.bound = {v: self.bound.get(v, Counter()) for v in range(k)}
        old_used = self.vc_used
        self.vc_used = np.zeros(k, dtype=np.int64)
        self.vc_used[: len(old_used)] = old_used
        self.vc_cells_bound = {v: self.vc_cells_bound.get(v, set()) for v in range(k)}
        chains = tree.chains
        self.vc_owned = np.array(
            [
                sum(chains[c].sizes[lv] * cnt for (c, lv), cnt in self.cells[v].items())
                for v in range(k)
            ],
            dtype=np.int64,
        )
        self.vc_largest = np.array(
            [
                max(
                    [chains[c].sizes[lv] for (c, lv), cnt in self.cells[v].items() if cnt]
                    + [
                        cnt * chains[c].node_gpus
                        for (c, lv), cnt in self.cells[v].items()
                        if lv == chains[c].node_level
                    ]
                    + [0]
                )
                for v in range(k)
            ],
            dtype=np.int64,
        )
        """The largest gang each VC's cells can ever hold (one cell, or its node cells)."""
        self.vc_version = np.zeros(k, dtype=np.int64)
        """Bumped when a VC's cells or their use change (a waiting job may fit now)."""
        self.doomed: dict[int, Counter[tuple[int, int]]] = {v: Counter() for v in range(k)}
        """Cells each VC owns but cannot bind: bad hardware left too few (HiveD's
        doomed cells; see :meth:`doom`)."""
        self.vc_doomed = np.zeros(k, dtype=np.int64)
        self._layout = 0
        """Bumped when a binding or the hardware's health changes (doom again)."""
        self._doomed_at = -1

    def vc_cells(self) -> dict[str, dict[str, int]]:
        """Each VC's cells, as "<type> x<node GPUs>: <cell size>" -> count (reports)."""
        out: dict[str, dict[str, int]] = {}
        for v, cells in self.cells.items():
            row: dict[str, int] = {}
            for (c, lv), cnt in sorted(cells.items()):
                chain = self.tree.chains[c]
                what = "-GPU rack" if lv > chain.node_level else "-GPU"
                row[f"{chain.describe()}: {chain.sizes[lv]}{what}"] = cnt
            out[self.vcs.names[v]] = row
        return out

    def private_cluster(self, v: int) -> Cluster | None:
        """The cluster VC ``v`` would own alone: its cells and nothing else.

        A rack cell is a rack of its nodes; any other cell is a node of the
        cell's size and type, in a rack of its own, so the private cluster's
        cells are the VC's level for level (and a gang spread over node cells
        crosses racks there as it may in the shared cluster). Sharing safety
        says each VC's jobs start in the shared cluster when they would here.
        """
        nodes: list[Node] = []
        racks = 0
        for (chain, level), count in sorted(self.cells[v].items()):
            ch = self.tree.chains[chain]
            rack = level > ch.node_level
            size = ch.node_gpus if rack else ch.sizes[level]
            for k in range(count):
                for m in range(ch.rack_nodes if rack else 1):
                    name = f"{ch.gpu_type}-{ch.sizes[level]}-{k}-{m}"
                    nodes.append(Node(name, ch.gpu_type, size, rack=racks))
                racks += 1
        return Cluster(f"private-{self.vcs.names[v]}", nodes) if nodes else None

    # ------------------------------------------------------------ health
    def count_bad(self) -> None:
        tree = self.tree
        csum = np.concatenate(([0], np.cumsum(self.bad)))
        self.cell_bad = csum[tree.first + tree.size] - csum[tree.first]

    def healthy(self, cell: int) -> bool:
        return bool(self.cell_bad[cell] == 0)

    def sync_health(self, state: SchedulerState) -> None:
        """Live: GPUs neither free nor held by a running job are withheld (drained)."""
        cluster = state.cluster
        if state.busy_gpus + state.free.total >= cluster.total_gpus:
            bad = self.configured_bad
        else:
            held = np.zeros(cluster.total_gpus, dtype=bool)
            for gpus in state.allocations().values():
                held[list(gpus)] = True
            bad = self.configured_bad | (~state.free.mask & ~held)
        if not np.array_equal(bad, self.bad):
            self.bad = bad.copy()
            self.count_bad()
            self.vc_version += 1
            self._layout += 1

    def spare(self, v: int, key: tuple[int, int]) -> int:
        """Cells of this (chain, level) VC ``v`` owns, may bind, and has not bound."""
        return self.cells[v][key] - self.doomed[v][key] - self.bound[v][key]

    def doom(self) -> None:
        """HiveD's doomed cells: when failed hardware leaves too few healthy
        free cells for every VC's unbound ones, decide now which VCs lose
        which cells, rather than letting whichever VC asks last find none.

        The VCs' unbound cells are bound, largest first, on a scratch copy of
        the free cells (healthy ones only); each kind that does not all fit is
        taken from the VCs owning the most cells of that kind (each loses one
        in turn; ties: the VC listed first), so a VC's loss is the smallest
        share of what it owns. The other VCs keep every cell they own. A VC's
        doomed cells come back when hardware does; its jobs beyond what it
        still has run opportunistically (``CellsUnavailable`` while they wait).
        """
        if self._doomed_at == self._layout:
            return
        self._doomed_at = self._layout
        if not self.vc_doomed.any() and not self.cell_bad.any():
            return  # healthy hardware, nothing doomed: nothing to decide
        k = len(self.vcs.names)
        doomed: dict[int, Counter[tuple[int, int]]] = {v: Counter() for v in range(k)}
        if self.cell_bad.any():
            tree = self.tree
            scratch = self.buddy.copy()
            wanted: Counter[tuple[int, int]] = Counter()
            for v in range(k):
                for key, count in self.cells[v].items():
                    wanted[key] += max(count - self.bound[v][key], 0)
            kinds = sorted(wanted, key=lambda key: (-tree.chains[key[0]].sizes[key[1]], key))
            for key in kinds:
                short = wanted[key]
                while short and scratch.bind(*key) >= 0:
                    short -= 1
                for _ in range(short):
                    # among VCs with an unbound cell of this kind left to lose
                    v = max(
                        (
                            u
                            for u in range(k)
                            if self.cells[u][key] - self.bound[u][key] > doomed[u][key]
                        ),
                        key=lambda u: (self.cells[u][key] - doomed[u][key], -u),
                    )
                    doomed[v][key] += 1
        self.doomed = doomed
        chains = self.tree.chains
        self.vc_doomed = np.array(
            [sum(chains[c].sizes[lv] * n for (c, lv), n in doomed[v].items()) for v in range(k)],
            dtype=np.int64,
        )

    # ------------------------------------------------------------ binding
    def bind_cell(self, v: int, cell: int) -> None:
        tree = self.tree
        key = (tree.chain_list[cell], tree.level_list[cell])
        # the lowest virtual cell of this kind the VC has not bound: placement
        # breaks ties by virtual cell, so a VC decides as on its private cluster
        spare = self.virtual_free.setdefault((v, key), [])
        self.cell_vid[cell] = heapq.heappop(spare) if spare else self.bound[v][key]
        self.cell_vc[cell] = v
        self.cell_jobs[cell] = set()
        self.bound[v][key] += 1
        self.vc_cells_bound[v].add(cell)
        self._layout += 1
        first, size = tree.first_list[cell], tree.size_list[cell]
        self.owner[first : first + size] = v

    def unbind(self, cell: int) -> None:
        tree = self.tree
        v = self.cell_vc.pop(cell)
        del self.cell_jobs[cell]
        key = (tree.chain_list[cell], tree.level_list[cell])
        heapq.heappush(self.virtual_free.setdefault((v, key), []), self.cell_vid.pop(cell))
        if self.bound[v][key] > self.cells[v][key]:
            # a cell bound past the VC's own (its quota shrank at a recarve, when a
            # new VC appeared, or a restart adopted it before): another VC may have
            # failed to bind this one, and must try its waiting jobs again (bound
            # within every VC's cells, buddy allocation never fails for want of
            # another VC's cell, so nothing else needs to try again)
            self.vc_version += 1
        self.bound[v][key] -= 1
        self.vc_cells_bound[v].discard(cell)
        self._layout += 1
        first, size = tree.first_list[cell], tree.size_list[cell]
        self.owner[first : first + size] = -1
        self.buddy.release(cell)

    def record(self, i: int, v: int, gpus: list[int], cells: list[int]) -> None:
        """Job ``i`` of VC ``v`` now runs, guaranteed, on ``gpus`` in ``cells``."""
        self.guaranteed.add(i)
        self.job_cells[i] = cells
        for cell in cells:
            self.cell_jobs[cell].add(i)
        self.g_used[gpus] = i
        self.vc_used[v] += len(gpus)
        self.vc_version[v] += 1

    def release(self, i: int) -> None:
        """Guaranteed job ``i`` has stopped: its GPUs back, its cells unbound
        when it was their last job."""
        tree = self.tree
        self.guaranteed.remove(i)
        cells = self.job_cells.pop(i)
        v = self.cell_vc[cells[0]]
        freed = 0
        for cell in cells:
            jobs = self.cell_jobs[cell]
            jobs.discard(i)
            if not jobs:
                self.unbind(cell)
        for cell in cells:
            for g in tree.gpus(cell):
                if self.g_used[g] == i:
                    self.g_used[g] = -1
                    freed += 1
        self.vc_used[v] -= freed
        self.vc_version[v] += 1

    def adopt(self, state: SchedulerState, i: int) -> bool:
        """A running job the policy did not start (recovery): recorded as
        guaranteed (True) if its GPUs lie in a cell its VC holds or may still
        bind; False: it runs opportunistically."""
        tree = self.tree
        gpus = list(state.alloc[i] or ())
        v = int(self.vcs.vc[i])
        if v >= 0 and gpus and all(self.g_used[g] < 0 for g in gpus):
            cell = tree.smallest_containing(gpus)
            if cell >= 0:
                held = tree.ancestor(cell, tree.level_list[cell])
                while held >= 0 and held not in self.cell_vc:
                    held = tree.parent_list[held]
                if held >= 0 and self.cell_vc[held] == v:
                    self.record(i, v, gpus, [held])
                    return True
                if held < 0:
                    chain = tree.chain_list[cell]
                    for lv in range(tree.level_list[cell], len(tree.chains[chain].sizes)):
                        key = (chain, lv)
                        if self.spare(v, key) > 0:
                            up = tree.ancestor(cell, lv)
                            if self.buddy.take(up):
                                self.bind_cell(v, up)
                                self.record(i, v, gpus, [up])
                                return True
        return False

    # ------------------------------------------------------------ queries
    def chains_for(self, state: SchedulerState, i: int) -> list[int]:
        """The chains job ``i`` may run on (those of its GPU type, if it names one)."""
        tree = self.tree
        bound = int(state.type_req[i])
        if bound < 0:
            return list(range(len(tree.chains)))
        name = state.cluster.gpu_type_names[bound]
        return [c for c, ch in enumerate(tree.chains) if ch.gpu_type == name]

    def usable(self) -> np.ndarray:
        """GPUs a guaranteed job may take: no guaranteed job on them, healthy."""
        return (self.g_used < 0) & ~self.bad

    def held_cells(
        self, state: SchedulerState, i: int, v: int, g: int
    ) -> Iterator[tuple[int, int, tuple[int, int, int]]]:
        """The cells VC ``v`` holds that are large enough for job ``i``'s ``g``
        GPUs: (cell, the size of the blocks of it the job could take, its rank:
        chain, level and virtual cell, by which ties break as on the VC's
        private cluster)."""
        tree = self.tree
        for c in self.chains_for(state, i):
            level = level_for(tree.chains[c], g)
            if level < 0:
                continue
            size = tree.chains[c].sizes[level]
            for cell in self.vc_cells_bound[v]:
                if tree.chain_list[cell] == c and tree.level_list[cell] >= level:
                    yield cell, size, (c, tree.level_list[cell], self.cell_vid[cell])

    def busy_cost(self, free_mask: np.ndarray) -> Callable[[int], float]:
        """Binding cost of a cell: its GPUs busy (with opportunistic jobs)."""
        firsts, sizes = self.tree.first_list, self.tree.size_list

        def cost(cell: int) -> float:
            first, size = firsts[cell], sizes[cell]
            return float(size - int(free_mask[first : first + size].sum()))

        return cost
