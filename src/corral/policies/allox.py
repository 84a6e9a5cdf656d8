"""AlloX: min-cost matching of jobs to (GPU type, position) slots.

AlloX schedules jobs over interchangeable resources that run them at
different speeds by solving the matching of
:mod:`corral.optimize.matching` for the waiting jobs, re-solved at every
arrival and completion. Here each GPU type is one "machine" that runs a job
of ``g`` GPUs out of its ``G`` in ``remaining time on that type x g / G``
(the type's capacity shared fluidly: our adaptation of AlloX's one-job-per-
device model to gangs on pools of GPUs). Jobs then start in the matched
order, each on its matched type when that type has GPUs for it (a job that
does not fit yet is skipped for ones behind it); running jobs are not
preempted, as in AlloX.

Fairness knob ``alpha`` (0 .. 1): the matching considers only the
longest-waiting ``max(free slots, ceil((1 - alpha) x waiting))`` jobs, so at
``alpha = 0`` it is AlloX's performance-optimal matching and as ``alpha``
grows the choice narrows towards first-come-first-served.

Scale: on one GPU type (or types that are uniformly faster for every job) the
matching is solved by sorting (:mod:`corral.optimize.matching`), exactly, at
any queue length. On types that rank jobs differently it needs the Hungarian
method on an ``n x (types x n)`` matrix, ``n^3`` time: there at most
``window`` jobs (default 1,000; about a second per solve, 0.1 s at 500) enter
the matching, those with the shortest time on their fastest type, and the
rest follow them shortest first on their fastest type. A departure from
AlloX, which matches every waiting job; it applies only to queues deeper than
``window`` on heterogeneous clusters.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from corral.model.plan import Plan
from corral.model.state import PENDING, SchedulerState
from corral.optimize.matching import min_total_completion, uniform_rates
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy, place_wide_jobs
from corral.policies.options import Option


class Allox(Policy):
    name: ClassVar[str] = "allox"
    reads_durations = True
    options: ClassVar[dict[str, Option]] = {
        "alpha": Option(
            "fairness knob: the share of jobs, longest-waiting first, left out of the choice",
            low=0,
            high=1,
        ),
        "window": Option(
            "jobs matched exactly on mixed GPU types (the rest follow shortest first)",
            "integer",
            low=1,
        ),
    }
    description: ClassVar[str] = (
        "AlloX: min-cost matching of waiting jobs to (GPU type, position) slots, non-preemptive"
    )

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        alpha: float = 0.0,
        window: int = 1000,
        **params: Any,
    ) -> None:
        super().__init__(placement, **params)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if int(window) < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.alpha = float(alpha)
        self.window = int(window)
        self._key: tuple[int, int] | None = None
        self._order: list[tuple[int, int]] = []
        self.solves = 0

    def candidates(self, state: SchedulerState) -> np.ndarray:
        """The waiting jobs the matching may choose from (longest-waiting first)."""
        waiting = state.pending_in_order()
        if self.alpha == 0.0 or not len(waiting):
            return waiting
        slots = max(1, int(state.free.total))
        keep = max(slots, math.ceil((1.0 - self.alpha) * len(waiting)))
        order = np.argsort(state.queued_since[waiting], kind="stable")
        return waiting[order[:keep]]

    def plan_order(self, state: SchedulerState, jobs: np.ndarray) -> list[tuple[int, int]]:
        """(job, GPU type) in the order the matching runs them."""
        cluster = state.cluster
        capacity = cluster.type_gpus.astype(float)
        speed = state.type_speed[jobs]
        left = np.maximum(state.total_steps[jobs] - state.steps_done[jobs], 0.0)
        with np.errstate(divide="ignore"):
            times = left[:, None] / speed * state.gpus[jobs, None] / capacity[None, :]
        fits = (state.gpus[jobs, None] <= capacity[None, :]) & (speed > 0)
        jobs, times = jobs[fits.any(axis=1)], np.where(fits, times, np.inf)[fits.any(axis=1)]
        later: list[tuple[int, int]] = []
        if len(jobs) > self.window and uniform_rates(times) is None:
            best = times.min(axis=1)
            by_best = np.argsort(best, kind="stable")
            rest = by_best[self.window :]
            later = [(int(jobs[r]), int(np.argmin(times[r]))) for r in rest.tolist()]
            keep = np.sort(by_best[: self.window])
            jobs, times = jobs[keep], times[keep]
        sequences = min_total_completion(times)
        # interleave the machines' sequences by their planned start times
        starts: list[tuple[float, int, int]] = []
        for t, seq in enumerate(sequences):
            clock = 0.0
            for r in seq:
                starts.append((clock, int(jobs[r]), t))
                clock += float(times[r, t])
        starts.sort()
        return [(j, t) for _, j, t in starts] + later

    def schedule(self, state: SchedulerState) -> Plan:
        builder = PlanBuilder(state)
        if not len(state.pending):
            return builder.build()
        arrived = len(state.pending) + len(state.running) + len(state.finished)
        key = (arrived, len(state.finished))
        if key != self._key or not self._order:
            self._key = key
            self.solves += 1
            self._order = self.plan_order(state, self.candidates(state))
        room = builder.free.by_type()
        for j, t in self._order:
            need = int(state.gpus[j])
            if state.status[j] != PENDING or room[t] < need:
                continue
            gpus = self.placement.choose_for(builder.free.of_type(t), state, j)
            if gpus is None:
                continue
            builder.start(j, gpus)
            room[t] -= need
        place_wide_jobs(state, builder, self.placement)
        self._order = [(j, t) for j, t in self._order if j not in builder.plan.starts]
        return builder.build()
