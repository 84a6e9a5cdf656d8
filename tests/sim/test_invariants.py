"""Property tests: the engine's invariants hold for every policy on random workloads."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from corral.model.state import DONE
from corral.placement.registry import PLACEMENTS
from corral.policies import POLICIES, make_policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig, SimResult
from tests.conftest import jobs_table, run, uniform

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
    explicit_turns=st.booleans(),
)
def test_invariants_hold(
    rows, nodes, per_node, rack_size, policy, placement, switch_cost, explicit_turns
):
    cluster = uniform(nodes, per_node, rack_size)
    options: dict[str, object] = {"quantum": 100.0} if policy == "las" else {}
    if policy == "gandiva" and explicit_turns:
        options["timeslice"] = "quanta"
    result = run(rows, cluster, policy, switch_cost, placement=placement, **options)
    s = result.state
    wide = s.gpus > cluster.total_gpus
    # jobs wider than the cluster are rejected, all others finish (checked inside too)
    assert sorted(result.rejected) == [int(k) for k in (wide.nonzero()[0])]
    assert (s.status[~wide] == DONE).all()
    jct = s.finish_time[~wide] - s.submit[~wide]
    assert (jct >= s.duration[~wide] / s.max_speedup[~wide] - 1e-6).all()
    if not (result.policy.elastic or result.policy.resizes):
        assert (s.max_speedup <= 1.0).all()
    if policy in ("fifo", "sjf"):
        assert s.preemptions.sum() == 0


def _simulate(
    rows, cluster, policy: str, options: dict[str, object] | None = None, **config: object
) -> SimResult:
    """The engine with its invariant check on, under ``config``."""
    settings = SimConfig(check_invariants=True, **config)  # type: ignore[arg-type]
    made = make_policy(policy, **(options or {}))
    return Simulator(jobs_table(rows), cluster, made, settings).run()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(job, min_size=1, max_size=30),
    nodes=st.integers(min_value=1, max_value=4),
    per_node=st.sampled_from([2, 4, 8]),
    policy=st.sampled_from(sorted(POLICIES)),
    rate=st.sampled_from([0.1, 0.5]),
    retries=st.integers(min_value=0, max_value=3),
)
def test_invariants_hold_with_failures(rows, nodes, per_node, policy, rate, retries):
    from corral.model.state import FAILED

    cluster = uniform(nodes, per_node)
    result = _simulate(
        rows, cluster, policy, switch_cost=1.0, failure_rate=rate, max_retries=retries, seed=1
    )
    s = result.state
    ended = (s.status == DONE) | (s.status == FAILED)
    wide = s.gpus > cluster.total_gpus
    assert ended[~wide].all()
    # a job fails for good on its (retries + 1)-th failed attempt, never earlier
    assert (s.failures[s.status == FAILED] == retries + 1).all()
    assert (s.failures[s.status == DONE] <= retries).all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(job, min_size=1, max_size=30),
    nodes=st.integers(min_value=1, max_value=4),
    per_node=st.sampled_from([1, 2, 4]),
    policy=st.sampled_from(sorted(POLICIES)),
    every=st.sampled_from([30.0, 60.0, 360.0]),
)
def test_invariants_hold_on_a_grid_of_passes_with_every_start_charged(
    rows, nodes, per_node, policy, every
):
    """Pollux's artifact's mechanics (--preset pollux-sim) for any policy: passes only
    on the grid, 30 s at every start; every job still finishes, no GPU is used twice
    (checked inside), and every start falls on a tick."""
    cluster = uniform(nodes, per_node)
    options: dict[str, object] = {"quantum": 100.0} if policy == "las" else {}
    result = _simulate(
        rows,
        cluster,
        policy,
        options,
        switch_cost=30.0,
        decide_every=every,
        charge_first_start=True,
    )
    s = result.state
    wide = s.gpus > cluster.total_gpus
    assert (s.status[~wide] == DONE).all()
    started = s.first_start[~wide]
    assert ((started % every < 1e-6) | (every - started % every < 1e-6)).all()
    jct = s.finish_time[~wide] - s.submit[~wide]
    assert (jct >= 30.0 + s.duration[~wide] / s.max_speedup[~wide] - 1e-6).all()


def test_themis_never_stops_a_job_twice_in_one_pass() -> None:
    """On a grid of passes 360 s apart a lease can end in the pass that also starts
    Themis' round: the job was stopped for its lease, then again for the round, its
    GPUs released twice (DoubleAllocation; found by the property test above)."""
    import random

    rng = random.Random(0)  # (the first of such workloads drawn this way)
    rows = [
        (rng.uniform(0, 5000), rng.choice([1, 1, 1, 2, 2, 3, 4, 8]), rng.uniform(1, 20000))
        for _ in range(rng.randint(1, 30))
    ]
    nodes, per_node, every = (
        rng.randint(1, 4),
        rng.choice([1, 2, 4]),
        rng.choice([30.0, 60.0, 360.0]),
    )
    result = _simulate(
        rows,
        uniform(nodes, per_node),
        "themis",
        switch_cost=30.0,
        decide_every=every,
        charge_first_start=True,
    )
    s = result.state
    wide = s.gpus > nodes * per_node
    assert (s.status[~wide] == DONE).all()
