"""Routes on the cluster: nodes, and admins draining and resuming them."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select

from corral.api.common import (
    AUTH,
    WITH_BODY,
    Context,
    Ctx,
    User,
)
from corral.api.views import (
    NodeStateBody,
    NodeView,
)
from corral.runtime.config import UserConfig
from corral.runtime.store import NodeRow

router = APIRouter()


def jobs_by_node(ctx: Context) -> dict[str, list[int]]:
    by_node: dict[str, list[int]] = {}
    if ctx.scheduler is not None:
        for gpu, job in ctx.scheduler.gpu_use().items():
            by_node.setdefault(ctx.scheduler.node_of(gpu), []).append(job)
    return by_node


@router.get("/v1/nodes", response_model=list[NodeView], tags=["cluster"], responses=AUTH)
def nodes(ctx: Ctx, user: User) -> list[NodeView]:
    by_node = jobs_by_node(ctx)
    use = ctx.scheduler.gpu_use() if ctx.scheduler is not None else {}
    ids: dict[str, list[int]] = {}
    if ctx.scheduler is not None:
        for slot in ctx.scheduler.slots:
            ids.setdefault(slot.node, []).append(slot.id)
    with ctx.store.session() as s:
        rows = list(s.scalars(select(NodeRow).order_by(NodeRow.name)))
        return [NodeView.of(r, by_node.get(r.name, []), use, ids.get(r.name)) for r in rows]


def set_node_state(
    ctx: Context, name: str, user: UserConfig, state: str, reason: str | None
) -> NodeView:
    if not user.admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only an admin may drain or resume nodes")
    before = ctx.scheduler.passes if ctx.scheduler is not None else 0
    with ctx.store.session() as s:
        row = s.get(NodeRow, name)
        if row is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no node {name}")
        if row.state == "gone":
            raise HTTPException(
                status.HTTP_409_CONFLICT, f"node {name} is no longer in the configuration"
            )
        row.state = state
        if state == "up":
            row.failures = 0
        kind = "node_drained" if state == "drained" else "node_resumed"
        ctx.store.event(s, kind, None, node=name, by=user.name, reason=reason)
    if ctx.scheduler is not None:
        ctx.scheduler.nodes_changed()
        ctx.scheduler.wait_passes(before)
    with ctx.store.session() as s:
        return NodeView.of(
            s.get(NodeRow, name),
            jobs_by_node(
                ctx,
            ).get(name, []),
        )


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
