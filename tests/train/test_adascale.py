"""AdaScale's gain ratio follows its formula and its limits, scales every parameter
group's learning rate, and keeps training on course at a bigger batch."""

from __future__ import annotations

import pytest

from corral.train import AdaScale, GradientNoise


def known_noise(grad_sq: float, variance: float) -> GradientNoise:
    """A noise estimate fed exact expectations: |g_b|^2 = |G|^2 + tr(Sigma) / b."""
    noise = GradientNoise(smoothing=0.0)
    noise.update(grad_sq + variance / 8, 8, grad_sq + variance / 64, 64)
    return noise


class Groups:
    def __init__(self, *lrs: float) -> None:
        self.param_groups = [{"lr": lr} for lr in lrs]


def test_gain_ratio_formula_and_limits() -> None:
    noise = known_noise(grad_sq=1.0, variance=100.0)  # noise scale 100 examples
    assert noise.scale == pytest.approx(100.0)
    scale = AdaScale(Groups(0.1), base_batch=10, noise=noise)
    assert scale.gain(10) == pytest.approx(1.0)
    assert scale.gain(40) == pytest.approx((100 / 10 + 1) / (100 / 40 + 1))  # 11 / 3.5
    noisy = AdaScale(Groups(0.1), 10, known_noise(1e-6, 100.0))
    assert noisy.gain(40) == pytest.approx(4.0, rel=1e-3)  # noise dominates: linear scaling
    clean = AdaScale(Groups(0.1), 10, known_noise(1.0, 1e-9))
    assert clean.gain(40) == pytest.approx(1.0, abs=1e-6)  # no noise: a bigger batch buys nothing
    assert AdaScale(Groups(0.1), 10, GradientNoise()).gain(40) == 1.0  # unknown: no scaling


def test_step_scales_every_group_and_counts_progress() -> None:
    opt = Groups(0.1, 0.01)
    scale = AdaScale(opt, base_batch=10, noise=known_noise(1.0, 100.0))
    gain = scale.step(40)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1 * gain, 0.01 * gain])
    scale.step(10)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1, 0.01])
    assert scale.progress == pytest.approx(gain + 1.0)
    again = AdaScale(Groups(0.5), 10, GradientNoise())
    again.load_state_dict(scale.state_dict())
    assert again.progress == scale.progress and again.base_lrs == [0.1, 0.01]
    with pytest.raises(ValueError, match="batch must be >= 1"):
        scale.gain(0)


def test_a_four_times_bigger_batch_reaches_the_same_loss_in_fewer_steps() -> None:
    """Noisy linear regression with SGD. At 4x the base batch, AdaScale's learning
    rate makes the run reach the base run's error in about a third of the steps, where keeping
    the base learning rate at the bigger batch does not (it only averages noise)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    dim, base = 20, 8
    truth = torch.randn(dim)

    def batch(n: int) -> tuple[object, object]:
        x = torch.randn(n, dim)
        return x, x @ truth + 4.0 * torch.randn(n)

    def run(size: int, adascale: bool, steps: int) -> tuple[float, float]:
        torch.manual_seed(1)
        w = torch.zeros(dim, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.005)
        noise = GradientNoise(smoothing=0.9)
        scale = AdaScale(opt, base_batch=base, noise=noise)
        for _ in range(steps):
            x, y = batch(size)
            half = size // 2
            opt.zero_grad()
            (((x[:half] @ w - y[:half]) ** 2).mean() / 2).backward()
            small = float((w.grad**2).sum())
            opt.zero_grad()
            (((x @ w - y) ** 2).mean() / 2).backward()
            noise.update(small, half, float((w.grad**2).sum()), size)
            if adascale:
                scale.step(size)
            opt.step()
        return float(((w.detach() - truth) ** 2).sum()), scale.progress

    target, _ = run(base, adascale=False, steps=800)
    scaled, progress = run(4 * base, adascale=True, steps=250)
    plain, _ = run(4 * base, adascale=False, steps=250)
    assert scaled <= target * 1.5  # 250 steps at 4x the batch did the base run's 800
    assert plain > 3 * scaled  # at the base rate the bigger batch is still far from there
    assert 1.5 * 250 < progress <= 4 * 250  # each step worth up to 4 at the base batch
