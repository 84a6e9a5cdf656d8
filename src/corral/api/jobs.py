"""Routes on jobs: submit, list, show, act on them, their logs, heartbeats, history."""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic_core import to_json
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from corral.api.common import (
    AUTH,
    ON_JOB,
    WITH_BODY,
    Context,
    Ctx,
    JobId,
    User,
    error_answers,
    job_or_404,
    owned,
    positions,
)
from corral.api.views import (
    HIDDEN,
    LOG_CHUNK,
    MAX_ID,
    SPEC_FIELDS,
    AttemptView,
    EventView,
    HeartbeatAnswer,
    HeartbeatBody,
    HistoryView,
    JobDetail,
    JobView,
    PriorityBody,
    brief_columns,
    brief_table,
    brief_views,
    columns_of,
    private_spec,
)
from corral.model.jobs import JobStatus
from corral.model.status import parse_states
from corral.runtime.execution.exits import PARK
from corral.runtime.execution.job_files import open_regular
from corral.runtime.jobspec.config import UserConfig, hash_token
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.admission import Admitted, Refused
from corral.runtime.loop.estimates import extend_curve, extend_progress
from corral.runtime.loop.inbox import NO_WORK_LEFT
from corral.runtime.loop.round_policy import plans_rounds
from corral.runtime.loop.scheduler import TERMINAL
from corral.runtime.storage.store import (
    ArchivedJobRow,
    AttemptRow,
    EventRow,
    JobInputRow,
    JobRow,
)

router = APIRouter()
LIVE_STATES = {JobStatus.PENDING, JobStatus.STARTING, JobStatus.RUNNING}


def hides(ctx: Context, user: UserConfig, owner: str) -> bool:
    """Whether ``user`` sees another's job without its command, environment and paths
    (``private_data``; admins see all)."""
    return ctx.config.private_data and not user.admin and owner != user.name


def left(ctx: Context, row: JobRow) -> tuple[float, str] | None:
    """The work the policy believes a live job has left (None once it has ended)."""
    if ctx.scheduler is None or row.status in TERMINAL:
        return None
    return ctx.scheduler.answers.remaining.get(row.id)  # (as of the loop's last pass)


def ask_scheduler(
    ctx: Context, job_id: int, user: UserConfig, action: str, allowed: set[JobStatus]
) -> JobView:
    """Record an action for the scheduler loop (in the store: it outlives a restart),
    then wait for the pass that carries it out, and answer the job as that left it."""
    with ctx.store.session() as s:
        row = owned(s, job_id, user)
        if row.status not in allowed:
            raise HTTPException(
                status.HTTP_409_CONFLICT, f"job {job_id} is {row.status}; cannot {action}"
            )
        if row.request != "cancel":  # a cancel is never overridden
            row.request = action
        ctx.store.event(s, "requested", job_id, action=action, by=user.name)
    if ctx.scheduler is not None:
        ctx.scheduler.after_a_pass()
    with ctx.store.session() as s:
        return JobView.of(job_or_404(s, job_id))


@router.post(
    "/v1/jobs",
    response_model=JobView,
    status_code=201,
    tags=["jobs"],
    responses=error_answers(400, 401, 403, 413, 429),
)
def submit(ctx: Ctx, spec: JobSpec, user: User) -> JobView:
    admission = ctx.admission
    spec = admission.check(spec, user)
    with ctx.store.session() as s:
        admission.check_quota(s, user, len(admission.tasks(spec)))
        view = submitted(admission.admit(s, spec, user))
    if ctx.scheduler is not None:
        ctx.scheduler.notify()
    return view


def submitted(admitted: Admitted) -> JobView:
    """The view of a job just queued; an array's names every task."""
    view = JobView.of(admitted.first)
    if admitted.first.spec.get("array_job") is not None:
        view.array_tasks = admitted.ids
    return view


MAX_BATCH = 1000
"""Jobs one batched submission may hold (each may be an array of max_array_size tasks)."""


class Batch(BaseModel):
    """Several jobs submitted at once: all are admitted, or none."""

    model_config = ConfigDict(extra="forbid")
    jobs: list[JobSpec] = Field(min_length=1, max_length=MAX_BATCH)


