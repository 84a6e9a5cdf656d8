"""Ended jobs moved out of the hot tables: a store that does not grow for ever.

Every job the service ever ran stays in ``jobs``, with its attempts and events,
unless something moves it out; listings, passes and recovery then read past
more and more history. A job that ended more than ``archive_after`` ago (the
service does it on its own once an hour; ``corral store archive --older-than``
does it on demand while the service is stopped) becomes one row of
``archived_jobs``: its accounting as ``corral history`` shows it (wait, run time,
GPU-hours, attempts, preemptions, exit code) and its spec. Its attempts, events
and stored inputs are deleted. ``corral history`` reads both tables; ``corral
show`` of an archived job says that it was archived; a dependency on one is
judged by its archived state.

What moves together: an array's tasks all at once (their stored script is kept
once for the whole array), a job run as rounds with all its tasks. A group with
one member still live, or ended too recently, waits. The newest job never moves:
SQLite gives a new row the highest id plus one, and a job id must never be
given twice (its folder and logs are named by it).

The totals the service's metrics count (jobs ended by state, preemptions,
attempts ended by cause) are kept in ``meta`` as they leave, so a Prometheus
counter never goes down.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.orm import Session

from corral.model.status import JobStatus
from corral.runtime.storage.store import (
    ArchivedJobRow,
    AttemptRow,
    EventRow,
    JobInputRow,
    JobRow,
    MetaRow,
    Store,
    in_chunks,
)

TERMINAL = [s.value for s in JobStatus if s.terminal]
TOTALS_KEY = "archived_totals"
"""The ``meta`` row that keeps what archived jobs add to the metrics' counters."""
BATCH = 2000
"""Jobs moved in one transaction (a long one would hold the store's write lock)."""


@dataclass
class Archived:
    """What one call moved."""

    jobs: int = 0
    attempts: int = 0
    events: int = 0
    waiting: int = 0
    """Jobs old enough that stayed: a member of their array or rounds is not."""
    users: dict[str, int] = field(default_factory=dict)


def archived_totals(s: Session) -> dict[str, dict[str, int]]:
    """What archived jobs add to the counters: ``jobs`` by state, ``preemptions``
    (``{"all": n}``) and ``attempts`` by how they ended."""
    row = s.get(MetaRow, TOTALS_KEY)
    out: dict[str, dict[str, int]] = {"jobs": {}, "preemptions": {}, "attempts": {}}
    if row is not None:
        out.update(json.loads(row.value))
    return out


def _group(row: JobRow) -> int:
    """The id a job moves with: its rounds' job, its array's first task, or its own."""
    if row.parent is not None:
        return int(row.parent)
    first = row.spec.get("array_job") if isinstance(row.spec, dict) else None
    return int(first) if isinstance(first, int) else int(row.id)


def archive_ended(
    store: Store, older_than: float, now: float, batch: int = BATCH, after: int = 0
) -> tuple[Archived, int | None]:
    """Move the jobs that ended before ``now - older_than`` among the next ``batch``
    such jobs with ids above ``after`` (with the rest of their array or rounds) to
    ``archived_jobs``, in one transaction; and the last id read (None: no more)."""
    cutoff = now - older_than
    done = Archived()
    with store.session() as s:
        newest = s.scalar(select(func.max(JobRow.id)))
        old = and_(JobRow.status.in_(TERMINAL), JobRow.end_time < cutoff)
        page = list(
            s.scalars(select(JobRow).where(old, JobRow.id > after).order_by(JobRow.id).limit(batch))
        )
        if not page:
            return done, None
        groups = {_group(row) for row in page}
        moving = _ready(s, groups, cutoff, newest)
        done.waiting = sum(1 for row in page if _group(row) not in {_group(m) for m in moving})
        if moving:
            _move(s, moving, now, done)
    return done, page[-1].id


