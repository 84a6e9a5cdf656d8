"""Optimus' online models of a job: its loss curve and its speed at each size.

**Loss curve.** Optimus (EuroSys'18) models the training loss after ``k``
steps of SGD as ``l(k) = 1 / (a k + b) + c`` with ``a, b, c >= 0`` and refits
it as points arrive. For a fixed ``c`` the model is linear in ``1/(l - c)``,
so each candidate ``c`` below the lowest loss seen is solved by non-negative
least squares; the best candidate is then polished by bounded least squares.
Residuals are relative (differences of log losses), not absolute: a loss
falls by orders of magnitude, the prediction extrapolates from the low
tail, and absolute residuals would let the first, high points decide the
fit (a digits CNN's half-way prediction of its steps to a loss of 0.08 was
1.41x the truth with them, 1.13x with relative ones). The steps a job needs
are where the curve reaches its target.
The form describes the decay after training gets going; a network fresh from
random initialisation first sits on a plateau (the tiny transformer example
does, for ~100 steps), which would bend the fit. So points before the loss
first fell halfway from its first value to its lowest so far are left out.

**Speed.** A data-parallel step on ``w`` GPUs at a fixed global batch takes
``t(w) = theta0 / w + theta1 + theta2 (w - 1)``: the work split ``w`` ways, a
fixed part, and synchronisation growing with the gang (Optimus' model for
all-reduce, its parameter-server terms collapsed). The thetas are non-negative
least squares over the (GPUs, steps/s) a job was seen at; with one size seen,
speed is assumed to scale linearly from it.

With parameter servers, Optimus' own model of a step on ``w`` workers and
``p`` servers is ``theta0 / w + theta1 + theta2 w / p + theta3 w + theta4 p``:
the split work, a fixed part, the servers' share of the gang's gradients,
and per-worker and per-server overheads (:class:`ServerSpeedCurve`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from corral.lazy import LazyModule

optimize = LazyModule("scipy.optimize")

MIN_POINTS = 3
"""Points a loss fit needs: three parameters."""


@dataclass(frozen=True)
class LossCurve:
    """``l(k) = 1 / (a k + b) + c``."""

    a: float
    b: float
    c: float

    def loss(self, steps: np.ndarray | float) -> np.ndarray | float:
        return 1.0 / (self.a * np.asarray(steps, dtype=np.float64) + self.b) + self.c

    def steps_to(self, target: float) -> float:
        """Steps at which the curve reaches ``target`` (inf: never; 0: already there)."""
        if target <= self.c or self.a <= 0:
            return math.inf
        k = (1.0 / (target - self.c) - self.b) / self.a
        return max(k, 0.0)


def fit_loss_curve(
    steps: Sequence[float] | np.ndarray, losses: Sequence[float] | np.ndarray
) -> LossCurve | None:
    """The curve through the points, or None with fewer than three finite ones
    or when no curve of the form falls (``a = 0``)."""
    k = np.asarray(steps, dtype=np.float64)
    y = np.asarray(losses, dtype=np.float64)
    keep = np.isfinite(k) & np.isfinite(y) & (k >= 0)
    k, y = k[keep], y[keep]
    if len(y):
        halfway = (y[0] + y.min()) / 2
        start = int(np.argmax(y <= halfway))
        k, y = k[start:], y[start:]
    if len(k) < MIN_POINTS or len(np.unique(k)) < MIN_POINTS:
        return None
    scale = float(k.max()) or 1.0
    x = k / scale  # steps in units of the last one: well-conditioned fits
    low = float(y.min())
    if low <= 0:
        return None
    best: tuple[float, float, float, float] | None = None
    design = np.column_stack([x, np.ones_like(x)])
    log_y = np.log(y)
    for frac in (0.0, *np.linspace(0.05, 0.98, 24)):
        c = low * frac
        gap = y - c
        # d(1/gap) = -d(gap) / gap^2 and d(log y) = d(gap) / y: relative residuals
        weight = gap**2 / y
        coef, _ = optimize.nnls(design * weight[:, None], (1.0 / gap) * weight)
        a, b = float(coef[0]), float(coef[1])
        if b <= 0 and a <= 0:
            continue
        pred = 1.0 / np.maximum(a * x + b, 1e-12) + c
        sse = float(((np.log(pred) - log_y) ** 2).sum())
        if best is None or sse < best[0]:
            best = (sse, a, b, c)
    if best is None:
        return None
    _, a0, b0, c0 = best

    def residuals(p: np.ndarray) -> np.ndarray:
        return np.log(1.0 / np.maximum(p[0] * x + p[1], 1e-12) + p[2]) - log_y

    guess = np.array([max(a0, 1e-9), max(b0, 1e-9), min(c0, low * 0.999)])
    upper = np.array([np.inf, np.inf, low])
    try:
        polished = optimize.least_squares(residuals, guess, bounds=(np.zeros(3), upper))
        a, b, c = (float(v) for v in polished.x)
    except ValueError:
        a, b, c = a0, b0, c0
    if a <= 1e-9 * max(b, 1e-12):  # flat over the points seen: no fall to predict from
        return None
    return LossCurve(a / scale, b, c)


OVERSHOT = 1.1
"""A job past the step its curve says it reaches its target at has not reached
it yet: it is predicted to need this factor times the steps done."""


def predicted_total_steps(curve: LossCurve | None, target: float, done: float) -> float | None:
    """Steps a job needs in all to bring its loss to ``target``, from its fitted
    curve (None: no curve, or the curve never gets there)."""
    if curve is None:
        return None
    total = curve.steps_to(target)
    if not math.isfinite(total):
        return None
    return total if total > done else max(done * OVERSHOT, done + 1.0)


@dataclass(frozen=True)
class SpeedCurve:
    """Steps/s on ``w`` GPUs: ``1 / (theta0 / w + theta1 + theta2 (w - 1))``."""

    theta0: float
    theta1: float
    theta2: float

    def step_time(self, gpus: int | np.ndarray) -> np.ndarray | float:
        w = np.asarray(gpus, dtype=np.float64)
        return self.theta0 / w + self.theta1 + self.theta2 * (w - 1)

    def speed(self, gpus: int | np.ndarray) -> np.ndarray | float:
        return 1.0 / self.step_time(gpus)


def fit_speed(gpus: Sequence[int], steps_per_s: Sequence[float]) -> SpeedCurve | None:
    """The speed curve through observed (GPUs, steps/s) pairs (None: none usable)."""
    w = np.asarray(gpus, dtype=np.float64)
    s = np.asarray(steps_per_s, dtype=np.float64)
    keep = (w >= 1) & np.isfinite(s) & (s > 0)
    w, s = w[keep], s[keep]
    if not len(w):
        return None
    t = 1.0 / s
    if len(np.unique(w)) == 1:  # one size seen: linear scaling from it
        return SpeedCurve(float(t.mean() * w[0]), 0.0, 0.0)
    design = np.column_stack([1.0 / w, np.ones_like(w), w - 1]) / t[:, None]
    coef, _ = optimize.nnls(design, np.ones_like(t))  # relative residuals
    if not coef.any():
        return SpeedCurve(float((t * w).mean()), 0.0, 0.0)
    return SpeedCurve(float(coef[0]), float(coef[1]), float(coef[2]))


@dataclass(frozen=True)
class ServerSpeedCurve:
    """Steps/s on ``w`` workers with ``p`` parameter servers (Optimus' model)."""

    thetas: tuple[float, float, float, float, float]

    def step_time(self, workers: float, servers: float) -> float:
        t0, t1, t2, t3, t4 = self.thetas
        return t0 / workers + t1 + t2 * workers / servers + t3 * workers + t4 * servers

    def speed(self, workers: float, servers: float) -> float:
        return 1.0 / self.step_time(workers, servers)


def fit_server_speed(
    workers: Sequence[int], servers: Sequence[int], steps_per_s: Sequence[float]
) -> ServerSpeedCurve | None:
    """Optimus' worker/server speed model through observed (workers, servers,
    steps/s); non-negative least squares on relative residuals (None: no
    usable point)."""
    w = np.asarray(workers, dtype=np.float64)
    p = np.asarray(servers, dtype=np.float64)
    s = np.asarray(steps_per_s, dtype=np.float64)
    keep = (w >= 1) & (p >= 1) & np.isfinite(s) & (s > 0)
    w, p, s = w[keep], p[keep], s[keep]
    if not len(w):
        return None
    t = 1.0 / s
    design = np.column_stack([1.0 / w, np.ones_like(w), w / p, w, p]) / t[:, None]
    coef, _ = optimize.nnls(design, np.ones_like(t))
    if not coef.any():
        return None
    return ServerSpeedCurve(tuple(float(c) for c in coef))  # type: ignore[arg-type]
