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

import bisect

from corral.model.cluster import Cluster
from corral.model.free_gpus import FreeGPUs
from corral.placement.strategies import PlacementStrategy

LEVELS = ("fewest", "rack", "anywhere")


def fewest_nodes(cluster: Cluster, n: int) -> int:
    """The fewest servers that can hold ``n`` GPUs in an empty cluster."""
    return bisect.bisect_left(cluster.capacity_fullest_first, n) + 1


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
        if level >= 2:
            return free.fullest_first(n)
        cluster = free.cluster
        rack_free = free.rack_free()
        racks = sorted(
            (r for r in range(len(rack_free)) if rack_free[r] >= n), key=rack_free.__getitem__
        )
        limit = fewest_nodes(cluster, n) if level == 0 else n  # level 1: any number of servers
        best, best_count = -1, 0
        # racks with the fewest free GPUs first; in each, fullest-first order
        # reaches n with the fewest servers
        for rack in racks:
            among = cluster.rack_node_bits[rack]
            count = free.nodes_needed(n, among)
            if count > limit:
                continue
            if count == 1:  # one server: the tightest one that fits
                return free.in_node(free.tightest_node(n, among), n)
            if best < 0 or count < best_count:
                best, best_count = rack, count
        if best < 0:
            return None
        return free.fullest_first(n, cluster.rack_node_bits[best])
