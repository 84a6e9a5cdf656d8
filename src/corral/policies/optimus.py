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

Between intervals, arriving jobs get free GPUs by the same rule and nobody is
resized, except that a job arriving to no free GPU while running jobs hold
more than they asked for has the GPUs re-divided at once (else it would wait
out the interval behind jobs grown onto the whole cluster). A job's ask is where it starts, not a gang it must keep (Optimus'
jobs are elastic), so the policy ``resizes``; the speed at another size is
the performance model's (``SpeedModel.size_factor``).

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

import heapq
import math
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
from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.perf.pollux_models import pollux_model, training_curve
from corral.perf.speeds import SpeedModel
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy

PRIOR_SECONDS = 3600.0
"""Work of a job with no curve before any job has finished (an hour at its speed)."""


class Optimus(Policy):
    name = "optimus"
    description = (
        "Optimus: loss curves fitted online predict work left; each GPU goes where it "
        "shortens predicted completion most; jobs resize"
    )
    resizes = True
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
        super().__init__(placement, **params)
        if not interval > 0:
            raise CorralError(f"optimus: interval must be > 0 seconds, got {interval}")
        if not 0 <= min_change < 1:
            raise CorralError(f"optimus: min_change must be in [0, 1), got {min_change}")
        if max_gpus < 0:
            raise CorralError(f"optimus: max_gpus must be >= 0 (0: no cap), got {max_gpus}")
        self.interval = float(interval)
        self.min_change = float(min_change)
        self.max_gpus = int(max_gpus)
        self._next_tick = -math.inf
        self._loss_fits: dict[int, tuple[int, LossCurve | None]] = {}
        """job -> (curve points fitted, the fit)."""
        self._speed_fits: dict[int, tuple[int, SpeedCurve]] = {}
        self._seen: dict[int, dict[int, float]] = {}
        """Live: job -> {GPUs: steps/s measured there}."""
        self.counts = {"resizes": 0, "fits": 0}

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
            rates = [self._true_speed(state, i, w, speeds) for w in sizes]
            fit = fit_speed(sizes, rates) or SpeedCurve(1.0 / float(state.ref_speed[i]), 0.0, 0.0)
            self._speed_fits[i] = (0, fit)
            cached = self._speed_fits[i]
        return cached[1]

    @staticmethod
    def _true_speed(state: SchedulerState, i: int, w: int, speeds: SpeedModel) -> float:
        """The performance model's steps/s of job ``i`` on ``w`` GPUs of one place."""
        job_type = state.job_type[i]
        if job_type and speeds.knows(job_type):
            return float(speeds.reference_speed(job_type, w) or 0.0)
        factor = speeds.size_factor(
            state.cluster, job_type, state.model[i], int(state.gpus[i]), w, int(state.batch_size[i])
        )
        return float(state.ref_speed[i]) * factor

    # ---- allocation ----------------------------------------------------------

    def allocate(
        self,
        remaining: dict[int, float],
        curves: dict[int, SpeedCurve],
        capacity: int,
        pinned: dict[int, int],
    ) -> dict[int, int]:
        """GPUs per job: pinned jobs keep theirs; the others get one each
        (shortest predicted time first), then each further GPU goes to the job
        whose predicted remaining time drops most."""
        alloc = dict(pinned)
        left = capacity - sum(pinned.values())
        cap = self.max_gpus or capacity

        def time_at(j: int, w: int) -> float:
            return remaining[j] / float(curves[j].speed(w))

        free = sorted((j for j in remaining if j not in pinned), key=lambda j: (time_at(j, 1), j))
        heap: list[tuple[float, int, int]] = []
        for j in free:
            if left <= 0:
                break
            alloc[j] = 1
            left -= 1
            if cap > 1:
                heap.append((time_at(j, 2) - time_at(j, 1), j, 1))
        heapq.heapify(heap)
        while left > 0 and heap:
            delta, j, w = heapq.heappop(heap)
            if delta >= 0:
                break
            alloc[j] = w + 1
            left -= 1
            if w + 1 < cap:
                heapq.heappush(heap, (time_at(j, w + 2) - time_at(j, w + 1), j, w + 1))
        return alloc

    # ---- the pass -----------------------------------------------------------

    def schedule(self, state: SchedulerState) -> Plan:
        b = PlanBuilder(state)
        now = state.now
        running = state.running.array().tolist()
        pending = list(state.pending_order)
        # a job that arrives to no free GPU while others hold more than they
        # asked for does not wait for the interval: the GPUs are re-divided now
        starved = (
            bool(pending)
            and state.free.total == 0
            and any(state.held[j] > state.gpus[j] for j in running)
        )
        tick = now >= self._next_tick or starved
        if tick:
            self._next_tick = now + self.interval
        if not pending and not tick:
            return b.build(self._next_tick if running else None)
        speeds = state.speeds or SpeedModel()
        jobs = running + pending if tick else pending
        if not jobs:
            return b.build(None)
        done = state.done_steps(np.asarray(jobs, dtype=np.int64))
        finished = np.flatnonzero(state.status == 3)  # DONE
        prior = (
            float(np.median(state.total_steps[finished] / state.ref_speed[finished]))
            if len(finished)
            else PRIOR_SECONDS
        )
        remaining: dict[int, float] = {}
        curves: dict[int, SpeedCurve] = {}
        for j, d in zip(jobs, done.tolist(), strict=True):
            total = self.predicted_total(state, j, d, prior)
            remaining[j] = max(total - d, 1e-9)
            curves[j] = self.speed_curve(state, j, speeds)
        if tick:
            capacity = state.free.total + sum(len(state.alloc[j] or ()) for j in running)
            pinned: dict[int, int] = {}
            for _ in range(4):
                alloc = self.allocate(remaining, curves, capacity, pinned)
                more = {
                    j: len(state.alloc[j] or ())
                    for j in running
                    if j not in pinned and self._small_change(j, alloc, state, remaining, curves)
                }
                if not more:
                    break
                pinned |= more
        else:
            alloc = self.allocate(remaining, curves, state.free.total, {})
        # carry it out: resized jobs stop, then everyone without GPUs is placed
        to_place: list[int] = []
        for j in running if tick else ():
            want = alloc.get(j, 0)
            if want != len(state.alloc[j] or ()):
                b.stop(j)
                if want:
                    to_place.append(j)
                    self.counts["resizes"] += 1
        to_place += [j for j in pending if alloc.get(j, 0) > 0]
        to_place.sort(key=lambda j: (-alloc[j], j))
        for j in to_place:
            self._place(b, state, j, alloc[j], speeds)
        return b.build(self._next_tick)

    def _small_change(
        self,
        j: int,
        alloc: dict[int, int],
        state: SchedulerState,
        remaining: dict[int, float],
        curves: dict[int, SpeedCurve],
    ) -> bool:
        now_w = len(state.alloc[j] or ())
        want = alloc.get(j, 0)
        if want == now_w or want == 0:
            return want == now_w
        before = remaining[j] / float(curves[j].speed(now_w))
        after = remaining[j] / float(curves[j].speed(want))
        return abs(before - after) < self.min_change * before

    def _place(
        self, b: PlanBuilder, state: SchedulerState, j: int, want: int, speeds: SpeedModel
    ) -> None:
        """Start ``j`` on ``want`` GPUs, or on fewer where fragmentation leaves no room."""
        bound = int(state.type_req[j])
        free = b.free if bound < 0 else b.free.of_type(bound)
        for w in range(min(want, free.total), 0, -1):
            gpus = self.placement.choose(free, w)
            if gpus is None:
                continue
            b.start(j, gpus)
            factor = speeds.size_factor(
                state.cluster,
                state.job_type[j],
                state.model[j],
                int(state.gpus[j]),
                w,
                int(state.batch_size[j]),
            )
            if factor != 1.0:
                b.plan.factors[j] = factor
            return
