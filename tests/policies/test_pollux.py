"""Pollux: statistical efficiency, goodput-optimal batch sizes, the p-mean
allocation against brute force, and the policy on Pollux's own jobs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.model.cluster import Links
from corral.model.state import DONE
from corral.perf.communication import model_profile
from corral.perf.goodput import efficiency, goodput_model, noise_at
from corral.perf.pollux_models import noise_curve
from corral.policies.pollux import Pollux
from corral.policies.resizing import ResizingPolicy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig
from corral.traces import load_trace
from tests.conftest import uniform


def test_statistical_efficiency():
    assert efficiency(1000.0, 128, 128) == 1.0
    assert efficiency(1000.0, 128, 1024) < efficiency(1000.0, 128, 256) < 1.0
    # a large noise scale makes large batches nearly free
    assert efficiency(1e9, 128, 4096) == pytest.approx(1.0, abs=1e-5)


def test_noise_scale_grows_along_a_curve_and_batches_follow_it():
    steps, noise = noise_curve("cifar10", 512)
    assert noise[-1] > 10 * noise[0]
    assert noise_at("cifar10", 512, 0) == noise[0]
    assert noise_at("cifar10", 512, steps[-1] + 1) == noise[-1]
    profile = model_profile("cifar10")
    assert profile is not None
    gm = goodput_model(profile, Links(), 4, 512)
    early, late = gm.best(8, noise[0]), gm.best(8, noise[-1])
    assert 512 <= early[0] < late[0] <= gm.max_batch
    # the best batch's goodput beats the initial batch's at the same size
    assert early[1] >= gm.throughput(8, 512) * efficiency(noise[0], 512, 512)
    # more GPUs never lower the best goodput here (the search may keep the batch)
    assert gm.best(4, noise[-1])[1] <= gm.best(8, noise[-1])[1]


class _Fixed(ResizingPolicy):
    """A resizing policy with given speed-up curves and Pollux's p = -1 cost."""

    name = "fixed"

    def __init__(self, curves: dict[int, tuple[float, float]]) -> None:
        super().__init__()
        self.curves = curves

    def speedup(self, j: int, w: int) -> float:
        slope, sync = self.curves[j]
        return 1.0 + slope * (w - 1) / (1.0 + sync * (w - 1))

    def prepare(self, state, jobs, speeds):  # pragma: no cover - not used here
        pass

    def cost(self, j: int, gpus: int) -> float:
        return 1.0 / self.speedup(j, gpus)

    def admission_key(self, state, j):  # pragma: no cover - not used here
        return (j,)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 2.0)), min_size=1, max_size=4),
    st.integers(1, 7),
)
def test_harmonic_mean_allocation_matches_brute_force(curves, capacity):
    """Concave speed-ups make each job's 1/speed-up convex, so the greedy
    allocation maximises the harmonic mean; checked against every allocation."""
    policy = _Fixed(dict(enumerate(curves)))
    jobs = list(range(len(curves)))
    got = policy.allocate(jobs, capacity, {}, jobs)
    if capacity < len(jobs):  # too few GPUs: the first in order get one each
        assert got == {j: 1 for j in jobs[:capacity]}
        return
    best = min(
        sum(policy.cost(j, w) for j, w in enumerate(ws))
        for ws in itertools.product(range(1, capacity + 1), repeat=len(jobs))
        if sum(ws) <= capacity
    )
    assert sum(policy.cost(j, w) for j, w in got.items()) == pytest.approx(best, rel=1e-9)


def test_pollux_runs_pollux_jobs_with_goodput_and_batch_sizes():
    jobs = load_trace("pollux-6", 32).head(24)
    policy = Pollux()
    cluster = uniform(8, 4, gpu_type="T4")
    result = Simulator(jobs, cluster, policy, SimConfig(check_invariants=True)).run()
    s = result.state
    assert (s.status == DONE).all()
    assert policy.counts["resizes"] > 0 and policy.counts["retunes"] > 0
    # every job ran at or above its initial batch size, within what was trained
    for j, batch in policy.batches.items():
        assert batch >= s.batch_size[j]
    # some job ran faster than on the GPUs it asked for (more GPUs, larger batch)
    assert (s.max_speedup > 1.0).any()


def test_pollux_on_a_trace_without_batch_sizes_divides_gpus_by_speed_ups():
    rows = [(0.0, 1, 3600.0), (0.0, 2, 7200.0), (100.0, 1, 600.0)]
    from tests.conftest import run

    result = run(rows, uniform(2, 4), "pollux")
    assert (result.state.status == DONE).all()


def test_bad_options_are_refused():
    with pytest.raises(Exception, match="p must be"):
        Pollux(p=0)
    with pytest.raises(Exception, match="interval"):
        Pollux(interval=-1)
