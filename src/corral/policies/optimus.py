"""Optimus (Peng et al., EuroSys 2018): predict each job's work left from its
loss curve, and hand GPUs out one at a time where they cut completion time most.

Each scheduling interval (10 minutes by default, as in the paper) Optimus

1. predicts every active job's **remaining steps**: its loss curve refitted
   to the points seen so far (``estimate.convergence``), solved for the
   step at which the curve reaches the job's target;
2. predicts its **speed on w GPUs** from a curve fitted to the sizes it has
   been profiled or seen at;
3. gives each job one GPU, shortest predicted remaining time first, then each
   further GPU to the job whose predicted remaining time ``R / speed(w)`` drops
   most with it, until the GPUs run out or no job gains;
4. resizes running jobs to their new sizes (a restart from a checkpoint),
   unless the change would alter their predicted remaining time by less than
   ``min_change`` (10%): churn has a price the model does not see.

Between intervals, arriving jobs get free GPUs by the same rule (the pass is
``policies.resizing``'s, shared with Pollux). A job's ask is where it starts,
not a gang it must keep (Optimus' jobs are elastic), so the policy
``resizes``; the speed at another size is the performance model's
(``SpeedModel.size_factor``).

Where the remaining steps come from:

* **Simulator**: jobs of Pollux's workloads carry their training curve (the
  bundled validation curve at their batch size). The policy sees the points
  up to the steps the job has done and fits them; the target is the curve's
  last value, what the run trained to. Optimus profiles a new job at a few
  sizes before it runs; here the profile is the performance model's speed at
  1, 2, 4, ... GPUs.
* **Live**: the loss curve the service fits to the job's heartbeats when it
  states a ``target_loss`` (``runtime.estimates.LossHistory``). Speeds are
  those measured by heartbeats at each size it ran at, scaled so that the
  size it asked for runs at its nominal speed.
* Jobs with no curve (most traces, live jobs without a target loss) are
  predicted to need twice the work done so far, and at least the median of
  finished jobs' work: the usual least-attained-service guess, stated. Not
  the trace's run time (an oracle) nor the owner's guess: the simulator and
  the service then decide alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from corral.errors import CorralError
from corral.estimate.convergence import (
    LossCurve,
    SpeedCurve,
    fit_loss_curve,
    fit_speed,
    predicted_total_steps,
)
from corral.model.state import SchedulerState
from corral.perf.pollux_models import pollux_model, training_curve
from corral.perf.speeds import SpeedModel
from corral.placement.strategies import PlacementStrategy
from corral.policies.resizing import ResizingPolicy, median_finished_seconds

PRIOR_SECONDS = 3600.0
"""Work of a job with no curve before any job has finished (an hour at its speed)."""


class Optimus(ResizingPolicy):
    name = "optimus"
    description = (
        "Optimus: loss curves fitted online predict work left; each GPU goes where it "
        "shortens predicted completion most; jobs resize"
    )
    live_note = (
        "work left comes from the loss curve fitted to heartbeats (jobs with a target_loss), "
        "speeds per size from heartbeats; a resize restarts the job from its checkpoint"
    )

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        interval: float = 600.0,
        min_change: float = 0.1,
        max_gpus: int = 0,
        **params: Any,
    ) -> None:
        super().__init__(placement, interval, min_change, max_gpus, **params)
        self._loss_fits: dict[int, tuple[int, LossCurve | None]] = {}
        """job -> (curve points fitted, the fit)."""
        self._speed_fits: dict[int, tuple[int, SpeedCurve]] = {}
        self._seen: dict[int, dict[int, float]] = {}
        """Live: job -> {GPUs: steps/s measured there}."""
        self._remaining: dict[int, float] = {}
        self._curves: dict[int, SpeedCurve] = {}
        self.counts["fits"] = 0

    # ---- predictions -------------------------------------------------------

    def _curve(self, state: SchedulerState, i: int) -> tuple[tuple[float, ...], ...] | None:
        model = pollux_model(state.model[i]) if state.model[i] else None
        batch = int(state.batch_size[i])
        if model is None or batch <= 0:
            return None
        try:
            return training_curve(model, batch)
        except CorralError:
            return None

    def predicted_total(self, state: SchedulerState, i: int, done: float, prior: float) -> float:
        """Steps job ``i`` is predicted to need in all: from its loss curve where
        there is one, else twice what it has done (at least the median finished
        job's work). Never the trace's or the owner's figure: Optimus does not
        take users' word for it."""
        fallback = max(2.0 * done, prior * float(state.ref_speed[i]))
        if not state.known_in_advance:  # live: the service fits the heartbeats' curve
            return max(float(state.total_steps[i]), done) if state.curve_predicted[i] else fallback
        curve = self._curve(state, i)
        if curve is None:
            return fallback
        steps, values = curve
        seen = int(np.searchsorted(np.asarray(steps), done, side="right"))
        cached = self._loss_fits.get(i)
        if cached is None or cached[0] != seen:
            fit: LossCurve | None = fit_loss_curve(steps[:seen], values[:seen]) if seen else None
            self._loss_fits[i] = (seen, fit)
            self.counts["fits"] += 1
        total = predicted_total_steps(self._loss_fits[i][1], values[-1], done)
        return fallback if total is None else total

    def speed_curve(self, state: SchedulerState, i: int, speeds: SpeedModel) -> SpeedCurve:
        """Steps/s of job ``i`` by GPU count, as Optimus believes it."""
        if not state.known_in_advance:
            seen = self._seen.setdefault(i, {})
            if state.alloc[i] is not None and state.observed_speed[i] == state.observed_speed[i]:
                seen[len(state.alloc[i])] = float(state.observed_speed[i])
            key = hash(tuple(sorted(seen.items())))
            cached = self._speed_fits.get(i)
            if cached is None or cached[0] != key:
                asked = int(state.gpus[i])
                ref = float(state.ref_speed[i])
                fit = fit_speed(list(seen), list(seen.values())) if seen else None
                if fit is None:
                    fit = SpeedCurve(asked / ref, 0.0, 0.0)
                else:  # heartbeats count the job's own steps: rescale to the state's
                    c = 1.0 / (ref * float(fit.step_time(asked)))
                    fit = SpeedCurve(fit.theta0 * c, fit.theta1 * c, fit.theta2 * c)
                self._speed_fits[i] = (key, fit)
            return self._speed_fits[i][1]
        cached = self._speed_fits.get(i)
        if cached is None:
            sizes = [w for w in (1, 2, 4, 8, 16, 32, 64) if w <= state.cluster.total_gpus]
            rates = [self.model_speed(state, i, w, speeds) for w in sizes]
            fit = fit_speed(sizes, rates) or SpeedCurve(1.0 / float(state.ref_speed[i]), 0.0, 0.0)
            self._speed_fits[i] = (0, fit)
            cached = self._speed_fits[i]
        return cached[1]

    # ---- the resizing pass's hooks --------------------------------------------

    def prepare(self, state: SchedulerState, jobs: list[int], speeds: SpeedModel) -> None:
        done = state.done_steps(np.asarray(jobs, dtype=np.int64))
        prior = median_finished_seconds(state, PRIOR_SECONDS)
        self._remaining, self._curves = {}, {}
        for j, d in zip(jobs, done.tolist(), strict=True):
            self._remaining[j] = max(self.predicted_total(state, j, d, prior) - d, 1e-9)
            self._curves[j] = self.speed_curve(state, j, speeds)

    def cost(self, j: int, gpus: int) -> float:
        """Predicted seconds to completion on ``gpus`` GPUs."""
        return self._remaining[j] / float(self._curves[j].speed(gpus))

    def costs(self, j: int, sizes: np.ndarray) -> np.ndarray:
        return self._remaining[j] / np.asarray(self._curves[j].speed(sizes))

    def admission_key(self, state: SchedulerState, j: int) -> tuple[float, ...]:
        return (self.cost(j, 1),)
