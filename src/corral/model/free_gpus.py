"""Which GPUs are free, kept per GPU, per node and per rack.

This is the one place that says a GPU is free or taken; taking a GPU that is
not free raises, so no GPU can be given to two jobs by mistake.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from corral.model.cluster import Cluster


class DoubleAllocation(RuntimeError):
    """A GPU was handed out while already in use (a scheduler bug, never input)."""


class FreeGPUs:
    """Free GPUs of a cluster; cheap to copy so a policy can plan on a scratch copy.

    Besides the per-GPU mask and per-node counts that vectorised code reads,
    it keeps two bitset indexes as Python integers, because the simulator
    takes and releases GPUs hundreds of thousands of times per run and a
    best-fit node must be found without scanning every node: ``_bits[node]``
    has bit ``k`` set when the node's ``k``-th GPU is free, and
    ``_with[c]`` has bit ``node`` set when the node has exactly ``c`` free GPUs;
    ``_rack[r]`` counts rack ``r``'s free GPUs, so multi-node placement picks
    a rack without a numpy pass either.
    """

    __slots__ = ("_bits", "_rack", "_with", "cluster", "mask", "node_free", "total")

    def __init__(self, cluster: Cluster, mask: np.ndarray | None = None) -> None:
        self.cluster = cluster
        if mask is None:
            self.mask = np.ones(cluster.total_gpus, dtype=bool)
            self.node_free = cluster.node_gpus.copy()
        else:
            self.mask = mask.copy()
            self.node_free = np.bincount(
                cluster.gpu_node[self.mask], minlength=cluster.num_nodes
            ).astype(np.int64)
        self.total = int(self.node_free.sum())
        flags = self.mask.tolist()
        self._bits: list[int] = []
        for first, size in zip(cluster.node_first_gpu_list, cluster.node_gpus_list, strict=True):
            self._bits.append(sum(1 << k for k in range(size) if flags[first + k]))
        self._with: list[int] = [0] * (cluster.max_node_gpus + 1)
        self._rack: list[int] = [0] * len(cluster.racks)
        for node, count in enumerate(self.node_free.tolist()):
            self._with[count] |= 1 << node
            self._rack[cluster.node_rack_list[node]] += count

    def copy(self) -> FreeGPUs:
        new = FreeGPUs.__new__(FreeGPUs)
        new.cluster = self.cluster
        new.mask = self.mask.copy()
        new.node_free = self.node_free.copy()
        new.total = self.total
        new._bits = self._bits.copy()
        new._with = self._with.copy()
        new._rack = self._rack.copy()
        return new

    def take(self, gpus: Sequence[int]) -> None:
        self._update(gpus, False)

    def release(self, gpus: Sequence[int]) -> None:
        self._update(gpus, True)

    def _update(self, gpus: Sequence[int], value: bool) -> None:
        """Mark ``gpus`` free (``value``) or taken, checking first that each was
        the opposite, so a refused update changes nothing.

        Scalar loops over a node's GPUs at a time: allocations are a few GPUs
        on one or two nodes, where numpy's per-call overhead would dominate,
        and a node's free count is its bitset's population count.
        """
        cluster = self.cluster
        gpu_node, firsts = cluster.gpu_node_list, cluster.node_first_gpu_list
        bits = self._bits
        wanted: dict[int, int] = {}  # node -> bits of its GPUs in ``gpus``
        if len(gpus) == 1:  # most jobs: no grouping needed
            g = gpus[0]
            node = gpu_node[g]
            wanted[node] = 1 << (g - firsts[node])
        else:
            for g in gpus:
                node = gpu_node[g]
                bit = 1 << (g - firsts[node])
                have = wanted.get(node, 0)
                if have & bit:
                    raise DoubleAllocation(f"GPUs {list(gpus)} repeat an id")
                wanted[node] = have | bit
        for node, want in wanted.items():
            if (bits[node] & want) != (0 if value else want):
                state = "released while free" if value else "are already in use"
                wrong = [int(x) for x in gpus if bool(self.mask[x]) == value]
                raise DoubleAllocation(f"GPUs {wrong} {state}")
        mask = self.mask
        for g in gpus:
            mask[g] = value
        node_free, with_count, rack_free = self.node_free, self._with, self._rack
        node_rack = cluster.node_rack_list
        for node, want in wanted.items():
            count = bits[node].bit_count()
            bits[node] ^= want
            moved = want.bit_count()
            after = count + moved if value else count - moved
            node_free[node] = after
            flag = 1 << node
            with_count[count] ^= flag
            with_count[after] ^= flag
            rack_free[node_rack[node]] += after - count
            self.total += after - count

    def indexes_agree(self) -> bool:
        """True when the counts and bitset indexes match the mask (invariant checks)."""
        fresh = FreeGPUs(self.cluster, self.mask)
        return (
            fresh.total == self.total
            and np.array_equal(fresh.node_free, self.node_free)
            and fresh._bits == self._bits
            and fresh._with == self._with
            and fresh._rack == self._rack
        )

    def in_node(self, node: int, n: int) -> list[int]:
        """The first ``n`` free GPU ids of ``node``."""
        first = self.cluster.node_first_gpu_list[node]
        bits = self._bits[node]
        out: list[int] = []
        while bits and len(out) < n:
            low = bits & -bits
            out.append(first + low.bit_length() - 1)
            bits ^= low
        return out

    def in_layout(self, nodes: int, per_node: int) -> list[int] | None:
        """``per_node`` free GPUs on each of exactly ``nodes`` nodes, or None when
        fewer nodes have them. Nodes of one GPU type are preferred (a gang runs at
        its slowest GPU's pace): the type whose tightest fitting nodes leave the
        fewest GPUs free, else the tightest nodes of any type; lowest-numbered
        among equals."""
        free = self.node_free.tolist()
        fit = sorted(
            (k for k, left in enumerate(free) if left >= per_node), key=lambda k: (free[k], k)
        )
        if len(fit) < nodes:
            return None
        types = self.cluster.node_types
        best: list[int] | None = None
        for kind in sorted(set(types[k] for k in fit)):
            mine = [k for k in fit if types[k] == kind][:nodes]
            if len(mine) == nodes and (
                best is None or sum(free[k] for k in mine) < sum(free[k] for k in best)
            ):
                best = mine
        chosen = best if best is not None else fit[:nodes]
        return [g for k in sorted(chosen) for g in self.in_node(k, per_node)]

    def tightest_node(self, n: int, among: int = -1) -> int:
        """The node with the fewest free GPUs that still has ``n`` free (the
        lowest-numbered among equals), or -1 when no node has ``n`` free;
        only nodes in the bitset ``among`` count (all when -1)."""
        with_count = self._with
        for count in range(max(n, 1), len(with_count)):
            nodes = with_count[count] & among
            if nodes:
                return (nodes & -nodes).bit_length() - 1
        return -1

    def nodes_needed(self, n: int, among: int = -1) -> int:
        """How many of the nodes in the bitset ``among`` hold ``n`` free GPUs,
        taken fullest first (their number when they hold fewer than ``n``)."""
        with_count = self._with
        needed, left = 0, n
        for count in range(len(with_count) - 1, 0, -1):
            nodes = (with_count[count] & among).bit_count()
            if nodes * count >= left:
                return needed + (left + count - 1) // count
            needed += nodes
            left -= nodes * count
        return needed

    def rack_free(self) -> list[int]:
        """Free GPUs per rack (a copy)."""
        return self._rack.copy()

    def tightest_rack(self, n: int) -> int:
        """The rack with the fewest free GPUs that still has ``n`` free (the
        lowest-numbered among equals), or -1 when no rack has ``n`` free."""
        best, best_free = -1, 0
        for rack, count in enumerate(self._rack):
            if count >= n and (best < 0 or count < best_free):
                best, best_free = rack, count
        return best

    def fullest_first(self, n: int, among: int = -1) -> list[int]:
        """``n`` free GPUs from the nodes in the bitset ``among`` (all nodes
        when -1), taking nodes with the most free GPUs first and the
        lowest-numbered among equals; fewer when those nodes hold fewer."""
        with_count, bits = self._with, self._bits
        firsts = self.cluster.node_first_gpu_list
        out: list[int] = []
        for count in range(len(with_count) - 1, 0, -1):
            nodes = with_count[count] & among
            while nodes:
                low = nodes & -nodes
                nodes ^= low
                node = low.bit_length() - 1
                free_bits, first = bits[node], firsts[node]
                while free_bits:
                    bit = free_bits & -free_bits
                    out.append(first + bit.bit_length() - 1)
                    if len(out) == n:
                        return out
                    free_bits ^= bit
        return out

    def free_ids(self) -> np.ndarray:
        """Free GPU ids, ascending. (Hot paths here call array methods rather
        than numpy's functions such as ``flatnonzero``, whose Python wrappers
        cost more than the work on arrays this small.)"""
        return self.mask.nonzero()[0]

    def by_type(self) -> np.ndarray:
        """Free GPUs of each of the cluster's types (``cluster.gpu_type_names`` order)."""
        cluster = self.cluster
        return np.bincount(
            cluster.gpu_type_id[self.mask], minlength=len(cluster.gpu_type_names)
        ).astype(np.int64)

    def of_type(self, type_id: int) -> FreeGPUs:
        """A scratch view holding only the free GPUs of one type (for typed placement)."""
        if len(self.cluster.gpu_type_names) == 1 and type_id == 0:
            return self.copy()  # every GPU is of that type (a copy costs a tenth)
        return FreeGPUs(self.cluster, self.mask & (self.cluster.gpu_type_id == type_id))

    def of_types(self, allowed: np.ndarray) -> FreeGPUs:
        """A scratch view holding only the free GPUs of the types ``allowed`` marks
        (a boolean per type, in ``cluster.gpu_type_names`` order)."""
        return FreeGPUs(self.cluster, self.mask & allowed[self.cluster.gpu_type_id])
