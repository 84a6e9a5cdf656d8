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
    """Free GPUs of a cluster; cheap to copy so a policy can plan on a scratch copy."""

    __slots__ = ("cluster", "mask", "node_free", "total")

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

    def copy(self) -> FreeGPUs:
        new = FreeGPUs.__new__(FreeGPUs)
        new.cluster = self.cluster
        new.mask = self.mask.copy()
        new.node_free = self.node_free.copy()
        new.total = self.total
        return new

    def take(self, gpus: Sequence[int]) -> None:
        mask = self.mask
        if len(set(gpus)) != len(gpus):
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
        gpu_node = self.cluster.gpu_node_list
        mask, node_free = self.mask, self.node_free
        for g in gpus:
            mask[g] = value
            node_free[gpu_node[g]] += sign
        self.total += sign * len(gpus)

    def in_node(self, node: int, n: int) -> list[int]:
        """The first ``n`` free GPU ids of ``node``."""
        first = self.cluster.node_first_gpu_list[node]
        flags = self.mask[first : first + self.cluster.node_gpus_list[node]].tolist()
        return [first + k for k, free in enumerate(flags) if free][:n]

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
