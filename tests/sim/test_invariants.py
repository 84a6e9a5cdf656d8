"""Property tests: the engine's invariants hold for every policy on random workloads."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from corral.model.state import DONE
from corral.placement.registry import PLACEMENTS
from corral.policies import POLICIES
from tests.conftest import run, uniform

job = st.tuples(
    st.floats(min_value=0, max_value=5000, allow_nan=False),
    st.sampled_from([1, 1, 1, 2, 2, 3, 4, 8]),
    st.floats(min_value=1, max_value=20000, allow_nan=False),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(job, min_size=1, max_size=40),
    nodes=st.integers(min_value=1, max_value=6),
    per_node=st.sampled_from([1, 2, 4, 8]),
    rack_size=st.integers(min_value=1, max_value=4),
    policy=st.sampled_from(sorted(POLICIES)),
    placement=st.sampled_from(sorted(PLACEMENTS)),
    switch_cost=st.sampled_from([0.0, 5.87, 60.0]),
)
def test_invariants_hold(rows, nodes, per_node, rack_size, policy, placement, switch_cost):
    cluster = uniform(nodes, per_node, rack_size)
    options = {"quantum": 100.0} if policy == "las" else {}
    result = run(rows, cluster, policy, switch_cost, placement=placement, **options)
    s = result.state
    wide = s.gpus > cluster.total_gpus
    # jobs wider than the cluster are rejected, all others finish (checked inside too)
    assert sorted(result.rejected) == [int(k) for k in (wide.nonzero()[0])]
    assert (s.status[~wide] == DONE).all()
    jct = s.finish_time[~wide] - s.submit[~wide]
    assert (jct >= s.duration[~wide] / s.max_speedup[~wide] - 1e-6).all()
    if not result.policy.elastic:
        assert (s.max_speedup <= 1.0).all()
    if policy in ("fifo", "sjf"):
        assert s.preemptions.sum() == 0