def _ready(s: Session, keys: set[int], cutoff: float, newest: int | None) -> list[JobRow]:
    """Every member of the groups ``keys`` whose members have all ended before
    ``cutoff`` (and hold not the newest job)."""
    first = JobRow.spec["array_job"].as_integer()
    members: dict[int, list[JobRow]] = {}
    for chunk in in_chunks(sorted(keys)):
        found = s.scalars(
            select(JobRow).where(
                or_(JobRow.id.in_(chunk), JobRow.parent.in_(chunk), first.in_(chunk))
            )
        )
        for row in found:
            members.setdefault(_group(row), []).append(row)
    return [
        row
        for key, rows in members.items()
        if key in keys
        and all(
            r.status in TERMINAL and r.end_time is not None and r.end_time < cutoff
            and r.id != newest
            for r in rows
        )
        for row in rows
    ]  # fmt: skip


def _move(s: Session, moving: list[JobRow], now: float, done: Archived) -> None:
    """Their accounting into ``archived_jobs``; their rows, attempts, events and stored
    inputs out; the metrics' totals kept."""
    ids = [r.id for r in moving]
    spans: dict[int, list[tuple[float, int, str | None]]] = {}
    for chunk in in_chunks(ids):
        for att in s.scalars(select(AttemptRow).where(AttemptRow.job_id.in_(chunk))):
            took = max((att.end_time or att.start_time) - att.start_time, 0.0)
            spans.setdefault(att.job_id, []).append((took, len(att.gpus or []), att.cause))
    totals = archived_totals(s)
    for row in moving:
        ran = spans.get(row.id, [])
        spec = row.spec if isinstance(row.spec, dict) else {}
        s.add(
            ArchivedJobRow(
                id=row.id,
                name=row.name,
                user=row.user,
                spec=spec,
                status=row.status,
                reason=row.reason,
                gpus=int(spec.get("gpus", 1)),
                submit_time=row.submit_time,
                first_start=row.first_start,
                end_time=row.end_time,
                elapsed=sum(r for r, _, _ in ran),
                gpu_hours=sum(r * n for r, n, _ in ran) / 3600,
                attempts=len(ran),
                preemptions=row.preemptions,
                exit_code=row.exit_code,
                archived_at=now,
            )
        )
        _count(totals["jobs"], row.status)
        _count(totals["preemptions"], "all", row.preemptions)
        for _, _, cause in ran:
            _count(totals["attempts"], str(cause))
        done.users[row.user] = done.users.get(row.user, 0) + 1
    for chunk in in_chunks(ids):
        done.attempts += _deleted(s, delete(AttemptRow).where(AttemptRow.job_id.in_(chunk)))
        done.events += _deleted(s, delete(EventRow).where(EventRow.job_id.in_(chunk)))
        s.execute(delete(JobRow).where(JobRow.id.in_(chunk)))
    for chunk in in_chunks(sorted({_group(r) for r in moving})):
        s.execute(delete(JobInputRow).where(JobInputRow.job_id.in_(chunk)))
    meta = s.get(MetaRow, TOTALS_KEY)
    if meta is None:
        s.add(MetaRow(key=TOTALS_KEY, value=json.dumps(totals)))
    else:
        meta.value = json.dumps(totals)
    done.jobs = len(moving)


def archive_all(store: Store, older_than: float, now: float, batch: int = BATCH) -> Archived:
    """:func:`archive_ended` page after page, one transaction each, to the last job."""
    total, after = Archived(), 0
    while True:
        step, last = archive_ended(store, older_than, now, batch, after)
        if last is None:
            return total
        after = last
        total.jobs += step.jobs
        total.attempts += step.attempts
        total.events += step.events
        total.waiting += step.waiting
        for user, n in step.users.items():
            total.users[user] = total.users.get(user, 0) + n


def _count(into: dict[str, int], key: str, n: int = 1) -> None:
    into[key] = into.get(key, 0) + n


def _deleted(s: Session, statement: object) -> int:
    return int(getattr(s.execute(statement), "rowcount", 0) or 0)  # type: ignore[call-overload]
