"""Placement strategies choose the GPUs the docstrings promise."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import CorralError
from corral.model.cluster import Cluster, Node, assign_racks
from corral.model.free_gpus import DoubleAllocation, FreeGPUs
from corral.placement import Consolidate, RandomPlacement, Spread, make_placement
from tests.conftest import uniform


def _free_with(cluster: Cluster, busy: list[int]) -> FreeGPUs:
    free = FreeGPUs(cluster)
    if busy:
        free.take(busy)
    return free


def test_consolidate_picks_the_tightest_node_that_fits():
    cluster = uniform(3, 4)  # GPUs 0-3, 4-7, 8-11
    free = _free_with(cluster, [0, 1, 4])  # node0: 2 free, node1: 3 free, node2: 4 free
    assert Consolidate().choose(free, 2) == [2, 3]
    assert Consolidate().choose(free, 3) == [5, 6, 7]
    assert Consolidate().choose(free, 4) == [8, 9, 10, 11]


def test_consolidate_keeps_a_wide_job_in_one_rack_with_fewest_nodes():
    nodes = [Node(f"n{k}", "V100", 4) for k in range(4)]
    cluster = Cluster("c", assign_racks(nodes, 2), rack_size=2)  # racks {n0,n1}, {n2,n3}
    free = _free_with(cluster, [0, 1, 2, 8])  # rack0 free: 1+4, rack1 free: 3+4
    gpus = Consolidate().choose(free, 5)
    # rack0 has exactly 5 free: best fit; the 4-free node first
    assert sorted(gpus) == [3, 4, 5, 6, 7]


def test_consolidate_returns_none_when_too_few_free():
    free = _free_with(uniform(1, 4), [0, 1, 2])
    assert Consolidate().choose(free, 2) is None


def test_spread_uses_one_gpu_per_node_first():
    free = FreeGPUs(uniform(4, 4))
    gpus = Spread().choose(free, 4)
    assert sorted({g // 4 for g in gpus}) == [0, 1, 2, 3]
    gpus = Spread().choose(free, 6)
    assert len(gpus) == 6 and len({g // 4 for g in gpus}) == 4


def test_random_placement_is_seeded():
    free = FreeGPUs(uniform(4, 4))
    a = RandomPlacement(7).choose(free, 5)
    b = RandomPlacement(7).choose(free, 5)
    assert a == b and len(set(a)) == 5


def test_free_gpus_refuse_double_use():
    free = _free_with(uniform(1, 4), [1])
    with pytest.raises(DoubleAllocation):
        free.take([1])
    with pytest.raises(DoubleAllocation):
        free.take([2, 2])
    with pytest.raises(DoubleAllocation):
        free.release([3])
    assert free.total == 3 and free.node_free.tolist() == [3]


def test_unknown_placement():
    with pytest.raises(CorralError, match="unknown placement"):
        make_placement("nearest")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 6), st.integers(0, 10**6)), max_size=40))
def test_free_gpu_indexes_follow_any_takes_and_releases(ops: list[tuple[bool, int, int]]) -> None:
    """Whatever is taken and released, the bitset indexes agree with the mask, and
    the tightest node is the one a scan of the per-node counts finds (the
    fewest free GPUs that still fit, the lowest-numbered among equals)."""
    nodes = [Node(f"n{k}", "V100", size) for k, size in enumerate([4, 8, 2, 8, 4])]
    cluster = Cluster("mixed", assign_racks(nodes, 2), rack_size=2)
    free = FreeGPUs(cluster)
    held: list[list[int]] = []
    for take, n, pick in ops:
        if take or not held:
            gpus = Consolidate().choose(free, n)
            if gpus is not None:
                free.take(gpus)
                held.append(gpus)
        else:
            free.release(held.pop(pick % len(held)))
        assert free.indexes_agree()
        for want in range(1, cluster.max_node_gpus + 1):
            fits = [(int(c), k) for k, c in enumerate(free.node_free) if c >= want]
            assert free.tightest_node(want) == (min(fits)[1] if fits else -1)


def test_counting_on_one_type_never_mixes_types_in_a_gang() -> None:
    """Gavel's simulator's counting (``--preset gavel-sim``): the lowest free GPUs of
    the first type with room, never a gang over two types as plain counting gives."""
    nodes = [Node("k", "K80", 4), Node("p", "P100", 4), Node("v", "V100", 4)]
    cluster = Cluster("c", assign_racks(nodes, 3))
    k80, p100 = (cluster.gpu_type_names.index(t) for t in ("K80", "P100"))
    free = _free_with(cluster, [0, 1, 4])  # K80: 2 free, P100: 3 free, V100: 4 free
    count, one_type = make_placement("count"), make_placement("count-one-type")
    assert count.choose(free, 4) == [2, 3, 5, 6]  # (two types)
    gpus = one_type.choose(free, 4)
    assert gpus == [8, 9, 10, 11] and set(cluster.gpu_type_id[gpus]) == {2}
    assert one_type.choose(free, 2) == [2, 3]  # the lowest free GPUs, if of one type
    assert one_type.choose(free, 3) == [5, 6, 7]
    assert set(cluster.gpu_type_id[[2, 3]]) == {k80} and cluster.gpu_type_id[5] == p100
    free.take([8])
    assert one_type.choose(free, 4) is None  # 8 free, no type with 4
