"""Liquid's network-cost-aware best fit: GPUs chosen one at a time by a score.

Liquid (Gu et al., IEEE TPDS 2021) places a job's instances one by one, each
on the candidate node where the placement so far scores lowest:

    Score = lambda x Cost + (1 - lambda) x sum over used nodes of Fitness

``Cost`` is the communication cost between the job's instances: 0 between
instances on one node, the number of nodes in the rack between nodes of one
rack, and the number of nodes in the cluster (Liquid's "domain") across racks.
Liquid sums it between every parameter server and every worker; corral's gangs
synchronise by all-reduce without parameter servers, so the cost is summed
between the node holding most of the job's GPUs (the hub) and each of the
job's GPUs elsewhere (a stated adaptation: it is 0 on one node and grows with
every GPU placed farther away, as Liquid's does). ``Fitness = -(GPUs asked +
GPUs used) / GPUs`` of a node rewards filling nodes that are already busy
(best fit), so whole free nodes stay whole for gangs.
"""

from __future__ import annotations

import numpy as np

from corral.model.cluster import Cluster
from corral.model.free_gpus import FreeGPUs
from corral.placement.strategies import PlacementStrategy


def link_costs(cluster: Cluster) -> np.ndarray:
    """Liquid's cost between every pair of nodes: 0 on one node, the rack's
    node count within a rack, the cluster's node count across racks."""
    rack = cluster.node_rack
    in_rack = np.bincount(rack, minlength=len(cluster.racks))
    same_rack = rack[:, None] == rack[None, :]
    cost = np.where(same_rack, in_rack[rack][:, None], cluster.num_nodes).astype(np.float64)
    np.fill_diagonal(cost, 0.0)
    return cost


def placement_score(
    cluster: Cluster, free: FreeGPUs, counts: np.ndarray, costs: np.ndarray, weight: float
) -> float:
    """Liquid's score of placing ``counts[node]`` GPUs of a job on each node."""
    used = np.flatnonzero(counts)
    if not len(used):
        return 0.0
    hub = int(used[np.argmax(counts[used])])
    cost = float((costs[hub, used] * counts[used]).sum())
    total = cluster.node_gpus[used]
    busy = total - free.node_free[used]
    fitness = float((-(counts[used] + busy) / total).sum())
    return weight * cost + (1.0 - weight) * fitness


class NetworkBestFit(PlacementStrategy):
    name = "network"
    description = "Liquid: GPUs placed one at a time where network cost + best-fit score is lowest"

    def __init__(self, weight: float = 0.5) -> None:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"network placement weight must be in [0, 1], got {weight}")
        self.weight = float(weight)
        self._costs: dict[int, np.ndarray] = {}

    def costs(self, cluster: Cluster) -> np.ndarray:
        key = id(cluster)
        if key not in self._costs:
            self._costs = {key: link_costs(cluster)}
        return self._costs[key]

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        if n > free.total:
            return None
        cluster = free.cluster
        total = cluster.node_gpus.astype(np.float64)
        busy = (cluster.node_gpus - free.node_free).astype(np.float64)
        fits = np.flatnonzero(free.node_free >= n)
        if len(fits):
            # on one node the cost is 0: the node whose fitness is lowest (best fit)
            node = int(fits[np.argmin(-(n + busy[fits]) / total[fits])])
            return free.in_node(node, n)
        costs = self.costs(cluster)
        best: tuple[float, np.ndarray] | None = None
        for start in self._starts(free):
            counts, score = self._walk(free, n, start, costs, total, busy)
            if best is None or score < best[0]:
                best = (score, counts)
        assert best is not None
        out: list[int] = []
        for node in np.flatnonzero(best[1]).tolist():
            out.extend(free.in_node(node, int(best[1][node])))
        return out

    @staticmethod
    def _starts(free: FreeGPUs) -> list[int]:
        """Where a walk may begin: the node with the most free GPUs of each rack."""
        cluster = free.cluster
        starts = []
        for rack in range(len(cluster.racks)):
            nodes = np.flatnonzero((cluster.node_rack == rack) & (free.node_free > 0))
            if len(nodes):
                starts.append(int(nodes[np.argmax(free.node_free[nodes])]))
        return starts

    def _walk(
        self,
        free: FreeGPUs,
        n: int,
        start: int,
        costs: np.ndarray,
        total: np.ndarray,
        busy: np.ndarray,
    ) -> tuple[np.ndarray, float]:
        """Liquid's walk: each further GPU where the placement then scores
        lowest. Returns the GPUs per node and the placement's score."""
        w = self.weight
        counts = np.zeros(len(total), dtype=np.int64)
        left = free.node_free.astype(np.int64).copy()
        counts[start] = 1
        left[start] -= 1
        hub, cost = start, 0.0
        fitness = -(1.0 + busy[start]) / total[start]
        for _ in range(n - 1):
            cand = np.flatnonzero(left > 0)
            grows = counts[cand] + 1 > counts[hub]
            # a new hub re-centres the cost on itself; otherwise one more link to the hub
            cost_new = np.where(grows, costs[cand] @ counts, cost + costs[hub, cand])
            gain = np.where(counts[cand] == 0, -(1.0 + busy[cand]), -1.0) / total[cand]
            scores = w * cost_new + (1.0 - w) * (fitness + gain)
            k = int(np.argmin(scores))
            node = int(cand[k])
            cost, fitness = float(cost_new[k]), fitness + float(gain[k])
            if grows[k]:
                hub = node
            counts[node] += 1
            left[node] -= 1
        return counts, w * cost + (1.0 - w) * fitness
