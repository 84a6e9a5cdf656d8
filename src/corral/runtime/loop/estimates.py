"""How long a live job is expected to run, for policies that rank by work left.

SRTF, SJF, Themis, AlloX and Gavel's finish-time fairness read a job's
duration. In the simulator the trace gives it; live, the owner may give it
(``duration``, else the ``wall_time`` limit as Slurm's backfill does).
Otherwise the median run time of the owner's last finished jobs stands in,
or the service's ``default_duration`` when the owner has none, and the
state marks the figure as an estimate.

Once a job that gives its ``total_steps`` reports heartbeats, its remaining
time is measured instead: steps left over its reported throughput. That
figure replaces the owner's guess (the policy is told it is no estimate).

A job that trains to a ``target_loss`` gets Optimus' estimate: the loss curve
its heartbeats trace (:class:`LossHistory`) is fitted, solved for the step at
which it reaches the target, and the steps left go over the measured
throughput (source ``convergence``). It stays an estimate for the policy.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.estimate.convergence import (
    MIN_POINTS,
    LossCurve,
    fit_loss_curve,
    predicted_total_steps,
)
from corral.model.status import JobStatus
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.storage.store import JobRow, Store

HISTORY = 20
"""Finished jobs of the owner the estimate looks at (the most recent)."""


def run_time_history(store: Store, s: Session, user: str, limit: int = HISTORY) -> list[float]:
    """Run time (seconds summed over attempts) of the owner's last succeeded jobs."""
    jobs = list(
        s.scalars(
            select(JobRow.id)
            .where(JobRow.user == user, JobRow.status == JobStatus.SUCCEEDED)
            .order_by(JobRow.id.desc())
            .limit(limit)
        )
    )
    spent = store.closed_attempt_seconds(s, jobs)
    return [t for t in spent.values() if t > 0]


ESTIMATED = {"history", "default"}
"""Sources of a duration that are stand-ins, not the owner's figure or a measurement."""


def expected_duration(
    store: Store,
    s: Session,
    spec: JobSpec,
    user: str,
    default: float,
    histories: dict[str, list[float]] | None = None,
) -> tuple[float, str]:
    """(seconds, source): the owner's figure (``duration``, ``wall_time``), or a stand-in
    (``history``, ``default``). ``histories`` caches owners' histories across the jobs
    of one batch (a recovery reads thousands of jobs of a few users)."""
    if spec.duration is not None:
        return spec.duration, "duration"
    if spec.wall_time is not None:
        return spec.wall_time, "wall_time"
    if histories is None:
        histories = {}
    if user not in histories:
        histories[user] = run_time_history(store, s, user)
    history = histories[user]
    if history:
        return statistics.median(history), "history"
    return default, "default"


def measured_remaining(goal: float, steps: float, throughput: float | None) -> float | None:
    """Seconds left from heartbeats: steps to the goal over steps per second (None if
    the job has not reported a throughput yet)."""
    if throughput is None or not throughput > 0:
        return None
    return max(goal - steps, 0.0) / throughput


MAX_POINTS = 400
"""Loss points kept per job: beyond, every other one is dropped (the fit needs
the curve's shape, not every heartbeat)."""


def extend_series(
    series: dict[str, list[Any]] | None, point: dict[str, Any], order: str
) -> dict[str, list[Any]] | None:
    """A stored series of heartbeat points (one list per field) with ``point`` added
    when its ``order`` field is past the last one; beyond :data:`MAX_POINTS`, every
    other point is dropped, so it stays small however long the job runs."""
    if series and series[order] and point[order] <= series[order][-1]:
        return series
    grown = {key: [*(series or {}).get(key, []), value] for key, value in point.items()}
    if len(grown[order]) > MAX_POINTS:
        grown = {key: values[::2] for key, values in grown.items()}
    return grown


def extend_curve(
    curve: dict[str, list[float]] | None, step: float, loss: float | None
) -> dict[str, list[float]] | None:
    """A job's stored loss curve with a heartbeat's point added (when it is past the
    last one). The store keeps the curve, so a restarted service fits the same points."""
    if loss is None or not math.isfinite(loss):
        return curve
    return extend_series(curve, {"steps": float(step), "losses": float(loss)}, "steps")


def extend_progress(
    progress: dict[str, list[Any]] | None,
    now: float,
    step: float,
    throughput: float | None,
    loss: float | None,
) -> dict[str, list[Any]] | None:
    """A job's heartbeat history (time, steps, throughput, loss; missing values as
    None) with one more heartbeat: what its dashboard page charts."""
    point = {
        "times": round(now, 3),
        "steps": float(step),
        "throughput": _finite(throughput),
        "loss": _finite(loss),
    }
    return extend_series(progress, point, "times")


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


@dataclass
class LossHistory:
    """The (step, loss) points a job's heartbeats reported, and its latest fit."""

    target: float
    steps: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    fitted_at: int = 0
    curve: LossCurve | None = None

    def update(self, stored: dict[str, list[float]] | None) -> None:
        """Take the job's stored curve (see :func:`extend_curve`)."""
        if not stored:
            return
        steps, losses = stored.get("steps", []), stored.get("losses", [])
        if len(steps) != len(losses):
            return
        if len(steps) < len(self.steps):  # thinned: the next fit starts afresh
            self.fitted_at = 0
        self.steps, self.losses = [float(x) for x in steps], [float(x) for x in losses]

    def predicted_total(self, done: float) -> float | None:
        """Steps the job needs in all, refitted once the points grew by a tenth."""
        n = len(self.steps)
        if n < MIN_POINTS:
            return None
        if self.fitted_at == 0 or n >= self.fitted_at * 1.1 + 1:
            self.curve = fit_loss_curve(self.steps, self.losses)
            self.fitted_at = n
        return predicted_total_steps(self.curve, self.target, done)
