"""The gradient noise scale estimator (McCandlish et al.'s two-batch estimates)."""

from __future__ import annotations

import numpy as np
import pytest

from corral.train import GradientNoise


def test_expected_norms_give_the_exact_noise_scale():
    g2, trace = 4.0, 800.0  # |G|^2 and tr(Sigma): noise scale 200 examples
    noise = GradientNoise()
    for _ in range(3):
        noise.update(g2 + trace / 16, 16, g2 + trace / 64, 64)
    assert noise.scale == pytest.approx(200.0)


def test_sampled_gradients_converge_on_the_noise_scale():
    rng = np.random.default_rng(0)
    d, sigma = 50, 2.0
    grad = rng.normal(0, 1, d)
    truth = d * sigma**2 / float(grad @ grad)
    noise = GradientNoise(smoothing=0.98)
    for _ in range(2000):
        big = grad + rng.normal(0, sigma, (64, d)).mean(axis=0)
        small = grad + rng.normal(0, sigma, (16, d)).mean(axis=0)
        noise.update(float(small @ small), 16, float(big @ big), 64)
    assert noise.scale == pytest.approx(truth, rel=0.2)


def test_the_estimator_refuses_bad_batches_and_says_nothing_too_early():
    noise = GradientNoise()
    assert noise.scale is None
    with pytest.raises(ValueError):
        noise.update(1.0, 64, 1.0, 16)
    with pytest.raises(ValueError):
        GradientNoise(smoothing=1.0)
