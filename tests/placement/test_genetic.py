"""Liquid's grouping genetic algorithm packs bursts whole and within capacity."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.model.free_gpus import FreeGPUs
from corral.placement.genetic import BatchPacker, first_fit
from corral.placement.network import link_costs
from tests.conftest import uniform


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 1, 2, 3, 4, 8]), min_size=1, max_size=10),
    busy=st.sets(st.integers(0, 31), max_size=20),
    seed=st.integers(0, 3),
)
def test_plans_are_whole_gangs_within_the_free_gpus(sizes, busy, seed) -> None:
    cluster = uniform(4, 8, rack_size=2)
    free = FreeGPUs(cluster)
    free.take(sorted(busy))
    plans = BatchPacker(seed=seed).pack(free, sizes)
    per_node = np.zeros(cluster.num_nodes, dtype=np.int64)
    for size, plan in zip(sizes, plans, strict=True):
        assert sum(plan.values()) in (0, size)  # all of a gang or none of it
        for node, n in plan.items():
            per_node[node] += n
    assert (per_node <= free.node_free).all()
    # nothing is left out that first fit in submit order would have placed
    counts = np.zeros((len(sizes), cluster.num_nodes), dtype=np.int64)
    order = np.argsort(free.node_free, kind="stable")
    first_fit(np.array(sizes), list(range(len(sizes))), counts, free.node_free.copy(), order)
    placed_ff = int(counts.any(axis=1).sum())
    assert sum(bool(p) for p in plans) >= placed_ff


def test_the_search_improves_on_first_fit_and_is_reproducible() -> None:
    cluster = uniform(4, 4, rack_size=2)
    free = FreeGPUs(cluster)
    free.take([0, 1, 4, 8, 9, 10])  # free per node: 2, 3, 1, 4
    sizes = [3, 2, 1, 4]
    plans = BatchPacker(seed=1).pack(free, sizes)
    assert all(plans)  # every job fits: 10 GPUs for 10
    # the 4-GPU job takes the whole free node; the 3-GPU one the node with 3
    assert plans[3] == {3: 4} and plans[0] == {1: 3}
    assert BatchPacker(seed=1).pack(free, sizes) == plans
    assert link_costs(cluster).shape == (4, 4)
