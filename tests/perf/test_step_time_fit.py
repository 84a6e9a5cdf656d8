"""Pollux's per-job step-time model, fitted from the job's own measurements."""

from __future__ import annotations

import math

import pytest

from corral.estimate.step_time import (
    FLOOR,
    StepTimeModel,
    StepTimeProfile,
    exploration_cap,
    fit_step_time,
)
from corral.model.cluster import Links
from corral.perf.communication import Span, model_profile

TRUTH = StepTimeModel(
    alpha_c=0.02, beta_c=0.001, alpha_n=0.08, beta_n=0.004, alpha_r=0.015, beta_r=0.001, gamma=2.0
)
CONFIGS = [
    (1, 1, 32), (1, 1, 64), (1, 2, 64), (1, 4, 64), (1, 4, 128),
    (2, 8, 64), (4, 16, 64), (2, 8, 128), (8, 32, 32),
]  # fmt: skip


def _observe(model: StepTimeModel, configs: list[tuple[int, int, float]]) -> StepTimeProfile:
    profile = StepTimeProfile()
    for nodes, gpus, local in configs:
        profile.record(
            nodes, gpus, local, model.step_time(nodes, gpus, local), model.compute(local)
        )
    return profile


def test_the_fit_recovers_a_model_of_its_own_form():
    fitted = _observe(TRUTH, CONFIGS).refit()
    for nodes, gpus, local in [(1, 3, 96), (3, 12, 48), (16, 64, 16), (1, 1, 200)]:
        truth = TRUTH.step_time(nodes, gpus, local)
        assert fitted.step_time(nodes, gpus, local) == pytest.approx(truth, rel=0.05)


def test_unmeasured_scaling_is_optimistic_until_it_is_tried():
    """One GPU seen: every larger gang is predicted to scale perfectly (no
    synchronisation time); one node seen: spanning nodes is still free.
    Measuring the larger gang corrects it."""
    profile = _observe(TRUTH, [(1, 1, 64)])
    fitted = profile.refit()
    assert fitted.alpha_c == pytest.approx(TRUTH.compute(64) / 2)  # even split
    assert fitted.step_time(1, 1, 64) == pytest.approx(TRUTH.step_time(1, 1, 64), rel=1e-6)
    for nodes, gpus in [(1, 4), (4, 16)]:
        assert fitted.network(nodes, gpus) < 1e-6
        assert fitted.step_time(nodes, gpus, 64) < TRUTH.step_time(nodes, gpus, 64)
    profile = _observe(TRUTH, [(1, 1, 64), (1, 2, 64), (1, 4, 64)])
    one_node = profile.refit()
    assert one_node.step_time(1, 4, 64) == pytest.approx(TRUTH.step_time(1, 4, 64), rel=0.03)
    assert one_node.alpha_n == FLOOR  # across nodes: still untried, still optimistic
    assert one_node.step_time(2, 8, 64) < TRUTH.step_time(2, 8, 64)


def test_the_fit_learns_the_communication_model_of_a_real_workload():
    """ResNet-18 on CIFAR-10 as the simulator runs it: after the placements a
    job grows through (1, 2, 4, 8, 16 GPUs on nodes of 4), the fit predicts
    32 GPUs, never measured, within 15%."""
    truth, links = model_profile("cifar10"), Links()
    assert truth is not None
    profile = StepTimeProfile()
    for gpus in (1, 2, 4, 8, 16):
        span = Span.packed(gpus, 4)
        step = truth.step_time(span, links, local_batch=64)
        profile.record(span.nodes, gpus, 64, step, truth.compute_time(64))
    fitted = profile.refit()
    span = Span.packed(32, 4)
    real = truth.step_time(span, links, local_batch=64)
    assert fitted.step_time(span.nodes, 32, 64) == pytest.approx(real, rel=0.15)


def test_recording_says_when_to_refit():
    profile = StepTimeProfile()
    assert profile.record(1, 1, 64, 0.1, math.nan)  # new configuration
    assert not profile.record(1, 1, 64, 0.105, math.nan)  # the same, within 10%
    assert profile.record(1, 1, 64, 0.2, math.nan)  # moved: refit
    assert not profile.record(1, 2, 64, math.nan, math.nan)  # nothing measured
    assert not profile.record(1, 2, 64, 0.0, math.nan)
    assert not profile.record(1, 2, 64, 1e-300, math.nan)  # a job's absurd report
    assert not profile.record(1, 2, 64, 1e300, math.nan)
    assert profile.max_gpus == 1
    assert profile.refit().step_time(1, 1, 64) == pytest.approx(0.2, rel=1e-6)
    assert profile.fits == 1


def test_exploration_cap_is_twice_the_most_measured():
    assert exploration_cap(0) == 1
    assert exploration_cap(1) == 2
    assert exploration_cap(12) == 24
    assert exploration_cap(48) == 64  # and never past the cap


def test_a_single_measurement_of_many_gpus_fits_without_error():
    model = fit_step_time({(2, 8, 32.0): (0.5, math.nan)})
    assert model.step_time(2, 8, 32) == pytest.approx(0.5, rel=0.05)