@router.post(
    "/v1/jobs/batch",
    response_model=list[JobView],
    status_code=201,
    tags=["jobs"],
    responses=error_answers(400, 401, 403, 413, 429),
)
def submit_batch(ctx: Ctx, batch: Batch, user: User) -> list[JobView]:
    """Submit up to 1,000 jobs in one request and one transaction: every job is checked
    first (an error names ``jobs[k]`` and its field) and either all are queued or none."""
    admission = ctx.admission
    checked: list[JobSpec] = []
    for k, spec in enumerate(batch.jobs):
        try:
            checked.append(admission.check(spec, user))
        except Refused as exc:
            raise exc.in_batch(k) from None
    count = 0
    for spec in checked:  # (one array listed at a time, and no more once past the quota:
        count += len(admission.tasks(spec))  # a batch of a thousand 10,001-task arrays
        if count > ctx.config.max_jobs_per_user:  # must not list ten million indices)
            break
    views = []
    with ctx.store.session() as s:
        admission.check_quota(s, user, count)
        for k, spec in enumerate(checked):
            try:
                views.append(submitted(admission.admit(s, spec, user)))
            except Refused as exc:
                raise exc.in_batch(k) from None
    if ctx.scheduler is not None:
        ctx.scheduler.notify()
    return views


JOB_LIST = TypeAdapter(list[JobView])
PENDING = JobStatus.PENDING


@dataclass
class Listed:
    """What a listing read of the store, kept until the store changes."""

    rows: Sequence[Any]
    """The rows themselves, where the views need whole rows (else none)."""
    table: dict[str, Sequence[Any]]
    """The rows a column each (by label), where only columns are shown (else none)."""
    specs: dict[str, list[Any]]
    """The spec fields asked for, a column each (:class:`StoredSpecs`)."""
    headers: dict[str, str]
    where: dict[int, int]
    """Waiting jobs' places in the queue."""
    live: list[int]
    """The jobs listed that have not ended."""

    @property
    def size(self) -> int:
        """How many jobs are listed."""
        return len(self.rows) or len(self.table.get("id", ()))


PAGE_HEADERS = {
    "X-Total-Count": "jobs that match, over all pages",
    "X-Next-After": "present when more jobs follow: pass it as `after` for the next page",
    "X-Next-Before": "with newest: present when older jobs follow; pass it as `before`",
}


