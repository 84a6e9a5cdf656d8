"""HiveD's cells: the cluster as a hierarchy of GPU groups, and buddy allocation.

HiveD (Zhao et al., OSDI '20) describes a cluster as *cells*: a GPU is a
level-1 cell, two GPUs under one PCIe switch a level-2 cell, a CPU socket's
GPUs a level-3 cell, a node a level-4 cell. Nodes of one kind (GPU type and
count) form a *chain*: their cells are alike level by level, so any free cell
of a level can stand in for any other. A virtual cluster owns a number of cells
per chain and level; its cells are bound to physical ones only while it uses
them, by buddy allocation: a request for a level-``k`` cell takes a free one,
or splits the smallest free cell above it into its children (the buddies),
and a released cell merges with its buddies once they are all free again.
Because a VC only ever asks for cells of the levels it owns, and the owned
cells fit the cluster (they were carved out of it, :func:`carve`), every
request a VC's private cluster could serve stays obtainable in the shared one.

Levels are derived from each node's GPU count by halving (8 GPUs: 1, 2, 4, 8;
2 GPUs: 1, 2), or given as sizes (``cell_sizes``), each dividing the next.
Above the node, a *rack* cell is ``rack_nodes`` nodes of the chain that sit
side by side in one rack (HiveD's level-5 cell). A buddy level needs identical
cells, and real racks hold different numbers of each node kind (Philly's hold
16, with one rack of 7), so by default ``rack_nodes`` is the most common run of
a chain's nodes in one rack; a rack's run is cut into cells of that many
nodes, and nodes left over stay node cells with no rack cell above them (the
top of their own tree). ``rack_nodes=0`` leaves racks out; jobs wider than a
node then take several node cells.

GPU ids of a cell are contiguous (GPUs are numbered node by node), so a cell
is a ``(first, size)`` range.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from corral.model.cluster import Cluster


def level_sizes(node_gpus: int, sizes: Iterable[int] | None = None) -> list[int]:
    """The cell sizes of a node with ``node_gpus`` GPUs, smallest (1) first.

    With ``sizes`` given, those that fit the node's chain (each divides the next
    and the node's count) are kept; the node itself is always the top level.
    """
    if sizes is None:
        out, s = [1], 1
        while node_gpus % (s * 2) == 0 and s * 2 < node_gpus:
            s *= 2
            out.append(s)
    else:
        out = [1]
        for s in sorted(set(int(v) for v in sizes)):
            if 1 < s < node_gpus and s % out[-1] == 0 and node_gpus % s == 0:
                out.append(s)
    if out[-1] != node_gpus:
        out.append(node_gpus)
    return out


def parse_sizes(text: str | None) -> list[int] | None:
    """``"1,2,4,8"`` as sizes; ``"auto"`` or empty means derive them (None)."""
    if text is None or str(text).strip().lower() in ("", "auto"):
        return None
    try:
        sizes = [int(v) for v in str(text).replace("/", ",").split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"cell_sizes '{text}': expected GPU counts such as 1,2,4,8") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"cell_sizes '{text}': sizes must be positive GPU counts")
    return sizes


def parse_rack_nodes(value: object) -> int | None:
    """``rack_nodes``: "auto" (None), 0 (no rack level) or a node count >= 2."""
    text = str(value).strip().lower() if value is not None else "auto"
    if text in ("", "auto"):
        return None
    if text in ("off", "none", "no", "false"):
        return 0
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"rack_nodes '{value}': expected auto, 0 or a node count") from None
    if count < 0 or count == 1:
        raise ValueError(f"rack_nodes '{value}': a rack cell needs at least 2 nodes (0: none)")
    return count


def rack_runs(cluster: Cluster, nodes: Iterable[int]) -> list[list[int]]:
    """The chain's nodes as runs of consecutive nodes in one rack (so that a
    run's GPUs are one contiguous range)."""
    runs: list[list[int]] = []
    racks = cluster.node_rack_list
    for node in sorted(nodes):
        if runs and runs[-1][-1] == node - 1 and racks[runs[-1][-1]] == racks[node]:
            runs[-1].append(node)
        else:
            runs.append([node])
    return runs


