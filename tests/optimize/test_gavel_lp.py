"""Gavel's allocation LPs: feasibility and the known optima of small instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.optimize.gavel_lp import (
    AllocationProblem,
    finish_time_fairness,
    max_min_fairness,
    max_min_fairness_packed,
    max_throughput,
    min_makespan,
)


def assert_feasible(p: AllocationProblem, x: np.ndarray) -> None:
    assert (x >= -1e-7).all()
    assert (x.sum(axis=1) <= 1 + 1e-6).all()
    assert ((p.gpus[:, None] * x).sum(axis=0) <= p.capacity + 1e-6).all()
    assert (x[~p.fits()] <= 1e-9).all()


def test_max_min_equalises_normalised_throughput_on_a_symmetric_example() -> None:
    # two identical jobs, one V100 and one K80: each gets half of each type
    p = AllocationProblem(np.array([[4.0, 1.0], [4.0, 1.0]]), np.array([1, 1]), np.array([1, 1]))
    x = max_min_fairness(p)
    assert_feasible(p, x)
    thr = (p.throughput * x).sum(axis=1)
    assert thr[0] == pytest.approx(thr[1], rel=1e-5)
    assert thr.sum() == pytest.approx(5.0, rel=1e-5)  # both GPUs fully used


def test_max_min_is_heterogeneity_aware() -> None:
    # job 0 gains 10x on the fast type, job 1 gains nothing: job 1 should take the slow one
    p = AllocationProblem(np.array([[10.0, 1.0], [1.0, 1.0]]), np.array([1, 1]), np.array([1, 1]))
    x = max_min_fairness(p)
    assert_feasible(p, x)
    assert x[0, 0] == pytest.approx(1.0, abs=1e-5) and x[1, 1] == pytest.approx(1.0, abs=1e-5)
    agnostic = max_min_fairness(p, agnostic=True)
    assert_feasible(p, agnostic)
    assert np.allclose(agnostic, 0.5)  # blind to speed: half of each


def test_agnostic_shares_are_spread_evenly_even_beside_a_job_that_cannot_run_on_a_type() -> None:
    """Gavel's agnostic baseline sees speed 1 everywhere, and its interior-point solver
    spreads each job's share over the types: any job may then take any type in a
    round. A vertex instead put each job's whole share on one type, and did so as soon
    as one job could not run on some type (its speed there 0), which left 1-GPU jobs
    beside gangs at half their rounds (7.27 h against Gavel's 3.41 h on its 300-job
    trace). The job that cannot run on a type keeps a share there, as in Gavel, where
    its rounds skip that type."""
    speeds = np.array([[1.0, 2.0, 3.0]] * 16)
    speeds[1, 0] = 0.0  # job 1 does not fit a K80's memory
    p = AllocationProblem(speeds, np.array([1] * 14 + [4, 4]), np.array([4, 4, 4]))
    x = max_min_fairness(p, agnostic=True)
    assert np.allclose(x, x[:, :1])  # each job's share split evenly over the three types
    gpu_share = x.sum(axis=1) * p.gpus
    assert np.allclose(gpu_share, gpu_share[0], rtol=1e-4)  # every job the same GPUs (max-min)
    assert ((p.gpus[:, None] * x).sum(axis=0) <= p.capacity + 1e-6).all()
    assert gpu_share[0] < 1  # (demand exceeds the GPUs: a fair share, not all of them)
    assert x[1, 0] > 0  # its share on the type it cannot run on: Gavel's blind LP's


def test_weights_give_proportional_shares() -> None:
    p = AllocationProblem(np.ones((2, 1)), np.array([1, 1]), np.array([3]), np.array([2.0, 1.0]))
    x = max_min_fairness(p)
    assert x[:, 0] == pytest.approx([1.0, 1.0], abs=1e-6)  # each capped at all of the time
    p = AllocationProblem(np.ones((2, 1)), np.array([1, 1]), np.array([1]), np.array([2.0, 1.0]))
    assert max_min_fairness(p)[:, 0] == pytest.approx([2 / 3, 1 / 3], abs=1e-5)


def test_min_makespan_balances_finish_times() -> None:
    # one GPU; jobs with 100 and 300 steps left at 1 step/s: makespan 400
    p = AllocationProblem(np.ones((2, 1)), np.array([1, 1]), np.array([1]))
    x = min_makespan(p, np.array([100.0, 300.0]))
    assert_feasible(p, x)
    rates = x[:, 0]
    assert max(100 / rates[0], 300 / rates[1]) == pytest.approx(400, rel=1e-4)


def test_max_throughput_puts_each_job_where_it_gains_most() -> None:
    p = AllocationProblem(np.array([[10.0, 1.0], [2.0, 1.0]]), np.array([1, 1]), np.array([1, 1]))
    x = max_throughput(p)
    assert_feasible(p, x)
    # normalised: job 0 gets 1 + 0.1 on (V, K) or ..., the best is job 0 on V, job 1 on K
    assert x[0, 0] == pytest.approx(1.0) and x[1, 1] == pytest.approx(1.0)


def test_finish_time_fairness_equalises_rho() -> None:
    p = AllocationProblem(np.ones((2, 1)), np.array([1, 1]), np.array([1]))
    total = np.array([100.0, 100.0])
    x, rho = finish_time_fairness(p, np.zeros(2), total)
    assert_feasible(p, x)
    # alone on half the GPU each takes 200 s; sharing it, each also takes 200 s: rho 1
    assert rho == pytest.approx(1.0, rel=1e-3)
    assert x[:, 0] == pytest.approx([0.5, 0.5], abs=1e-3)


def test_max_min_weighs_throughput_by_gang_size_as_gavel_does() -> None:
    # 4 GPUs of one type, a 4-GPU job and four 1-GPU jobs, equal speeds: Gavel
    # multiplies normalised throughput by the scale factor, so equal levels are
    # equal GPU-time: the gang gets 0.2 of the time, each 1-GPU job 0.8
    p = AllocationProblem(np.ones((5, 1)), np.array([4, 1, 1, 1, 1]), np.array([4]))
    x = max_min_fairness(p)
    assert_feasible(p, x)
    assert x[:, 0] == pytest.approx([0.2, 0.8, 0.8, 0.8, 0.8], abs=1e-5)


def test_isolated_share_divides_the_equal_share_by_the_scale_factor() -> None:
    # two jobs on 4 GPUs: 1/2 of the cluster is 2 GPUs; the 4-GPU job holds
    # them half of the time, the 1-GPU job all of the time (capped at 1)
    p = AllocationProblem(np.full((2, 1), 3.0), np.array([4, 1]), np.array([4]))
    assert p.isolated_throughput() == pytest.approx([1.5, 3.0])


def test_finish_time_fairness_counts_the_isolated_time_already_spent() -> None:
    # one job alone, which has run 100 s (isolated it would also have taken
    # 100 s) and has 100 steps left at 1 step/s: rho = (100 + 100) / (100 + 100)
    p = AllocationProblem(np.ones((1, 1)), np.array([1]), np.array([1]))
    _, rho = finish_time_fairness(p, np.array([100.0]), np.array([100.0]), np.array([100.0]))
    assert rho == pytest.approx(1.0, rel=1e-3)


def test_packed_max_min_uses_a_pair_that_gains() -> None:
    # two jobs, one GPU; alone 1 step/s each; packed each keeps 0.8: pack all the time
    p = AllocationProblem(
        np.ones((2, 1)),
        np.array([1, 1]),
        np.array([1]),
        combos=[(0,), (1,), (0, 1)],
        combo_throughput=np.array([[[1.0], [0.0]], [[1.0], [0.0]], [[0.8], [0.8]]]),
    )
    x = max_min_fairness_packed(p)
    assert x[2, 0] == pytest.approx(1.0, abs=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 8),
    st.lists(st.integers(1, 6), min_size=2, max_size=2),
    st.integers(0, 10_000),
)
def test_every_allocation_is_feasible(n: int, capacity: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = AllocationProblem(
        rng.uniform(0.1, 5.0, size=(n, 2)),
        rng.choice([1, 2, 4], size=n),
        np.array(capacity),
        rng.uniform(0.5, 2.0, size=n),
    )
    remaining = rng.uniform(10, 1000, size=n)
    assert (
        (p.gpus[:, None] * max_min_fairness(p, agnostic=True)).sum(axis=0) <= p.capacity + 1e-6
    ).all()
    for x in (
        max_min_fairness(p),
        min_makespan(p, remaining),
        max_throughput(p),
        finish_time_fairness(p, rng.uniform(0, 100, size=n), remaining, remaining * 2)[0],
    ):
        assert_feasible(p, x)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_level_by_interior_point_gives_the_simplexs_allocation(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From ``IPM_FROM`` jobs the first stage's level is found by the interior
    point (it was the simplex's n^2.3); only its level is kept, so the allocation
    the second stage makes is the one the simplex's level gave."""
    import corral.optimize.gavel_lp as lp

    rng = np.random.default_rng(seed)
    n = 2 * lp.IPM_FROM
    p = AllocationProblem(
        throughput=rng.uniform(0.2, 3.0, (n, 3)),
        gpus=rng.choice([1, 2, 4], n, p=[0.7, 0.2, 0.1]),
        capacity=np.array([40.0, 40.0, 40.0]),
        weights=rng.choice([1.0, 2.0], n),
    )
    by_ipm = lp.max_min_fairness(p)
    remaining = rng.uniform(1e3, 1e5, n)
    makespan_ipm = lp.min_makespan(p, remaining)
    monkeypatch.setattr(lp, "IPM_FROM", 10**9)
    assert np.allclose(by_ipm, lp.max_min_fairness(p), atol=1e-9)
    assert np.allclose(makespan_ipm, lp.min_makespan(p, remaining), atol=1e-9)
