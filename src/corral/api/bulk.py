"""Acting on many jobs in one request, as ``scancel -u``, ``scancel ARRAYID`` and
``scontrol hold`` on a list do: every job a selection names (ids, an array's id
for all its tasks, single tasks, and filters by user, state, name and virtual
cluster) is asked in one transaction, and the loop woken once. The answer lists
the jobs asked; as with scancel, it does not wait for the loop to carry the
requests out (the requests are stored: a restart carries them out too).

Why one request: a user cancelling ten thousand jobs one call at a time waited
about a minute; a selection is one transaction and one pass. What a user may
touch is what they may touch one job at a time: their own jobs (an admin's,
anyone's); a job of another's named by id is reported as skipped, with why.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import or_, select, update

from corral.api.common import Ctx, User, error_answers
from corral.api.jobs import LIVE_STATES, hold_request, release_refusal
from corral.api.views import MAX_ID
from corral.model.jobs import JobStatus
from corral.model.status import parse_states
from corral.runtime.loop.loop_base import TERMINAL
from corral.runtime.loop.round_policy import plans_rounds
from corral.runtime.storage.store import JobRow, in_chunks

router = APIRouter()

MAX_SELECTED = 100_000
"""Ids or tasks one selection may name."""

JobIdField = Annotated[int, Field(ge=1, le=MAX_ID)]

ACTIONS: dict[str, tuple[str, set[JobStatus]]] = {
    "cancel": ("cancel", LIVE_STATES | {JobStatus.SUSPENDED}),
    "suspend": ("suspend", LIVE_STATES),
    "hold": ("hold", {JobStatus.PENDING}),
    "release": ("release", {JobStatus.PENDING, JobStatus.SUSPENDED}),
    "resume": ("resume", {JobStatus.SUSPENDED}),
    "requeue": ("requeue", {JobStatus.RUNNING}),
}
"""Verb -> the request the loop is given, and the states a job may be in for it (the
same as for one job by its own route)."""


class Selection(BaseModel):
    """Which jobs: those named (``ids``; an array's id names all its tasks), single
    tasks of arrays (``tasks``: [array id, index]), narrowed by the filters. At
    least one of them must be given: an empty selection is never "every job"."""

    model_config = ConfigDict(extra="forbid")
    ids: list[JobIdField] = Field(default_factory=list, max_length=MAX_SELECTED)
    tasks: list[tuple[JobIdField, Annotated[int, Field(ge=0, le=MAX_ID)]]] = Field(
        default_factory=list, max_length=MAX_SELECTED
    )
    user: str | None = Field(None, min_length=1, max_length=64)
    states: str | None = Field(None, max_length=200, description="e.g. PD,R (Slurm's or corral's)")
    name: str | None = Field(None, min_length=1, max_length=256)
    vc: str | None = Field(None, min_length=1, max_length=64)


class BulkAnswer(BaseModel):
    action: str
    done: list[int]
    """The jobs asked (in id order)."""
    skipped: dict[int, str]
    """Jobs named but not asked -> why (their state, or whose they are)."""


def _wanted(row: Any, sel: Selection, ids: set[int], tasks: set[tuple[int, int]]) -> bool:
    """Whether the selection's ids, array tasks, name and VC name the row (its spec is
    read, selected, only when they need it)."""
    stored = row.spec if (ids or tasks or sel.vc) else None
    spec: dict[str, Any] = stored if isinstance(stored, dict) else {}
    if ids or tasks:
        array = spec.get("array_job")
        named = row.id in ids or (array in ids if array is not None else False)
        named |= (array, spec.get("array_index")) in tasks
        if not named:
            return False
    if sel.name is not None and row.name != sel.name:
        return False
    return sel.vc is None or spec.get("vc") == sel.vc


@router.post(
    "/v1/jobs/actions/{action}",
    response_model=BulkAnswer,
    tags=["jobs"],
    responses=error_answers(400, 401, 403, 409),
)
def act_on_many(ctx: Ctx, action: str, sel: Selection, user: User) -> BulkAnswer:
    """Cancel, suspend, hold, release, resume or requeue every job the selection names,
    in one transaction; the answer lists the jobs asked and those skipped, with why."""
    if action not in ACTIONS:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no action '{action}' (there are {', '.join(ACTIONS)})"
        )
    if not (sel.ids or sel.tasks or sel.user or sel.states or sel.name or sel.vc):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "select jobs: give ids, array tasks, or a filter (user, states, name, vc)",
        )
    if sel.user is not None and sel.user != user.name and not user.admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"only admins act on {sel.user}'s jobs; you are {user.name}"
        )
    if action == "suspend" and plans_rounds(ctx.config.policy):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"under policy {ctx.config.policy} jobs run as rounds and are not suspended",
        )
    try:
        states = set(parse_states(sel.states)) if sel.states else None
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"states: {exc}") from None
    request, allowed = ACTIONS[action]
    ids, tasks = set(sel.ids), {(a, i) for a, i in sel.tasks}
    done: list[int] = []
    by_request: dict[str, list[int]] = {}  # the loop's request -> the jobs asked it
    skipped: dict[int, str] = {}
    with ctx.store.session() as s:
        # the columns a selection reads, not whole rows: ten thousand jobs in a second
        columns = [JobRow.id, JobRow.user, JobRow.status, JobRow.name, JobRow.held]
        if ids or tasks or sel.vc:
            columns.append(JobRow.spec)
        query = select(*columns).where(JobRow.status.not_in(TERMINAL)).order_by(JobRow.id)
        owner = sel.user if sel.user is not None else (None if user.admin else user.name)
        if owner is not None and not ids:  # (others' jobs named by id are reported)
            query = query.where(JobRow.user == owner)
        rows = s.execute(query).all()
        picky = bool(ids or tasks or sel.name is not None or sel.vc is not None)
        for row in rows:
            if picky and not _wanted(row, sel, ids, tasks):
                continue
            if states is not None and row.status not in states:
                continue
            if owner is not None and row.user != owner:
                if row.id in ids:  # named by id: say why it was left alone
                    skipped[row.id] = f"belongs to {row.user}"
                continue
            if row.status not in allowed:
                skipped[row.id] = f"{row.status}; cannot {action}"
                continue
            if action == "release" and (why := release_refusal(row.status, row.held, user)):
                skipped[row.id] = why
                continue
            done.append(row.id)
            asked = hold_request(user, row.user) if action == "hold" else request
            by_request.setdefault(asked, []).append(row.id)
        for asked, jobs in by_request.items():
            for chunk in in_chunks(jobs):
                s.execute(
                    update(JobRow)
                    .where(JobRow.id.in_(chunk))
                    .where(or_(JobRow.request.is_(None), JobRow.request != "cancel"))
                    .values(request=asked)  # (a cancel is never overridden)
                )
        ctx.store.events(s, "requested", done, action=request, by=user.name)
        found = {row.id for row in rows}
        for job in sorted(ids - found - set(done) - set(skipped)):
            ended = s.get(JobRow, job)
            skipped[job] = f"{ended.status}; it has ended" if ended is not None else "no such job"
    if done and ctx.scheduler is not None:
        ctx.scheduler.notify()  # (no wait for the pass, as scancel returns at once)
    return BulkAnswer(action=action, done=done, skipped=skipped)