def auto_rack_nodes(runs: list[list[int]]) -> int:
    """The most common length of the runs of two nodes or more (the larger on a
    tie); 0 when no rack holds two of the chain's nodes side by side."""
    lengths = Counter(len(r) for r in runs if len(r) >= 2)
    if not lengths:
        return 0
    return max(lengths.items(), key=lambda kv: (kv[1], kv[0]))[0]


@dataclass(frozen=True)
class Chain:
    """Nodes of one kind and the cell sizes of their levels.

    ``sizes`` run from one GPU up to the node, then the rack cell when the
    chain has one (``rack_nodes`` > 0); ``node_level`` is the node's level.
    """

    gpu_type: str
    node_gpus: int
    sizes: tuple[int, ...]
    nodes: tuple[int, ...]
    rack_nodes: int = 0

    @property
    def node_level(self) -> int:
        return len(self.sizes) - 2 if self.rack_nodes else len(self.sizes) - 1

    @property
    def top(self) -> int:
        return len(self.sizes) - 1

    def describe(self) -> str:
        return f"{self.gpu_type} x{self.node_gpus}"


class CellTree:
    """Every cell of the cluster: level, GPU range, parent and children.

    Cell ids are dense integers; arrays hold each cell's chain, level, first
    GPU, size and parent (-1 for a top cell: a rack cell, or a node in none),
    and ``children`` lists its children.
    """

    def __init__(
        self,
        cluster: Cluster,
        sizes: Iterable[int] | None = None,
        rack_nodes: int | None = None,
    ) -> None:
        self.cluster = cluster
        wanted = list(sizes) if sizes is not None else None
        kinds: dict[tuple[str, int], list[int]] = {}
        for k, spec in enumerate(cluster.nodes):
            kinds.setdefault((spec.gpu_type, spec.gpus), []).append(k)
        self.chains: list[Chain] = []
        groups: list[list[list[int]]] = []
        """Per chain, its rack cells' nodes."""
        for (t, g), members in sorted(kinds.items()):
            runs = rack_runs(cluster, members)
            per_rack = auto_rack_nodes(runs) if rack_nodes is None else rack_nodes
            racks = [
                run[k : k + per_rack]
                for run in runs
                for k in range(0, len(run) - per_rack + 1 if per_rack else 0, per_rack or 1)
            ]
            levels = level_sizes(g, wanted)
            if racks:
                levels.append(per_rack * g)
            self.chains.append(Chain(t, g, tuple(levels), tuple(members), per_rack if racks else 0))
            groups.append(racks)
        chain_of: list[int] = []
        level: list[int] = []
        first: list[int] = []
        size: list[int] = []
        parent: list[int] = []
        self.children: list[list[int]] = []
        self.node_cell = np.full(cluster.num_nodes, -1, dtype=np.int64)
        """The node-level cell of each node."""
        for c, chain in enumerate(self.chains):

            def make(lv: int, start: int, up: int, c: int = c, chain: Chain = chain) -> int:
                cid = len(level)
                chain_of.append(c)
                level.append(lv)
                first.append(start)
                size.append(chain.sizes[lv])
                parent.append(up)
                self.children.append([])
                if lv > 0:
                    step = chain.sizes[lv - 1]
                    for s in range(start, start + chain.sizes[lv], step):
                        self.children[cid].append(make(lv - 1, s, cid, c, chain))
                return cid

            in_rack: set[int] = set()
            for group in groups[c]:
                # a rack cell's nodes are consecutive, so its GPUs are one range
                make(chain.top, int(cluster.node_first_gpu[group[0]]), -1)
                in_rack.update(group)
            for node in chain.nodes:
                if node not in in_rack:
                    make(chain.node_level, int(cluster.node_first_gpu[node]), -1)
        self.chain = np.array(chain_of, dtype=np.int64)
        self.level = np.array(level, dtype=np.int64)
        self.first = np.array(first, dtype=np.int64)
        self.size = np.array(size, dtype=np.int64)
        self.parent = np.array(parent, dtype=np.int64)
        self.first_list: list[int] = first
        self.size_list: list[int] = size
        self.level_list: list[int] = level
        self.parent_list: list[int] = parent
        self.chain_list: list[int] = chain_of
        node_level = np.array([ch.node_level for ch in self.chains], dtype=np.int64)
        node_cells = np.flatnonzero(self.level == node_level[self.chain])
        self.node_cell[cluster.gpu_node[self.first[node_cells]]] = node_cells
        self.leaf = np.full(cluster.total_gpus, -1, dtype=np.int64)
        """The level-1 cell of each GPU."""
        leaves = np.flatnonzero(self.level == 0)
        self.leaf[self.first[leaves]] = leaves

    def __len__(self) -> int:
        return len(self.level_list)

    def gpus(self, cell: int) -> range:
        start = self.first_list[cell]
        return range(start, start + self.size_list[cell])

    def node_of(self, cell: int) -> int:
        return int(self.cluster.gpu_node_list[self.first_list[cell]])

    def ancestor(self, cell: int, level: int) -> int:
        """The cell at ``level`` containing ``cell`` (``cell`` itself at its own level)."""
        while self.level_list[cell] < level:
            cell = self.parent_list[cell]
        return cell

    def smallest_containing(self, gpus: Iterable[int]) -> int:
        """The lowest cell holding all of ``gpus`` (-1 when they span nodes)."""
        gpus = list(gpus)
        cell = int(self.leaf[gpus[0]])
        lo, hi = min(gpus), max(gpus)
        while cell >= 0 and not (
            self.first_list[cell] <= lo and hi < self.first_list[cell] + self.size_list[cell]
        ):
            cell = self.parent_list[cell]
        return cell


