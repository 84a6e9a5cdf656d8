"""Routes on the cluster: nodes, and admins draining and resuming them."""

from __future__ import annotations

import time
from typing import Annotated

import numpy as np
from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import func, or_, select

from corral.api.common import (
    AUTH,
    WITH_BODY,
    Context,
    Ctx,
    User,
    gpus_held,
)
from corral.api.views import (
    EventView,
    NodeStateBody,
    NodeView,
)
from corral.model.status import JobStatus
from corral.runtime.jobspec.config import UserConfig
from corral.runtime.loop.loop_base import NOT_ENDED
from corral.runtime.storage.store import AttemptRow, EventRow, JobRow, NodeRow

router = APIRouter()


def node_view(ctx: Context, row: NodeRow) -> NodeView:
    """What runs on a node now, GPU by GPU, from the scheduler's one account of it."""
    if ctx.scheduler is None:
        return NodeView.of(row, {}, [])
    ids = [slot.id for slot in ctx.scheduler.slots if slot.node == row.name]
    return NodeView.of(row, ctx.scheduler.answers.sharers, ids)  # (as of its last pass)


@router.get("/v1/nodes", response_model=list[NodeView], tags=["cluster"], responses=AUTH)
def nodes(ctx: Ctx, user: User) -> list[NodeView]:
    with ctx.store.session() as s:
        rows = list(s.scalars(select(NodeRow).order_by(NodeRow.name)))
        return [node_view(ctx, r) for r in rows]


LIVE_STATES = NOT_ENDED


@router.get("/v1/usage", tags=["cluster"], responses=AUTH)
def usage(ctx: Ctx, user: User) -> dict[str, object]:
    """Who uses the cluster now, over every live job (not a page of them): jobs by
    state and by reason, and per user and per virtual cluster the jobs running and
    waiting and the GPUs they hold. (Grouped counts in the store, tens of
    milliseconds at ten thousand jobs, kept until the store changes.)"""
    return ctx.store.cached(("usage",), lambda: _usage(ctx))


def _usage(ctx: Context) -> dict[str, object]:
    vc = func.coalesce(JobRow.spec["vc"].as_string(), "default")
    running = [JobStatus.STARTING.value, JobStatus.RUNNING.value]
    with ctx.store.session() as s:
        by_state = dict(
            s.execute(
                select(JobRow.status, func.count())
                .where(JobRow.status.in_(LIVE_STATES))
                .group_by(JobRow.status)
            ).all()
        )
        by_reason = dict(
            s.execute(
                select(func.coalesce(JobRow.reason, ""), func.count())
                .where(JobRow.status == JobStatus.PENDING.value)
                .group_by(func.coalesce(JobRow.reason, ""))
            ).all()
        )
        groups = s.execute(
            select(JobRow.user, vc, JobRow.status, func.count())
            .where(JobRow.status.in_(LIVE_STATES))
            .group_by(JobRow.user, vc, JobRow.status)
        ).all()
        held = gpus_held(
            s.execute(select(vc, JobRow.user, JobRow.gpus).where(JobRow.status.in_(running)))
        )
    per: dict[str, dict[str, dict[str, int]]] = {"user": {}, "vc": {}}
    for who, where, status_, count in groups:
        for kind, key in (("user", who), ("vc", where)):
            row = per[kind].setdefault(key, {"running": 0, "waiting": 0, "gpus": 0})
            if status_ in running:
                row["running"] += count
            elif status_ == JobStatus.PENDING.value:
                row["waiting"] += count
    for (where, who), n in held.items():
        per["user"].setdefault(who, {"running": 0, "waiting": 0, "gpus": 0})["gpus"] += n
        per["vc"].setdefault(where, {"running": 0, "waiting": 0, "gpus": 0})["gpus"] += n
    return {
        "by_state": {state: by_state.get(state, 0) for state in LIVE_STATES},
        "by_reason": dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
        "by_user": [{"user": k, **v} for k, v in sorted(per["user"].items())],
        "by_vc": [{"vc": k, **v} for k, v in sorted(per["vc"].items())],
        "total_gpus": sum(ctx.gpus_by_type.values()),
    }


