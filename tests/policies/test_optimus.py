"""Optimus: the loss-curve and speed fits, the marginal-gain allocation, and the policy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import CorralError
from corral.estimate.convergence import (
    LossCurve,
    ServerSpeedCurve,
    SpeedCurve,
    fit_loss_curve,
    fit_server_speed,
    fit_speed,
)
from corral.model.jobs import JobTable
from corral.policies.optimus import Optimus
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig
from corral.traces.pollux import load_pollux
from tests.conftest import run, uniform


@pytest.mark.parametrize(
    "truth", [LossCurve(0.002, 0.5, 0.3), LossCurve(0.05, 0.2, 0.0), LossCurve(1e-4, 1.0, 2.0)]
)
def test_a_known_loss_curve_is_recovered(truth):
    k = np.linspace(0, 20000, 200)
    fit = fit_loss_curve(k, truth.loss(k))
    assert fit is not None
    assert fit.a == pytest.approx(truth.a, rel=0.02)
    assert fit.b == pytest.approx(truth.b, rel=0.02)
    assert fit.c == pytest.approx(truth.c, abs=1e-3 * max(truth.c, 1.0))


def test_a_noisy_curve_predicts_its_convergence_from_half_of_it():
    truth = LossCurve(0.002, 0.5, 0.3)
    target = 0.35
    total = truth.steps_to(target)
    rng = np.random.default_rng(1)
    k = np.arange(0, total / 2, 25.0)
    fit = fit_loss_curve(k, truth.loss(k) + rng.normal(0, 0.01, len(k)))
    assert fit is not None
    assert fit.steps_to(target) == pytest.approx(total, rel=0.25)


def test_loss_fits_refuse_what_they_cannot_fit():
    assert fit_loss_curve([0, 1], [2.0, 1.0]) is None  # too few points
    assert fit_loss_curve([0, 1, 2, 3], [1.0, 1.2, 1.4, 1.6]) is None  # rising: a = 0
    assert LossCurve(0.01, 1.0, 0.5).steps_to(0.4) == math.inf  # below the asymptote
    assert LossCurve(0.01, 1.0, 0.5).steps_to(2.0) == 0.0  # already there


def test_a_known_speed_curve_is_recovered():
    truth = SpeedCurve(1.0, 0.05, 0.01)
    sizes = [1, 2, 4, 8, 16]
    fit = fit_speed(sizes, [float(truth.speed(w)) for w in sizes])
    assert fit is not None
    for w in (1, 3, 12, 32):
        assert float(fit.speed(w)) == pytest.approx(float(truth.speed(w)), rel=1e-6)
    # one size seen: linear scaling from it
    one = fit_speed([4], [2.0])
    assert one is not None and float(one.speed(8)) == pytest.approx(4.0)
    assert fit_speed([], []) is None


curves = st.builds(
    SpeedCurve,
    st.floats(0.1, 10),
    st.floats(0, 1),
    st.floats(0, 0.5),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(1, 1000), curves), min_size=1, max_size=4),
    st.integers(1, 7),
)
def test_marginal_gain_allocation_matches_brute_force(jobs, capacity):
    """For speed curves of Optimus' form a job's time R t(w) is convex in w, so
    handing GPUs out one at a time to the largest drop minimises the sum of
    predicted completion times; checked against every allocation."""
    remaining = {j: r for j, (r, _) in enumerate(jobs)}
    speed = {j: c for j, (_, c) in enumerate(jobs)}
    got = _allocate(Optimus(), remaining, speed, capacity, {})

    def cost(alloc: dict[int, int]) -> float:
        return sum(remaining[j] / float(speed[j].speed(w)) for j, w in alloc.items())

    # the policy first gives one GPU to as many jobs as fit, shortest first
    n = len(jobs)
    assert sum(got.values()) <= capacity
    if capacity >= n:
        assert set(got) == set(range(n))
        best = min(
            cost(dict(enumerate(ws)))
            for ws in itertools.product(range(1, capacity + 1), repeat=n)
            if sum(ws) <= capacity
        )
        assert cost(got) == pytest.approx(best, rel=1e-9)
    else:
        assert len(got) == capacity and all(w == 1 for w in got.values())


def _allocate(
    policy: Optimus,
    remaining: dict[int, float],
    speed: dict[int, SpeedCurve],
    capacity: int,
    pinned: dict[int, int],
) -> dict[int, int]:
    policy._remaining, policy._curves = remaining, speed
    order = sorted(remaining, key=lambda j: (policy.cost(j, 1), j))
    return policy.allocate(list(remaining), capacity, pinned, order)


def test_pinned_jobs_keep_their_size_and_max_gpus_caps():
    remaining = {0: 100.0, 1: 100.0}
    speed = {0: SpeedCurve(1.0, 0.0, 0.0), 1: SpeedCurve(1.0, 0.0, 0.0)}
    assert _allocate(Optimus(), remaining, speed, 8, {0: 1}) == {0: 1, 1: 7}
    assert _allocate(Optimus(max_gpus=3), remaining, speed, 8, {}) == {0: 3, 1: 3}


def test_optimus_resizes_jobs_and_the_invariants_hold():
    # two 1-GPU jobs on 8 GPUs: linear scaling makes Optimus grow both
    result = run([(0.0, 1, 3600.0), (0.0, 1, 7200.0)], uniform(2, 4), "optimus")
    s = result.state
    assert (s.max_speedup > 1.0).all()
    assert (s.finish_time < s.duration).all()


def test_optimus_on_a_pollux_workload_predicts_from_the_curves(tmp_path):
    trace = tmp_path / "w.csv"
    trace.write_text(
        "name,time,application,num_replicas,batch_size\n"
        "a,0,cifar10,1,512\nb,60,imagenet,4,800\nc,120,ncf,2,1024\n"
    )
    jobs: JobTable = load_pollux(str(trace))
    policy = Optimus()
    result = Simulator(jobs, uniform(4, 4), policy, SimConfig(check_invariants=True)).run()
    assert (result.state.status == 3).all()
    assert policy.counts["fits"] > 0
    # the curve's prediction is used: the job's total predicted from half of its curve
    s = result.state
    i = s.job_ids.index("a")
    assert s.batch_size[i] == 512


def test_bad_options_are_refused():
    with pytest.raises(Exception, match="interval"):
        Optimus(interval=0)
    with pytest.raises(Exception, match="min_change"):
        Optimus(min_change=1.5)


# ---- parameter servers -------------------------------------------------------


def test_optimus_server_speed_model_is_recovered():
    truth = ServerSpeedCurve((2.0, 0.1, 0.3, 0.01, 0.02))
    points = [(w, p) for w in (1, 2, 4, 8, 16) for p in (1, 2, 4, 8)]
    fit = fit_server_speed(
        [w for w, _ in points], [p for _, p in points], [truth.speed(w, p) for w, p in points]
    )
    assert fit is not None
    for w, p in [(3, 3), (12, 5), (32, 16)]:
        assert fit.speed(w, p) == pytest.approx(truth.speed(w, p), rel=1e-6)


@pytest.mark.parametrize("model", ["imagenet", "bert", "cifar10"])
def test_more_servers_never_slow_a_job_and_one_worker_needs_none(model):
    from corral.model.cluster import Links
    from corral.perf.communication import model_profile, ps_factor

    profile = model_profile(model)
    assert profile is not None
    assert ps_factor(profile, 1, 1, 4, Links()) == 1.0
    for gpus in (2, 4, 8, 16):
        factors = [ps_factor(profile, gpus, p, 4, Links()) for p in range(1, 20)]
        assert all(b >= a - 1e-12 for a, b in itertools.pairwise(factors))
        assert factors[0] < 1.0  # one server for a gang is a bottleneck


def _servers_trace(tmp_path) -> JobTable:
    trace = tmp_path / "w.csv"
    rows = [
        f"j{k},{60 * k},{model},{gpus},{batch}"
        for k, (model, gpus, batch) in enumerate(
            [("imagenet", 4, 800), ("cifar10", 1, 512), ("bert", 2, 24), ("yolov3", 2, 64)] * 3
        )
    ]
    trace.write_text("name,time,application,num_replicas,batch_size\n" + "\n".join(rows) + "\n")
    return load_pollux(str(trace))


def test_optimus_with_parameter_servers_never_uses_more_than_it_has(tmp_path):
    jobs = _servers_trace(tmp_path)
    policy = Optimus(parameter_servers=3)
    most = 0
    schedule = policy.schedule

    def watched(state):
        nonlocal most
        plan = schedule(state)
        held = sum(
            p for j, p in policy._servers.items() if j in set(state.running) - set(plan.stops)
        )
        held += sum(policy._servers.get(j, 0) for j in plan.starts)
        most = max(most, held)
        return plan

    policy.schedule = watched  # type: ignore[method-assign]
    result = Simulator(jobs, uniform(4, 4), policy, SimConfig(check_invariants=True)).run()
    assert (result.state.status == 3).all()
    assert 0 < most <= 3
    assert policy.counts["servers_started"] >= policy.counts["server_starts"] > 0
    # with few servers the jobs are slower than all-reduce lets them be
    allreduce = Simulator(jobs, uniform(4, 4), Optimus(), SimConfig()).run()
    assert allreduce.state.finish_time.mean() < result.state.finish_time.mean()


def test_parameter_servers_are_refused_live(tmp_path):
    from tests.runtime.harness import make_config

    make_config(tmp_path, policy="optimus", policy_options={})
    with pytest.raises(ValueError, match="parameter_servers is for the simulator"):
        make_config(tmp_path, policy="optimus", policy_options={"parameter_servers": 8})


class _Linear:
    """A speed curve that grows with every GPU up to ``most``, then stays."""

    def __init__(self, most: int) -> None:
        self.most = most

    def speed(self, gpus: int) -> float:
        return float(min(gpus, self.most))


def test_drf_fills_equal_shares_in_arrival_order_while_speed_grows():
    """One GPU each, then water-filling: the job holding fewest gets the next GPU
    (earliest first among equals); a job no faster with another leaves the filling."""
    policy = Optimus(allocation="drf")
    policy._remaining = {0: 100.0, 1: 1.0, 2: 50.0, 3: 10.0}
    policy._curves = {0: _Linear(8), 1: _Linear(8), 2: _Linear(2), 3: _Linear(8)}
    alloc = policy._equal_shares(9, pinned={}, order=[0, 1, 2, 3])
    assert alloc == {0: 3, 1: 2, 2: 2, 3: 2}  # job 2 stops at 2; work left does not matter
    assert policy._equal_shares(3, pinned={}, order=[2, 0, 1, 3]) == {2: 1, 0: 1, 1: 1}
    assert policy._equal_shares(6, pinned={3: 4}, order=[3, 0, 1]) == {3: 4, 0: 1, 1: 1}


class _ServerLinear:
    """Speed linear in workers up to ``most``, halved without a server per two."""

    def __init__(self, most: int) -> None:
        self.most = most

    def speed(self, workers: float, servers: float) -> float:
        return min(workers, self.most) * (1.0 if servers * 2 >= workers else 0.5)


@pytest.mark.parametrize("split", [1, 2])
def test_drf_with_servers_equalises_dominant_shares_in_each_jobs_split(split):
    """Two resources: each job asks a server per ``split`` workers; the next worker
    (with the server its split then needs) goes to the job whose dominant share is
    smallest; work left does not matter."""
    policy = Optimus(allocation="drf", parameter_servers=6, drf_split=split)
    policy._servers_free = 6
    policy._remaining = {0: 100.0, 1: 1.0, 2: 50.0}
    policy._server_curves = {j: _ServerLinear(8) for j in range(3)}
    alloc = policy._equal_shares(12, pinned={}, order=[0, 1, 2])
    servers = policy._planned_servers
    assert all(servers[j] == -(-alloc[j] // split) for j in alloc)  # the job's own split
    assert sum(servers.values()) <= 6 and sum(alloc.values()) <= 12
    shares = [max(alloc[j] / 12, servers[j] / 6) for j in alloc]
    assert max(shares) - min(shares) <= max(1 / 12, 1 / 6) + 1e-9  # one step apart at most
    if split == 1:
        assert alloc == {0: 2, 1: 2, 2: 2}  # servers run out first: 6 of them, one per worker
    else:
        assert alloc == {0: 4, 1: 4, 2: 4}  # a server per two workers: the GPUs run out


def test_drf_and_oracle_predictions_run_pollux_workload_and_oracle_is_refused_live(tmp_path):
    jobs = _servers_trace(tmp_path)
    for options in (
        {"allocation": "drf"},
        {"allocation": "drf", "parameter_servers": 3, "drf_split": 2},
        {"predictions": "oracle"},
    ):
        result = Simulator(
            jobs, uniform(4, 4), Optimus(**options), SimConfig(check_invariants=True)
        ).run()
        assert not np.isnan(result.state.finish_time).any()
    from tests.runtime.harness import make_config

    with pytest.raises(ValueError, match="predictions=oracle reads the trace's true work"):
        make_config(tmp_path, policy="optimus", policy_options={"predictions": "oracle"})
    with pytest.raises(CorralError, match="allocation must be optimus or drf"):
        Optimus(allocation="fair")
    with pytest.raises(CorralError, match="drf_split must be a whole number >= 1"):
        Optimus(allocation="drf", drf_split=0)