@router.get(
    "/v1/jobs",
    response_model=list[JobView],
    tags=["jobs"],
    responses={
        **AUTH,
        200: {
            "description": "a page of jobs, oldest first",
            "headers": {
                k: {"description": v, "schema": {"type": "string"}} for k, v in PAGE_HEADERS.items()
            },
        },
    },
)
def queue(
    ctx: Ctx,
    user: User,
    state: Annotated[
        str | None,
        Query(
            max_length=200,
            description="comma-separated states, corral's or Slurm's (PD, R, CD...), "
            "or 'all' (default: live)",
        ),
    ] = None,
    mine: bool = False,
    of: Annotated[
        str | None, Query(max_length=1000, description="comma-separated users' jobs only")
    ] = None,
    name: Annotated[
        str | None, Query(max_length=1000, description="comma-separated job names only")
    ] = None,
    ids: Annotated[
        str | None, Query(max_length=10000, description="comma-separated job ids only")
    ] = None,
    after: Annotated[
        int, Query(ge=0, le=MAX_ID, description="only jobs with a larger id (the page cursor)")
    ] = 0,
    newest: Annotated[
        bool, Query(description="newest first; the page cursor is then `before`")
    ] = False,
    before: Annotated[
        int, Query(ge=0, le=MAX_ID, description="with newest: only jobs with a smaller id")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=100000, description="jobs per page at most")] = 1000,
    fields: Annotated[
        str | None,
        Query(
            max_length=1000,
            description="comma-separated fields of each job to return (default: all); "
            "a listing of thousands of jobs is a fraction of the size",
        ),
    ] = None,
    layout: Annotated[
        Literal["rows", "columns"],
        Query(
            description="rows: a list of jobs; columns: an object of one list per field, "
            "the jobs in the same order in each (a third of the size of ten thousand rows)"
        ),
    ] = "rows",
) -> list[JobView]:
    """Jobs in id (submission) order, a page at a time: the answer's ``X-Total-Count``
    says how many match in all, and ``X-Next-After`` (when more follow) is the cursor
    of the next page. Nothing is left out silently."""
    include = _fields(fields)
    # plain rows, not ORM objects: a listing reads them once (a third of the time);
    # with fields that columns give, only those columns (the spec's scalars kept aside)
    brief = brief_columns(include | {"status", "user"}) if include is not None else None
    columns = brief if brief is not None else list(JobRow.__table__.columns)
    spec_names = sorted(SPEC_FIELDS.keys() & include) if include is not None else []

    def page() -> Listed:
        query = select(JobRow)
        if state and state.strip().lower() == "all":
            pass
        elif state:
            query = query.where(JobRow.status.in_(_states(state)))
        else:
            query = query.where(JobRow.status.not_in(TERMINAL))
        if mine:
            query = query.where(JobRow.user == user.name)
        if of:
            query = query.where(JobRow.user.in_(_words(of)))
        if name:
            query = query.where(JobRow.name.in_(_words(name)))
        if ids:
            query = query.where(JobRow.id.in_(_ids(ids)))
        counted = select(func.count()).select_from(query.subquery())
        with ctx.store.session() as s:
            if newest:
                if before:
                    query = query.where(JobRow.id < before)
                query = query.order_by(JobRow.id.desc()).limit(limit + 1)
            else:
                query = query.where(JobRow.id > after).order_by(JobRow.id).limit(limit + 1)
            # (Core's rows: the ORM's loading is a fifth of a listing of ten thousand)
            rows = s.connection().execute(query.with_only_columns(*columns)).all()
            cut = len(rows) > limit
            rows = rows[:limit]
            headers = {}
            if cut:
                headers["X-Next-Before" if newest else "X-Next-After"] = str(rows[-1].id)
            whole = not cut and not (before if newest else after)  # (every match is here)
            headers["X-Total-Count"] = str(len(rows) if whole else s.scalar(counted) or 0)
            table = columns_of(rows, [c.name for c in columns])
            job_ids, states = table["id"], table["status"]
            specs = ctx.specs.columns(s, job_ids, table["submit_time"], query, spec_names)
            waiting = [job for job, now in zip(job_ids, states, strict=True) if now == PENDING]
            where = positions(s, waiting)
        live = [job for job, now in zip(job_ids, states, strict=True) if now not in TERMINAL]
        if brief is None:  # (the views read whole rows; a copy by columns is not kept)
            return Listed(rows, {}, specs, headers, where, live)
        return Listed((), table, specs, headers, where, live)

    # a dashboard's page asked again each second, a queue listed again: kept until the
    # store changes (weighed by cells, so no number of listings holds much memory)
    asked = (state, mine and user.name, of, name, ids, after, newest, before, limit)
    key = ("jobs", *asked, None if include is None else tuple(sorted(include)))
    listed = ctx.store.cached(key, page, lambda kept: kept.size * len(columns))
    published = ctx.scheduler.answers.remaining if ctx.scheduler is not None else NO_WORK_LEFT
    known = published.pick(listed.live)
    if brief is not None and include is not None:
        table = brief_table(listed.table, listed.specs, include, listed.where, known)
        # (pydantic's serialiser: a fifth of json.dumps' time)
        body = to_json(table if layout == "columns" else brief_views(table))
    else:
        where = listed.where
        views = [JobView.of(r, where.get(r.id), known.get(r.id)) for r in listed.rows]
        for view in views:
            if hides(ctx, user, view.user):
                view.command = [HIDDEN]
        # serialised once here: FastAPI would validate ten thousand views again first
        shown = None if include is None else {"__all__": include}
        if layout == "columns":
            dumped = JOB_LIST.dump_python(views, include=shown, mode="json")
            names = list(dumped[0]) if dumped else sorted(include or JobView.model_fields)
            body = to_json({n: [view[n] for view in dumped] for n in names})
        else:
            body = JOB_LIST.dump_json(views, include=shown)
    return Response(body, media_type="application/json", headers=dict(listed.headers))  # type: ignore[return-value]


