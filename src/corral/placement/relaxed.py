"""Philly's gang placement: ask for the best locality first, relax it while waiting.

Philly places a distributed job on as few servers as possible inside one
InfiniBand domain (a rack here) and, if that is not free, waits and retries
with a looser constraint. Three levels, tried in this order:

0. ``fewest``: the fewest servers that could hold the job at all (one server
   when it fits on one), all in one rack;
1. ``rack``: any servers of one rack;
2. ``anywhere``: any free GPUs.

A level is a hard constraint: :meth:`RelaxedLocality.choose_level` returns
``None`` when it cannot be met, so the job keeps waiting. The policy decides
which level a job may use from how long it has waited.
"""

from __future__ import annotations

import numpy as np

from corral.model.cluster import Cluster
from corral.model.free_gpus import FreeGPUs
from corral.placement.strategies import PlacementStrategy, _take_from_nodes

LEVELS = ("fewest", "rack", "anywhere")


def fewest_nodes(cluster: Cluster, n: int) -> int:
    """The fewest servers that can hold ``n`` GPUs in an empty cluster."""
    sizes = np.sort(cluster.node_gpus)[::-1]
    return int(np.searchsorted(np.cumsum(sizes), n) + 1)


class RelaxedLocality(PlacementStrategy):
    name = "relaxed"
    description = "fewest servers in one rack, else one rack, else anywhere (Philly)"

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        """The best level that can be met now."""
        for level in range(len(LEVELS)):
            gpus = self.choose_level(free, n, level)
            if gpus is not None:
                return gpus
        return None

    def choose_level(self, free: FreeGPUs, n: int, level: int) -> list[int] | None:
        if n > free.total:
            return None
        cluster = free.cluster
        node_free = free.node_free
        if level >= 2:
            nodes = np.flatnonzero(node_free > 0)
            order = nodes[np.argsort(-node_free[nodes], kind="stable")]
            return _take_from_nodes(free, order, n)
        rack_free = free.rack_free()
        racks = np.flatnonzero(rack_free >= n)
        if not len(racks):
            return None
        limit = fewest_nodes(cluster, n) if level == 0 else None
        best: tuple[int, int, np.ndarray] | None = None
        for rack in racks[np.argsort(rack_free[racks], kind="stable")].tolist():
            nodes = np.flatnonzero((cluster.node_rack == rack) & (node_free > 0))
            # best fit: fullest-first order reaches n with the fewest servers
            order = nodes[np.argsort(-node_free[nodes], kind="stable")]
            count = int(np.searchsorted(np.cumsum(node_free[order]), n) + 1)
            if limit is not None and count > limit:
                continue
            if count == 1:  # one server: the tightest one that fits
                fits = nodes[node_free[nodes] >= n]
                order = fits[np.argsort(node_free[fits], kind="stable")]
            if best is None or count < best[0]:
                best = (count, rack, order)
            if count == 1:
                break
        if best is None:
            return None
        return _take_from_nodes(free, best[2], n)
