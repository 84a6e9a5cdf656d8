"""A job's own throughput model, fitted online from the step times it reports.

Pollux does not know a job's scaling up front: each job's agent records the
step time it measures at every configuration it runs in (nodes, GPUs, local
batch) and refits a small model of it, which the scheduler then trusts for
configurations not yet tried. The model has Pollux's form:

* compute ``T_c = alpha_c + beta_c x local batch``;
* synchronisation ``T_n = alpha + beta x max(GPUs - 2, 0)``, with one pair
  (``alpha_n``, ``beta_n``) when the gang spans nodes and another
  (``alpha_r``, ``beta_r``) when it sits on one node; zero on one GPU;
* a step ``(T_c^gamma + T_n^gamma)^(1/gamma)``, gamma in [1, 10] for how far
  the two overlap.

The fit is **optimistic where there is no data**, as Pollux's is: until a job
has run across nodes its inter-node terms stay at their floor (near zero), so
scaling looks perfect and the scheduler is willing to try it; with one local
batch seen, the compute time is split evenly between its fixed and per-example
parts. Each measurement it then gets corrects the model. Together with the
exploration cap (:func:`exploration_cap`: at most twice the most GPUs the job
has run on) this is how Pollux learns a job's scaling by running it.

The fit is a bounded least-squares one of log step times (and log compute
times where measured), with small penalties that keep gamma near 1 and the
``beta`` terms small against the ``alpha`` ones; scipy's trust-region solver
does it in a few milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from corral.lazy import LazyModule

optimize = LazyModule("scipy.optimize")

FLOOR = 1e-8
"""Lower bound of every time parameter (seconds): 'nothing measured' sits here."""

SHORTEST_STEP, LONGEST_STEP = 1e-6, 86_400.0
"""Step times outside these (seconds) are not measurements: live, a job's
reported throughput is its own word, and an absurd figure would otherwise
make it look infinitely fast (or slow) to the fit."""

CHANGED = 0.1
"""A configuration is refitted when a new measurement of it differs from the
one kept by more than this share (live measurements wander a little)."""


@dataclass(frozen=True)
class StepTimeModel:
    """Pollux's step-time model of one job (seconds)."""

    alpha_c: float
    beta_c: float
    alpha_n: float = FLOOR
    beta_n: float = FLOOR
    alpha_r: float = FLOOR
    beta_r: float = FLOOR
    gamma: float = 1.0

    def compute(self, local_batch: float) -> float:
        return self.alpha_c + self.beta_c * local_batch

    def network(self, nodes: int, gpus: int) -> float:
        if gpus <= 1:
            return 0.0
        alpha, beta = (self.alpha_n, self.beta_n) if nodes > 1 else (self.alpha_r, self.beta_r)
        return alpha + beta * max(gpus - 2, 0)

    def step_time(self, nodes: int, gpus: int, local_batch: float) -> float:
        compute = self.compute(local_batch)
        network = self.network(nodes, gpus)
        if network <= 0:
            return compute
        g = self.gamma
        return float((compute**g + network**g) ** (1.0 / g))


@dataclass
class StepTimeProfile:
    """The step times one job measured, by configuration, and its model fitted to them."""

    observations: dict[tuple[int, int, float], tuple[float, float]] = field(default_factory=dict)
    """(nodes, GPUs, local batch) -> (step time, compute time; NaN where not measured)."""
    model: StepTimeModel | None = None
    """The fit to the observations so far (None: nothing measured yet)."""
    fits: int = 0
    """How many times the model was fitted (a new fit: new beliefs)."""

    @property
    def max_gpus(self) -> int:
        """The most GPUs the job has been measured on (0: never)."""
        return max((k[1] for k in self.observations), default=0)

    def record(
        self, nodes: int, gpus: int, local_batch: float, step_time: float, compute: float
    ) -> bool:
        """Add a measurement; True when the model should be refitted: the
        configuration is new, or its step time moved by more than
        ``CHANGED`` (a later measurement of a configuration replaces the
        earlier: the newest is the job's speed now). Step times outside
        [``SHORTEST_STEP``, ``LONGEST_STEP``] are ignored."""
        if not SHORTEST_STEP <= step_time <= LONGEST_STEP:  # NaN fails too
            return False
        key = (int(nodes), int(gpus), round(float(local_batch), 3))
        before = self.observations.get(key)
        self.observations[key] = (float(step_time), float(compute))
        return before is None or abs(step_time / before[0] - 1) > CHANGED

    def refit(self) -> StepTimeModel:
        """Fit the model to the observations (at least one)."""
        self.model = fit_step_time(self.observations)
        self.fits += 1
        return self.model