def _unprocessable(param: str, message: str) -> HTTPException:
    return HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        detail=[{"loc": ["query", param], "msg": message, "type": "value_error"}],
    )


def _states(text: str) -> list[str]:
    """Statuses from a ``state`` query (corral's names or Slurm's); a 422 naming an
    unknown one."""
    try:
        return [s.value for s in parse_states(text)]
    except ValueError as exc:
        raise _unprocessable("state", str(exc)) from None


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def _ids(text: str) -> list[int]:
    try:
        out = [int(w) for w in _words(text)]
    except ValueError:
        raise _unprocessable("ids", f"'{text}': give job ids, comma-separated") from None
    if any(not 1 <= i <= MAX_ID for i in out):
        raise _unprocessable("ids", f"job ids are 1..{MAX_ID}")
    return out


def _fields(text: str | None) -> set[str] | None:
    """The job-view fields asked for (None: all); an unknown one is a 422 naming it."""
    if text is None:
        return None
    wanted = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(wanted - set(JobView.model_fields))
    if unknown:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=[
                {
                    "loc": ["query", "fields"],
                    "msg": f"no job field '{unknown[0]}' (fields: "
                    f"{', '.join(JobView.model_fields)})",
                    "type": "value_error",
                }
            ],
        )
    return wanted or None


@router.get("/v1/history", response_model=list[HistoryView], tags=["jobs"], responses=AUTH)
def history(
    ctx: Ctx,
    user: User,
    of: Annotated[
        str | None, Query(max_length=64, description="this user's jobs (default: yours)")
    ] = None,
    all_users: bool = False,
    since: Annotated[
        float, Query(ge=0, le=1e12, description="submitted at or after (Unix time)")
    ] = 0.0,
    until: Annotated[
        float | None, Query(ge=0, le=1e12, description="submitted before (Unix time)")
    ] = None,
    state: Annotated[
        str | None,
        Query(max_length=200, description="comma-separated states, corral's or Slurm's"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100000)] = 1000,
) -> list[HistoryView]:
    """Accounting: every job's wait, run time and GPU-hours (Slurm's sacct), the jobs
    archived (``archive_after``) included."""
    now = time.time()
    with ctx.store.session() as s:
        query = select(JobRow).where(JobRow.submit_time >= since)
        older = select(ArchivedJobRow).where(ArchivedJobRow.submit_time >= since)
        if until is not None:
            query = query.where(JobRow.submit_time < until)
            older = older.where(ArchivedJobRow.submit_time < until)
        if state:
            query = query.where(JobRow.status.in_(_states(state)))
            older = older.where(ArchivedJobRow.status.in_(_states(state)))
        if not all_users:
            query = query.where(JobRow.user == (of or user.name))
            older = older.where(ArchivedJobRow.user == (of or user.name))
        rows = list(s.scalars(query.order_by(JobRow.id.desc()).limit(limit)))
        older = older.order_by(ArchivedJobRow.id.desc()).limit(limit)
        kept = [_archived_view(r) for r in s.scalars(older)]
        if kept:  # the newest ``limit`` of both
            newest = sorted([r.id for r in rows] + [v.id for v in kept])[-limit:]
            rows = [r for r in rows if r.id >= newest[0]]
            kept = [v for v in kept if v.id >= newest[0]]
        ids = [r.id for r in rows]
        spans: dict[int, list[tuple[float, int]]] = {}
        for att in s.scalars(select(AttemptRow).where(AttemptRow.job_id.in_(ids))):
            span = max((att.end_time or now) - att.start_time, 0.0)
            spans.setdefault(att.job_id, []).append((span, len(att.gpus)))
        out = []
        for row in reversed(rows):
            ran = spans.get(row.id, [])
            out.append(
                HistoryView(
                    id=row.id,
                    name=row.name,
                    user=row.user,
                    status=row.status,
                    gpus=int(row.spec.get("gpus", 1)),
                    submit_time=row.submit_time,
                    first_start=row.first_start,
                    end_time=row.end_time,
                    wait=None if row.first_start is None else row.first_start - row.submit_time,
                    elapsed=sum(span for span, _ in ran),
                    gpu_hours=sum(span * n for span, n in ran) / 3600,
                    attempts=len(ran),
                    preemptions=row.preemptions,
                    exit_code=row.exit_code,
                )
            )
        return sorted(kept + out, key=lambda v: v.id)


