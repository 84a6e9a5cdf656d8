"""Liquid's network-cost-aware best fit."""

from __future__ import annotations

import numpy as np
import pytest

from corral.errors import CorralError
from corral.model.free_gpus import FreeGPUs
from corral.placement import make_placement
from corral.placement.network import NetworkBestFit, link_costs, placement_score
from tests.conftest import uniform


def test_link_costs_follow_liquid() -> None:
    cluster = uniform(6, 4, rack_size=4)  # racks of 4 and 2 nodes
    costs = link_costs(cluster)
    assert costs[0, 0] == 0.0
    assert costs[0, 1] == 4.0  # same rack: the rack's node count
    assert costs[4, 5] == 2.0
    assert costs[0, 5] == 6.0  # across racks: every node


def test_best_fit_fills_the_busiest_node_that_holds_the_job() -> None:
    cluster = uniform(3, 8)
    free = FreeGPUs(cluster)
    free.take(list(range(0, 6)) + list(range(8, 12)))  # node0: 2 free, node1: 4 free
    gpus = NetworkBestFit().choose(free, 4)
    assert gpus == [12, 13, 14, 15]  # node1 (half busy), not the empty node2
    assert NetworkBestFit().choose(free, 2) == [6, 7]


def test_a_gang_too_big_for_a_node_stays_in_one_rack() -> None:
    cluster = uniform(4, 4, rack_size=2)  # racks {0, 1} and {2, 3}
    free = FreeGPUs(cluster)
    free.take([0, 1, 2, 8, 9])  # node0: 1 free, node2: 2 free, nodes 1 and 3: 4 free
    gpus = NetworkBestFit().choose(free, 6)
    nodes = {cluster.gpu_node_list[g] for g in gpus}
    racks = {int(cluster.node_rack[n]) for n in nodes}
    assert len(gpus) == 6 and racks == {1}  # rack 0 has only 5 free GPUs
    # of the walks Liquid's greedy could take, this is the lowest-scoring: its
    # hub holds 4 GPUs, 2 more across one in-rack link
    counts = np.bincount([cluster.gpu_node_list[g] for g in gpus], minlength=4)
    assert counts.tolist() == [0, 0, 2, 4]
    costs = link_costs(cluster)
    spread = np.array([1, 1, 2, 2])  # what ignoring the cost would allow
    assert placement_score(cluster, free, counts, costs, 0.5) < placement_score(
        cluster, free, spread, costs, 0.5
    )


def test_network_placement_by_name_and_its_limits() -> None:
    assert isinstance(make_placement("network"), NetworkBestFit)
    free = FreeGPUs(uniform(1, 4))
    assert NetworkBestFit().choose(free, 5) is None
    with pytest.raises(ValueError, match="weight"):
        NetworkBestFit(weight=2.0)
    with pytest.raises(CorralError):
        make_placement("networks")