def exploration_cap(measured_gpus: int, most: int = 64) -> int:
    """Most GPUs a job may be given: twice the most it has run on (one before
    it has run), so that its model is never trusted far beyond what it has
    seen (Pollux's rule)."""
    return max(1, min(2 * measured_gpus, most))


def fit_step_time(
    observations: dict[tuple[int, int, float], tuple[float, float]],
) -> StepTimeModel:
    """Fit Pollux's step-time model to one job's measurements (see the module)."""
    keys = list(observations)
    nodes = np.array([k[0] for k in keys], dtype=np.float64)
    gpus = np.array([k[1] for k in keys], dtype=np.float64)
    local = np.array([k[2] for k in keys], dtype=np.float64)
    step = np.array([observations[k][0] for k in keys], dtype=np.float64)
    compute = np.array([observations[k][1] for k in keys], dtype=np.float64)
    # one-GPU steps are pure compute where compute was not measured on its own
    compute = np.where(np.isnan(compute) & (gpus == 1), step, compute)
    has_compute = np.isfinite(compute) & (compute > 0)

    start = np.array([0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.0 + 1e-3])
    fixed: dict[int, float] = {}
    if len(np.unique(local)) == 1:  # one batch seen: half fixed, half per example
        seen = compute[has_compute] if has_compute.any() else step
        fixed[0] = float(np.mean(seen)) / 2
    if not (nodes > 1).any():
        fixed[2] = fixed[3] = FLOOR
    if not ((nodes == 1) & (gpus > 1)).any():
        fixed[4] = fixed[5] = FLOOR
    if not (gpus > 2).any():
        fixed[3] = fixed[5] = FLOOR
    free = [i for i in range(7) if i not in fixed]
    lower = np.array([FLOOR] * 6 + [1.0])
    upper = np.array([np.inf] * 6 + [10.0])

    def full(x: np.ndarray) -> np.ndarray:
        p = np.empty(7)
        for i, v in fixed.items():
            p[i] = v
        p[free] = x
        return p

    def predict(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t_c = p[0] + p[1] * local
        multi = gpus > 1
        across = nodes > 1
        alpha = np.where(across, p[2], p[4])
        beta = np.where(across, p[3], p[5])
        t_n = np.where(multi, alpha + beta * np.maximum(gpus - 2, 0), 0.0)
        g = p[6]
        t = np.where(multi, (t_c**g + np.maximum(t_n, FLOOR) ** g) ** (1 / g), t_c)
        return t, t_c

    def residuals(x: np.ndarray) -> np.ndarray:
        p = full(x)
        t, t_c = predict(p)
        parts = [np.log(t) - np.log(step)]
        if has_compute.any():
            parts.append(np.log(t_c[has_compute]) - np.log(compute[has_compute]))
        penalties = [math.sqrt(1e-3) * (p[6] - 1.0)]
        penalties.append(math.sqrt(1e-2) * p[3] / p[2])
        penalties.append(math.sqrt(1e-2) * p[5] / p[4])
        return np.concatenate([*parts, penalties])

    x0 = np.clip(start[free], lower[free] * 1.0001, upper[free] * 0.9999)
    if free:
        result = optimize.least_squares(
            residuals, x0, bounds=(lower[free], upper[free]), method="trf", x_scale="jac"
        )
        x = result.x
    else:
        x = np.empty(0)
    p = full(x)
    return StepTimeModel(*(float(v) for v in p))