def _archived_view(row: ArchivedJobRow) -> HistoryView:
    return HistoryView(
        id=row.id,
        name=row.name,
        user=row.user,
        status=row.status,
        gpus=row.gpus,
        submit_time=row.submit_time,
        first_start=row.first_start,
        end_time=row.end_time,
        wait=None if row.first_start is None else row.first_start - row.submit_time,
        elapsed=row.elapsed,
        gpu_hours=row.gpu_hours,
        attempts=row.attempts,
        preemptions=row.preemptions,
        exit_code=row.exit_code,
    )


@router.get(
    "/v1/jobs/{job_id}", response_model=JobDetail, tags=["jobs"], responses=error_answers(401, 404)
)
def show(ctx: Ctx, job_id: JobId, user: User) -> JobDetail:
    with ctx.store.session() as s:
        row = job_or_404(s, job_id)
        attempts = s.scalars(
            select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)
        )
        events = s.scalars(select(EventRow).where(EventRow.job_id == job_id).order_by(EventRow.id))
        base = JobView.of(row, positions(s, [job_id]).get(job_id), left(ctx, row))
        spec = dict(row.spec) if isinstance(row.spec, dict) else {}
        if hides(ctx, user, row.user):
            spec = private_spec(spec)
            base.command = [HIDDEN]
        elif row.user != user.name and not user.admin and isinstance(spec.get("env"), dict):
            spec["env"] = {key: HIDDEN for key in spec["env"]}
        return JobDetail(
            **base.model_dump(),
            spec=spec,
            attempts=[AttemptView.of(a) for a in attempts],
            events=[EventView.of(e) for e in events],
            loss_curve=row.loss_curve,
            progress=row.progress,
            policy_view={}
            if ctx.scheduler is None or not in_policys_view(row)
            else ctx.scheduler.ask_view(row.id),
        )


def in_policys_view(row: JobRow) -> bool:
    """Whether the policy may have a view of the job: not one ended, suspended, held or
    of no GPUs (asking the loop costs a wait for its next pass)."""
    gpus = row.spec.get("gpus", 1) if isinstance(row.spec, dict) else 1
    return (
        row.status not in TERMINAL
        and row.status != JobStatus.SUSPENDED
        and row.held is None
        and gpus != 0
    )


@router.post("/v1/jobs/{job_id}/cancel", response_model=JobView, tags=["jobs"], responses=ON_JOB)
def cancel(ctx: Ctx, job_id: JobId, user: User) -> JobView:
    return ask_scheduler(ctx, job_id, user, "cancel", LIVE_STATES | {JobStatus.SUSPENDED})


@router.post("/v1/jobs/{job_id}/suspend", response_model=JobView, tags=["jobs"], responses=ON_JOB)
def suspend(ctx: Ctx, job_id: JobId, user: User) -> JobView:
    if plans_rounds(ctx.config.policy):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"under policy {ctx.config.policy} jobs run as rounds of short tasks and are "
            "not suspended; cancel the job instead",
        )
    with ctx.store.session() as s:
        if (job_or_404(s, job_id).spec or {}).get("interactive"):
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"job {job_id} is an interactive allocation, which is never suspended; "
                "exit its shell or cancel it",
            )
    return ask_scheduler(ctx, job_id, user, "suspend", LIVE_STATES)


@router.post("/v1/jobs/{job_id}/requeue", response_model=JobView, tags=["jobs"], responses=ON_JOB)
def requeue(ctx: Ctx, job_id: JobId, user: User) -> JobView:
    """Stop a running job and queue it again (scontrol requeue): it starts over, from
    its checkpoint where it keeps one, without using a retry. A job may ask it of
    itself (with its own token): the checkpoint-and-requeue of a ``--signal`` trap."""
    return ask_scheduler(ctx, job_id, user, "requeue", {JobStatus.RUNNING})