@router.get("/v1/utilisation", tags=["cluster"], responses=AUTH)
def utilisation(
    ctx: Ctx,
    user: User,
    window: Annotated[float, Query(gt=0, le=7 * 86400)] = 3600.0,
    buckets: Annotated[int, Query(ge=1, le=1000)] = 60,
) -> dict[str, object]:
    """GPUs held by attempts over the last ``window`` seconds, averaged per bucket
    (a GPU two packed jobs share counts twice; the figure is capped at the cluster)."""
    now = time.time()
    edges = np.linspace(now - window, now, buckets + 1)
    with ctx.store.session() as s:
        rows = s.execute(
            select(AttemptRow.start_time, AttemptRow.end_time, AttemptRow.gpus).where(
                or_(AttemptRow.end_time.is_(None), AttemptRow.end_time > edges[0]),
                AttemptRow.start_time < now,
            )
        ).all()
    total = sum(ctx.gpus_by_type.values())
    busy = np.zeros(buckets)
    if rows:
        start = np.array([r[0] for r in rows])
        end = np.array([now if r[1] is None else r[1] for r in rows])
        gpus = np.array([len(r[2] or []) for r in rows], dtype=np.float64)
        lo, hi = edges[:-1], edges[1:]
        overlap = np.clip(np.minimum(end[:, None], hi) - np.maximum(start[:, None], lo), 0, None)
        busy = (gpus[:, None] * overlap).sum(axis=0) / (hi - lo)
    if total:
        busy = np.minimum(busy, total)
    return {
        "total_gpus": total,
        "times": [round(float(t), 3) for t in edges[1:]],
        "busy_gpus": [round(float(b), 3) for b in busy],
    }


def set_node_state(
    ctx: Context, name: str, user: UserConfig, state: str, reason: str | None
) -> NodeView:
    if not user.admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only an admin may drain or resume nodes")
    with ctx.store.session() as s:
        row = s.get(NodeRow, name)
        if row is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no node {name}")
        if row.state == "gone":
            raise HTTPException(
                status.HTTP_409_CONFLICT, f"node {name} is no longer in the configuration"
            )
        row.state = state
        row.reason = reason if state == "drained" else None
        if state == "up":
            row.failures = 0
        kind = "node_drained" if state == "drained" else "node_resumed"
        ctx.store.event(s, kind, None, node=name, by=user.name, reason=reason)
    if ctx.scheduler is not None:
        ctx.scheduler.nodes_changed()
        ctx.scheduler.after_a_pass()
    with ctx.store.session() as s:
        return node_view(ctx, s.get_one(NodeRow, name))


@router.get("/v1/nodes/{name}/history", response_model=list[EventView], tags=["cluster"],
            responses=AUTH)  # fmt: skip
def node_history(
    ctx: Ctx,
    name: str,
    user: User,
    limit: Annotated[int, Query(ge=1, le=10000)] = 200,
) -> list[EventView]:
    """The node's state changes, newest last: drained and resumed (by whom, why),
    down and up, GPUs failed, joined."""
    with ctx.store.session() as s:
        if s.get(NodeRow, name) is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no node {name}")
        rows = s.scalars(
            select(EventRow)
            .where(EventRow.kind.in_(NODE_EVENTS))
            .where(EventRow.detail["node"].as_string() == name)
            .order_by(EventRow.id.desc())
            .limit(limit)
        ).all()
        return [EventView.of(e) for e in reversed(rows)]


NODE_EVENTS = ("node_drained", "node_resumed", "node_down", "node_up", "node_joined", "gpu_failed")
"""The events that change, or say why, a node's state."""


@router.post(
    "/v1/nodes/{name}/drain", response_model=NodeView, tags=["cluster"], responses=WITH_BODY
)
def drain(ctx: Ctx, name: str, user: User, body: NodeStateBody | None = None) -> NodeView:
    """Admin: start nothing more on the node; what runs there runs to its end."""
    return set_node_state(ctx, name, user, "drained", body.reason if body else None)


@router.post(
    "/v1/nodes/{name}/resume", response_model=NodeView, tags=["cluster"], responses=WITH_BODY
)
def resume_node(ctx: Ctx, name: str, user: User, body: NodeStateBody | None = None) -> NodeView:
    """Admin: put a drained node back in service and reset its failure count."""
    return set_node_state(ctx, name, user, "up", body.reason if body else None)
