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
"""

from __future__ import annotations

import statistics

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.model.status import JobStatus
from corral.runtime.specs import JobSpec
from corral.runtime.store import JobRow, Store

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
