"""Gavel's throughput estimator (:mod:`corral.estimate.pair_throughputs`) and the
packed policy's ``profiled`` option: references answer as measured, unprofiled
types are matched from a completed fingerprint, the matching beats a blind guess,
and an estimated pair that does not fit is never run packed."""

from __future__ import annotations

import random

import numpy as np
import pytest

from corral.estimate.pair_throughputs import GPU_TYPES, PairEstimator, estimation_error
from corral.perf.throughputs import gavel_throughputs
from corral.policies import make_policy
from corral.policies.gavel import GavelMaxMinPacked

from .test_gavel import cluster, sim, typed

TABLE = gavel_throughputs()


def test_with_every_type_profiled_the_estimates_are_the_measurements() -> None:
    est = PairEstimator(TABLE, references=len(TABLE.job_types), measured=0.1)
    a, b = ("ResNet-18 (batch size 16)", 1), ("LM (batch size 20)", 1)
    for gpu in GPU_TYPES:
        assert est.relative_pair(a, b, (gpu, True)) == TABLE.relative_pair(a, b, (gpu, True))
    assert all(est.match(t, 1) == t for t in TABLE.job_types)


def test_a_fully_measured_row_is_kept_and_a_reference_row_is_recovered() -> None:
    est = PairEstimator(TABLE, references=20, measured=0.3, seed=1)
    ref = est.reference_types[0]
    full = est.fingerprint(ref, 1)
    assert np.allclose(est.complete(full, 1), np.nan_to_num(full), equal_nan=False)
    hidden = full.copy()
    hidden[::2] = np.nan  # half of a reference's entries hidden: its own row spans them
    assert np.abs(est.complete(hidden, 1) - np.nan_to_num(full)).mean() < 0.05


def test_profiling_measures_the_share_asked_and_at_least_one_pair() -> None:
    est = PairEstimator(TABLE, references=10, measured=0.3)
    other = next(t for t in TABLE.job_types if t not in est.reference_types)
    rows = [est.profiled(other, 1, random.Random(k)) for k in range(200)]
    shares = [np.mean(~np.isnan(r)) for r in rows]
    assert min(np.sum(~np.isnan(r)) for r in rows) >= 1
    assert 0.25 < float(np.mean(shares)) < 0.35


def test_the_fingerprint_matches_better_than_a_blind_guess() -> None:
    few = estimation_error(TABLE, references=15, measured=0.3, seeds=range(5))
    assert few.mean_abs < few.mean_abs_guessed
    assert few.same_model > 0.3  # (a blind guess finds the same model about a fifth of the time)
    more = estimation_error(TABLE, references=20, measured=1.0, seeds=range(5))
    assert more.mean_abs < few.mean_abs


@pytest.mark.parametrize("bad", [{"references": 0}, {"references": 27}, {"measured": 0.0}])
def test_impossible_settings_are_refused(bad: dict[str, float]) -> None:
    settings = {"references": 5, "measured": 0.1} | bad
    with pytest.raises(ValueError):
        PairEstimator(TABLE, int(settings["references"]), settings["measured"])


def test_the_packed_policy_plans_by_the_estimates_and_runs_at_the_measurements() -> None:
    jobs = typed(
        [(0, 1, 20_000, "ResNet-50 (batch size 32)"), (0, 1, 20_000, "ResNet-18 (batch size 16)")]
    )
    policy = make_policy("gavel-max-min-fairness-packed", profiled=5)
    assert isinstance(policy, GavelMaxMinPacked) and policy.estimator is not None
    assert len(policy.estimator.reference_types) == 5
    result = sim(jobs, cluster("V100"), "gavel-max-min-fairness-packed", profiled=5)
    assert (result.state.status == 3).all()


class FitsEverything:
    """An estimator that believes every pair fits, each at 0.9 of alone."""

    def relative_pair(self, *_: object) -> tuple[float, float]:
        return 0.9, 0.9


def test_an_estimated_pair_that_does_not_fit_is_never_packed() -> None:
    """ResNet-50 at batch 32 and at 128 do not fit one V100 together (Gavel measured
    0): believed to fit, they are not packed, and the pairing is forgotten."""
    jobs = typed(
        [(0, 1, 5_000, "ResNet-50 (batch size 32)"), (0, 1, 5_000, "ResNet-50 (batch size 128)")]
    )
    policy = make_policy("gavel-max-min-fairness-packed", profiled=5)
    assert isinstance(policy, GavelMaxMinPacked)
    policy.estimator = FitsEverything()  # type: ignore[assignment]
    from corral.sim.engine import Simulator
    from corral.sim.result import SimConfig

    config = SimConfig(switch_cost=0.0, check_invariants=True)
    result = Simulator(jobs, cluster("V100"), policy, config).run()
    assert (result.state.status == 3).all()
    assert result.state.shared_gpu_seconds == 0
    assert any(v is None for v in policy._pairings.values())
