"""Routes about the service itself: health, the caller, the event history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import select

from corral.api.common import (
    AUTH,
    Ctx,
    User,
    service_version,
)
from corral.api.views import (
    MAX_ID,
    EventView,
    Health,
)
from corral.runtime.storage.store import EventRow

router = APIRouter()


@router.get("/v1/health", response_model=Health, tags=["service"])
def health(ctx: Ctx) -> Health:
    pool = getattr(ctx.scheduler.executor, "pool", None) if ctx.scheduler is not None else None
    return Health(
        status="ok",
        policy=ctx.config.policy,
        gpus=ctx.gpus_by_type,
        passes=ctx.scheduler.passes if ctx.scheduler is not None else 0,
        version=service_version(),
        standby_ready=pool.ready() if pool is not None else 0,
        gpu_confinement=(
            ctx.scheduler.executor.gpu_confinement() if ctx.scheduler is not None else None
        ),
    )


@router.get("/v1/whoami", tags=["service"], responses=AUTH)
def whoami(ctx: Ctx, user: User) -> dict[str, object]:
    return {"user": user.name, "admin": user.admin}


@router.get("/v1/events", response_model=list[EventView], tags=["service"], responses=AUTH)
def events(
    ctx: Ctx,
    user: User,
    job: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=100000)] = 1000,
) -> list[EventView]:
    with ctx.store.session() as s:
        query = select(EventRow).where(EventRow.id > after)
        if job is not None:
            query = query.where(EventRow.job_id == job)
        rows = s.scalars(query.order_by(EventRow.id).limit(limit))
        return [EventView.of(e) for e in rows]