@router.post("/v1/jobs/{job_id}/hold", response_model=JobView, tags=["jobs"], responses=ON_JOB)
def hold(ctx: Ctx, job_id: JobId, user: User) -> JobView:
    """Keep a waiting job from starting until it is released (scontrol hold): it stays
    PENDING with the reason JobHeldUser, or JobHeldAdmin when an admin holds another
    user's job (then only an admin releases it). A job that has started is a 409
    (suspend it instead)."""
    with ctx.store.session() as s:
        owner = owned(s, job_id, user).user
    return ask_scheduler(ctx, job_id, user, hold_request(user, owner), {JobStatus.PENDING})


def hold_request(user: UserConfig, owner: str) -> str:
    """The loop's request for ``user`` holding a job of ``owner``: ``hold_admin`` when an
    admin holds someone else's job (JobHeldAdmin), else ``hold``."""
    return "hold_admin" if user.admin and owner != user.name else "hold"


def release_refusal(status_: str, held: str | None, user: UserConfig) -> str | None:
    """Why ``user`` cannot release a job in ``status_`` held by ``held`` (None: they can)."""
    if status_ == JobStatus.PENDING and held is None:
        return "not held"
    if held == "admin" and not user.admin:
        return "held by an admin"
    return None


@router.post("/v1/jobs/{job_id}/release", response_model=JobView, tags=["jobs"], responses=ON_JOB)
def release(ctx: Ctx, job_id: JobId, user: User) -> JobView:
    """Let a held (or suspended) job back into the queue (scontrol release)."""
    with ctx.store.session() as s:
        row = owned(s, job_id, user)
        why = release_refusal(row.status, row.held, user)
        if why == "not held" and row.request is None:  # (a hold asked, not yet carried out)
            raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} is not held")
        if why == "held by an admin":
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"job {job_id} was held by an admin; ask one to release it",
            )
    return ask_scheduler(ctx, job_id, user, "release", {JobStatus.PENDING, JobStatus.SUSPENDED})


@router.post("/v1/jobs/{job_id}/resume", response_model=JobView, tags=["jobs"], responses=ON_JOB)
def resume(ctx: Ctx, job_id: JobId, user: User) -> JobView:
    """Resume a suspended job, or one still checkpointing on its way to suspension
    (RUNNING with its attempt stopping for a suspend); any other job is a 409."""
    with ctx.store.session() as s:
        row = owned(s, job_id, user)
        if row.status == JobStatus.RUNNING and not suspending(s, row):
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"job {job_id} is RUNNING, not suspended; nothing to resume",
            )
    return ask_scheduler(ctx, job_id, user, "resume", {JobStatus.SUSPENDED, JobStatus.RUNNING})


def suspending(s: Session, row: JobRow) -> bool:
    """Whether a running job is on its way to SUSPENDED (asked, or its attempt stopping)."""
    if row.request == "suspend":
        return True
    last = s.scalars(
        select(AttemptRow).where(AttemptRow.job_id == row.id).order_by(AttemptRow.number.desc())
    ).first()
    return last is not None and last.end_time is None and last.stop == "suspend"


@router.put(
    "/v1/jobs/{job_id}/priority", response_model=JobView, tags=["jobs"], responses=WITH_BODY
)
def set_priority(ctx: Ctx, job_id: JobId, body: PriorityBody, user: User) -> JobView:
    with ctx.store.session() as s:
        row = owned(s, job_id, user)
        ctx.admission.check_priority(body.priority, user)
        if row.status in TERMINAL:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} is {row.status}")
        row.priority = body.priority
    return ask_scheduler(ctx, job_id, user, "priority", LIVE_STATES | {JobStatus.SUSPENDED})


@router.get(
    "/v1/jobs/{job_id}/script",
    tags=["jobs"],
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "the batch script as submitted",
        },
        **error_answers(401, 403, 404),
    },
)
def script(ctx: Ctx, job_id: JobId, user: User) -> Response:
    """The script a batch job runs, as it was when submitted (its owner and admins;
    Slurm's ``scontrol write batch_script``)."""
    with ctx.store.session() as s:
        row = owned(s, job_id, user)
        first = row.spec.get("array_job") if isinstance(row.spec, dict) else None
        inputs = s.get(JobInputRow, first or job_id)
        if inputs is None or inputs.script is None:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"job {job_id} was not submitted as a batch script (it has no stored script)",
            )
        return Response(inputs.script.encode(), media_type="text/plain; charset=utf-8")


