"""Placement strategies: which free GPUs a job gets.

All strategies here are *soft*: they return some GPUs whenever enough are
free, preferring better locality. Hard locality constraints (Philly's
relaxation, HiveD's cells) are separate strategies that may return ``None``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from corral.model.free_gpus import FreeGPUs

if TYPE_CHECKING:
    from corral.model.state import SchedulerState


class PlacementStrategy(ABC):
    name: str = ""
    description: str = ""

    @abstractmethod
    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        """``n`` free GPU ids, or ``None`` when the job cannot be placed now."""

    def choose_for(self, free: FreeGPUs, state: SchedulerState, i: int) -> list[int] | None:
        """GPUs for job ``i``: the exact layout it asked for (``state.nodes_req``: so
        many nodes, the same GPUs on each), else the strategy's choice."""
        nodes = int(state.nodes_req[i])
        if nodes:
            return free.in_layout(nodes, int(state.gpus[i]) // nodes)
        return self.choose_job(free, state, i)

    def choose_job(self, free: FreeGPUs, state: SchedulerState, i: int) -> list[int] | None:
        """The strategy's GPUs for job ``i``; strategies that look at the job (its
        model) override this."""
        return self.choose(free, int(state.gpus[i]))


class Consolidate(PlacementStrategy):
    """Fewest nodes, best fit: the tightest single node, else the tightest rack."""

    name = "consolidate"
    description = "fewest nodes, best fit (one node, else one rack, else anywhere)"

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        if n > free.total:
            return None
        if n <= free.cluster.max_node_gpus:
            best = free.tightest_node(n)
            if best >= 0:
                return free.in_node(best, n)
        rack = free.tightest_rack(n)
        return free.fullest_first(n, free.cluster.rack_node_bits[rack] if rack >= 0 else -1)


class Spread(PlacementStrategy):
    """As many nodes as possible: GPUs dealt one per node, emptiest nodes first."""

    name = "spread"
    description = "one GPU per node where possible, emptiest nodes first"

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        if n > free.total:
            return None
        nodes = np.flatnonzero(free.node_free > 0)
        order = nodes[np.argsort(-free.node_free[nodes], kind="stable")]
        share = {int(node): 0 for node in order}
        left = n
        level = 1
        while left:
            for node in order:
                if free.node_free[node] >= level:
                    share[int(node)] += 1
                    left -= 1
                    if not left:
                        break
            level += 1
        out: list[int] = []
        for node, count in share.items():
            if count:
                out.extend(free.in_node(node, count))
        return out


class AnyFree(PlacementStrategy):
    """The lowest-numbered free GPUs: GPU counting with no locality preference.

    This is the ``count`` scheme of Tiresias' simulator, where a job needs only
    enough free GPUs anywhere.
    """

    name = "count"
    description = "any free GPUs (lowest ids first), no locality preference"

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        if n > free.total:
            return None
        return free.free_ids()[:n].tolist()


class CountOneType(PlacementStrategy):
    """The lowest-numbered free GPUs all of one GPU type: GPU counting as Gavel's
    simulator does it, where a gang never spans types (its workers are of one
    type). Of the types with room, the one holding the lowest-numbered free GPU."""

    name = "count-one-type"
    description = "any free GPUs of one GPU type (lowest ids first), no locality preference"

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        if n > free.total:
            return None
        ids = free.free_ids()
        types = free.cluster.gpu_type_id[ids]
        if len(free.cluster.gpu_type_names) == 1:
            return ids[:n].tolist()
        room = np.bincount(types, minlength=len(free.cluster.gpu_type_names)) >= n
        for t in types[room[types]][:1].tolist():  # (the type of the lowest such GPU)
            return ids[types == t][:n].tolist()
        return None


class RandomPlacement(PlacementStrategy):
    """Uniformly random free GPUs (seeded): the no-locality baseline."""

    name = "random"
    description = "uniformly random free GPUs (seeded)"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        if n > free.total:
            return None
        ids = free.free_ids()
        return sorted(int(g) for g in self.rng.choice(ids, size=n, replace=False))
