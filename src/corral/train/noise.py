"""The gradient noise scale, estimated from gradients a job computes anyway.

Pollux (and McCandlish et al., "An Empirical Model of Large-Batch Training")
measure how noisy a job's gradients are: ``B_noise = tr(Sigma) / |G|^2``, in
examples. Batches much smaller than it waste steps; batches much larger
waste examples. From the squared norms of a gradient over a small batch
``b`` and over a big one ``B`` (e.g. the first half of a step's batch, then
the whole of it), unbiased estimates are::

    |G|^2       ~ (B |g_B|^2 - b |g_b|^2) / (B - b)
    tr(Sigma)   ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B)

Each is noisy, so both are smoothed (exponential moving averages) before the
ratio is taken, as McCandlish et al. advise. ``Session.report`` sends the
estimate with the heartbeats (``grad_noise_scale``).
"""

from __future__ import annotations

import math


class GradientNoise:
    """Running estimate of the gradient noise scale."""

    def __init__(self, smoothing: float = 0.9) -> None:
        if not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self._sqr: float | None = None
        self._var: float | None = None

    def update(self, small_sqnorm: float, small: int, big_sqnorm: float, big: int) -> None:
        """One pair of measurements: squared gradient norms over ``small`` and
        ``big`` examples (``small < big``)."""
        if not 0 < small < big:
            raise ValueError(f"need 0 < small < big batch sizes, got {small} and {big}")
        sqr = (big * big_sqnorm - small * small_sqnorm) / (big - small)
        var = (small_sqnorm - big_sqnorm) / (1.0 / small - 1.0 / big)
        if not (math.isfinite(sqr) and math.isfinite(var)):
            return
        a = self.smoothing
        self._sqr = sqr if self._sqr is None else a * self._sqr + (1 - a) * sqr
        self._var = var if self._var is None else a * self._var + (1 - a) * var

    @property
    def scale(self) -> float | None:
        """Examples: tr(Sigma) / |G|^2 (None until the smoothed estimates make sense)."""
        if self._sqr is None or self._var is None or self._sqr <= 0 or self._var < 0:
            return None
        return self._var / self._sqr