@router.get(
    "/v1/jobs/{job_id}/logs",
    tags=["jobs"],
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "a chunk of the log",
        },
        **error_answers(401, 403, 404),
    },
)
def logs(
    ctx: Ctx,
    job_id: JobId,
    user: User,
    attempt: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> Response:
    """A chunk of an attempt's log (the latest attempt by default).

    Headers: ``X-Attempt``, ``X-Next-Offset`` (ask again from there to
    follow) and ``X-Finished`` (1 once the attempt has ended).
    """
    with ctx.store.session() as s:
        row = owned(s, job_id, user)
        query = select(AttemptRow).where(AttemptRow.job_id == job_id)
        if attempt is not None:
            query = query.where(AttemptRow.number == attempt)
        att = s.scalars(query.order_by(AttemptRow.number.desc()).limit(1)).first()
        if att is None:
            if attempt is not None:
                raise HTTPException(
                    status.HTTP_404_NOT_FOUND, f"job {job_id} has no attempt {attempt}"
                )
            finished = row.status in TERMINAL
            return Response(
                b"",
                headers={
                    "X-Next-Offset": "0",
                    "X-Finished": str(int(finished)),
                    "X-Attempt": "0",
                },
            )
        path = Path(att.dir) / "log.txt"
        finished = att.end_time is not None
        number = att.number
    data = b""
    fd = open_regular(path)  # a regular file only, never through a link
    try:
        if fd is not None:
            with os.fdopen(fd, "rb") as handle:
                handle.seek(offset)
                data = handle.read(LOG_CHUNK)
    except OSError:
        pass
    headers = {
        "X-Attempt": str(number),
        "X-Next-Offset": str(offset + len(data)),
        "X-Finished": str(int(finished and len(data) < LOG_CHUNK)),
    }
    return Response(data, media_type="text/plain; charset=utf-8", headers=headers)


@router.post(
    "/v1/jobs/{job_id}/heartbeat",
    response_model=HeartbeatAnswer,
    tags=["jobs"],
    responses=error_answers(400, 401),
)
def heartbeat(ctx: Ctx, job_id: JobId, body: HeartbeatBody, request_: Request) -> HeartbeatAnswer:
    token = request_.headers.get("authorization", "").removeprefix("Bearer ").strip()
    now = ctx.store.clock()  # (the wall clock, or a test's virtual one)
    with ctx.store.session() as s:
        att = s.scalars(
            select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == body.attempt)
        ).first()
        if att is None or not hmac.compare_digest(att.token_sha256, hash_token(token)):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "not this attempt's token",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if att.end_time is None:
            row = job_or_404(s, job_id)
            row.steps = body.step
            row.throughput = body.throughput
            row.throughput_since = (
                None if body.throughput_age is None else now - body.throughput_age
            )
            row.loss = body.loss
            if row.spec.get("target_loss") is not None:
                row.loss_curve = extend_curve(row.loss_curve, body.step, body.loss)
            row.progress = extend_progress(row.progress, now, body.step, body.throughput, body.loss)
            if body.batch_size is not None:
                row.batch_size = body.batch_size
            if body.grad_noise_scale is not None:
                row.grad_noise_scale = body.grad_noise_scale
            if body.checkpoint_step is not None:
                row.checkpoint_step = body.checkpoint_step
            row.last_heartbeat = now
        # a parked attempt is not leaving: told to stop, a beat sent as it paused
        # would end it on its resumption, as a preemption the plan never made
        stop = (att.stop is not None and att.stop != PARK) or att.end_time is not None
        batch = cap = None
        if ctx.scheduler is not None:  # the loop's own answers; what it needs, posted to it
            answers = ctx.scheduler.answers
            batch = answers.batch_sizes.get(job_id)
            if not stop:
                if body.gpu_memory is not None:
                    ctx.scheduler.report_memory(job_id, body.gpu_memory)
                cap = answers.memory_caps.get(job_id)
        return HeartbeatAnswer(
            stop=stop,
            why=att.stop if stop else None,
            lease_until=now + ctx.config.heartbeat_timeout,
            batch_size=batch,
            memory_fraction=cap,
        )