class BuddyAllocator:
    """Free physical cells per chain and level; bind by splitting, release by merging.

    ``healthy(cell)`` says whether a cell may be handed out (no failed GPU in
    it); unhealthy cells are skipped when binding and split past when a healthy
    part of them is wanted.
    """

    def __init__(self, tree: CellTree, healthy: Callable[[int], bool] | None = None) -> None:
        self.tree = tree
        self.healthy = healthy or (lambda cell: True)
        self.free: list[list[set[int]]] = [[set() for _ in chain.sizes] for chain in tree.chains]
        for cell in np.flatnonzero(tree.parent < 0).tolist():
            self.free[tree.chain_list[cell]][tree.level_list[cell]].add(cell)

    def copy(self) -> BuddyAllocator:
        """A scratch allocator with the same free cells (trial bindings)."""
        out = BuddyAllocator.__new__(BuddyAllocator)
        out.tree, out.healthy = self.tree, self.healthy
        out.free = [[set(level) for level in chain] for chain in self.free]
        return out

    def free_cells(self, chain: int, level: int) -> int:
        """How many level-``level`` cells could be bound now, splitting larger ones."""
        sizes = self.tree.chains[chain].sizes
        total = 0
        for lv in range(level, len(sizes)):
            total += len(self.free[chain][lv]) * (sizes[lv] // sizes[level])
        return total

    def bind(self, chain: int, level: int, cost: Callable[[int], float] | None = None) -> int:
        """A free healthy cell of ``level`` (splitting a larger one if need be), or -1.

        Among candidates, the one of least ``cost`` (HiveD: the fewest
        opportunistic jobs to preempt), then the lowest id, is taken. A larger
        cell with failed hardware in it is split past, down to a healthy part.
        """
        tree, free = self.tree, self.free[chain]
        for lv in range(level, len(free)):
            pick = self._pick(free[lv], cost, level)
            if pick < 0:
                continue
            free[lv].discard(pick)
            while lv > level:  # split down to the level wanted
                kids = tree.children[pick]
                free[lv - 1].update(kids)
                lv -= 1
                pick = self._pick(free[lv], cost, level, among=kids)
                free[lv].discard(pick)
            return pick
        return -1

    def _pick(
        self, cells: set[int], cost: Callable[[int], float] | None, level: int, among=None
    ) -> int:
        pool = cells if among is None else [c for c in among if c in cells]
        best, best_key = -1, None
        for cell in pool:
            if not self._yields(cell, level):
                continue
            key = (cost(cell) if cost is not None else 0.0, cell)
            if best_key is None or key < best_key:
                best, best_key = cell, key
        return best

    def _yields(self, cell: int, level: int) -> bool:
        """A healthy cell of ``level`` can be had from ``cell``: it is healthy, or
        splitting it reaches one."""
        if self.healthy(cell):
            return True
        tree = self.tree
        if tree.level_list[cell] <= level:
            return False
        return any(self._yields(kid, level) for kid in tree.children[cell])

    def take(self, cell: int) -> bool:
        """Bind this very cell (live recovery: a job already runs in it); False if
        it, or a cell above it, is not free."""
        tree = self.tree
        chain, level = tree.chain_list[cell], tree.level_list[cell]
        free = self.free[chain]
        top = cell
        while top >= 0 and top not in free[tree.level_list[top]]:
            top = tree.parent_list[top]
        if top < 0:
            return False
        lv = tree.level_list[top]
        free[lv].discard(top)
        node = top
        while lv > level:
            kids = tree.children[node]
            free[lv - 1].update(kids)
            lv -= 1
            node = tree.ancestor(cell, lv)
            free[lv].discard(node)
        return True

    def release(self, cell: int) -> None:
        """Give a bound cell back, merging it with its buddies while all are free."""
        tree = self.tree
        free = self.free[tree.chain_list[cell]]
        lv = tree.level_list[cell]
        free[lv].add(cell)
        up = tree.parent_list[cell]
        while up >= 0 and all(k in free[lv] for k in tree.children[up]):
            for k in tree.children[up]:
                free[lv].discard(k)
            lv += 1
            free[lv].add(up)
            up = tree.parent_list[up]

    def is_free(self, cell: int) -> bool:
        """True when the cell, or a cell above it, is free (not bound, not split for a binding)."""
        tree = self.tree
        free = self.free[tree.chain_list[cell]]
        while cell >= 0:
            if cell in free[tree.level_list[cell]]:
                return True
            cell = tree.parent_list[cell]
        return False


def carve(
    tree: CellTree, quotas: dict[int, int], healthy: Callable[[int], bool] | None = None
) -> dict[int, Counter[tuple[int, int]]]:
    """Whole cells for each VC's quota in GPUs: VC -> {(chain, level): count}.

    The cells are cut out of the cluster itself, so the VCs' cells fit the
    cluster together: the condition under which buddy allocation keeps every
    VC's cells obtainable. The VC with the most quota still to carve takes the
    largest cell that fits it, one cell at a time, so large cells (whole nodes,
    which gangs need) are spread over every VC big enough for one rather than
    going all to the largest VCs. Quotas beyond the cluster get what is left.
    """
    scratch = BuddyAllocator(tree, healthy)
    out: dict[int, Counter[tuple[int, int]]] = {v: Counter() for v in quotas}
    sizes = [(s, c, lv) for c, ch in enumerate(tree.chains) for lv, s in enumerate(ch.sizes)]
    sizes.sort(key=lambda x: (-x[0], x[1]))
    left = {v: int(q) for v, q in quotas.items() if int(q) > 0}
    heap = [(-q, v) for v, q in left.items()]
    heapq.heapify(heap)
    while heap:
        _, v = heapq.heappop(heap)
        for size, chain, level in sizes:
            if (
                size <= left[v]
                and scratch.free_cells(chain, level) > 0
                and scratch.bind(chain, level) >= 0
            ):
                out[v][(chain, level)] += 1
                left[v] -= size
                if left[v] > 0:
                    heapq.heappush(heap, (-left[v], v))
                break
    return out
