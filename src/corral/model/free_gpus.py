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
    ``_with[c]`` has bit ``node`` set when the node has exactly ``c`` free GPUs.
    """

    __slots__ = ("_bits", "_with", "cluster", "mask", "node_free", "total")

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
        for node, count in enumerate(self.node_free.tolist()):
            self._with[count] |= 1 << node

    def copy(self) -> FreeGPUs:
        new = FreeGPUs.__new__(FreeGPUs)
        new.cluster = self.cluster
        new.mask = self.mask.copy()
        new.node_free = self.node_free.copy()
        new.total = self.total
        new._bits = self._bits.copy()
        new._with = self._with.copy()
        return new

    def take(self, gpus: Sequence[int]) -> None:
        mask = self.mask
        if len(gpus) > 1 and len(set(gpus)) != len(gpus):
            raise DoubleAllocation(f"GPUs {list(gpus)} repeat an id")
        for g in gpus:
            if not mask[g]:
                busy = [int(x) for x in gpus if not mask[x]]
                raise DoubleAllocation(f"GPUs {busy} are already in use")
        self._update(gpus, False, -1)

    def release(self, gpus: Sequence[int]) -> None:
        mask = self.mask
        for g in gpus:
            if mask[g]:
                idle = [int(x) for x in gpus if mask[x]]
                raise DoubleAllocation(f"GPUs {idle} released while free")
        self._update(gpus, True, +1)

    def _update(self, gpus: Sequence[int], value: bool, sign: int) -> None:
        # Scalar loops: allocations are a few GPUs, where numpy's per-call
        # overhead would dominate.
        cluster = self.cluster
        gpu_node, firsts = cluster.gpu_node_list, cluster.node_first_gpu_list
        mask, node_free, bits, with_count = self.mask, self.node_free, self._bits, self._with
        for g in gpus:
            node = gpu_node[g]
            mask[g] = value
            count = int(node_free[node])
            node_free[node] = count + sign
            flag = 1 << node
            with_count[count] ^= flag
            with_count[count + sign] ^= flag
            bits[node] ^= 1 << (g - firsts[node])
        self.total += sign * len(gpus)

    def indexes_agree(self) -> bool:
        """True when the counts and bitset indexes match the mask (invariant checks)."""
        fresh = FreeGPUs(self.cluster, self.mask)
        return (
            fresh.total == self.total
            and np.array_equal(fresh.node_free, self.node_free)
            and fresh._bits == self._bits
            and fresh._with == self._with
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

    def tightest_node(self, n: int) -> int:
        """The node with the fewest free GPUs that still has ``n`` free (the
        lowest-numbered among equals), or -1 when no node has ``n`` free."""
        with_count = self._with
        for count in range(max(n, 1), len(with_count)):
            nodes = with_count[count]
            if nodes:
                return (nodes & -nodes).bit_length() - 1
        return -1

    def rack_free(self) -> np.ndarray:
        """Free GPUs per rack (computed on demand: only multi-node placement asks)."""
        cluster = self.cluster
        return np.bincount(
            cluster.node_rack, weights=self.node_free, minlength=len(cluster.racks)
        ).astype(np.int64)

    def free_ids(self) -> np.ndarray:
        return np.flatnonzero(self.mask)

    def by_type(self) -> np.ndarray:
        """Free GPUs of each of the cluster's types (``cluster.gpu_type_names`` order)."""
        cluster = self.cluster
        return np.bincount(
            cluster.gpu_type_id[self.mask], minlength=len(cluster.gpu_type_names)
        ).astype(np.int64)

    def of_type(self, type_id: int) -> FreeGPUs:
        """A scratch view holding only the free GPUs of one type (for typed placement)."""
        return FreeGPUs(self.cluster, self.mask & (self.cluster.gpu_type_id == type_id))
