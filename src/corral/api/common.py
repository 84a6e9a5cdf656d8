"""What every route shares: the service's parts (config, store, scheduler) as a
dependency, the caller's identity, and the lookups and errors routes repeat."""

from __future__ import annotations

import hmac
import os
import pwd
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from corral.api.auth_guard import AuthGuard
from corral.api.connections import PEER_PREFIX
from corral.api.views import MAX_ID, ErrorView, StoredSpecs
from corral.model.jobs import JobStatus
from corral.runtime.jobspec.config import ServiceConfig, UserConfig, hash_token
from corral.runtime.loop.admission import Admission
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import ArchivedJobRow, AttemptRow, JobRow, Store


@dataclass
class Context:
    """The parts of the service the routes work on (one per app)."""

    config: ServiceConfig
    store: Store
    scheduler: Scheduler | None = None
    specs: StoredSpecs = field(default_factory=StoredSpecs)
    """Listed jobs' spec scalars, read once (:class:`~corral.api.views.StoredSpecs`)."""

    @property
    def admission(self) -> Admission:
        """The runtime's admission rules over this service (the loop reads what they store)."""
        identities = self.scheduler.identities if self.scheduler is not None else {}
        return Admission(
            self.config, self.store, lambda: self.gpus_by_type, identities, self.node_gpus
        )

    def node_gpus(self) -> list[tuple[str, int]]:
        """Each node's GPU type and count, now."""
        if self.scheduler is None:
            return []
        return [(node.gpu_type, node.gpus) for node in self.scheduler.cluster.nodes]

    @property
    def gpus_by_type(self) -> dict[str, int]:
        """The cluster's GPUs by type, now (an executor's cluster may grow)."""
        return self.scheduler.cluster.gpus_by_type() if self.scheduler is not None else {}


def context(request: Request) -> Context:
    out: Context = request.app.state.context
    return out


Ctx = Annotated[Context, Depends(context)]

_bearer = HTTPBearer(auto_error=False)


def service_version() -> str:
    try:
        return version("corral")
    except PackageNotFoundError:
        return "unknown"


def field_error(field: str, message: str) -> HTTPException:
    """A 422 shaped like pydantic's, so clients read every validation error one way."""
    return HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT,
        detail=[{"loc": ["body", field], "msg": message, "type": "value_error"}],
    )


def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> UserConfig:
    """The user a bearer token belongs to; 401 for a missing or unknown token. On the
    Unix socket the kernel says who calls: the user of that uid, with no token and no
    lock-out (:func:`local_user`)."""
    host = request.client.host if request.client is not None else ""
    if host.startswith(PEER_PREFIX):
        return local_user(request, int(host[len(PEER_PREFIX) :]))
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    digest = hash_token(credentials.credentials)
    guard: AuthGuard = request.app.state.auth_guard
    address = request.client.host if request.client is not None else "unknown"
    wait = guard.wait(address, digest)
    if wait > 0:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"too many failed tokens from {address}: try again in {wait:.0f}s",
            headers={"Retry-After": str(max(1, round(wait)))},
        )
    for known, user in request.app.state.users.items():
        if hmac.compare_digest(known, digest):
            guard.succeeded(address, digest)
            out: UserConfig = user
            return out
    job = request.path_params.get("job_id")
    owner = job_token_owner(request, job, digest) if job is not None else None
    if owner is not None:
        guard.succeeded(address, digest)
        return owner
    guard.failed(address)
    raise HTTPException(
        status.HTTP_401_UNAUTHORIZED, "invalid token", headers={"WWW-Authenticate": "Bearer"}
    )


def job_token_owner(request: Request, job: Any, digest: str) -> UserConfig | None:
    """The owner of job ``job``, when ``digest`` is its running attempt's token's (the
    ``CORRAL_JOB_TOKEN`` the job was given): a job acts on itself as its owner (the
    ``scontrol requeue $SLURM_JOB_ID`` of a checkpointing script), and on no other
    job, and only while that attempt runs."""
    try:
        job_id = int(job)
    except (TypeError, ValueError):
        return None
    ctx: Context = request.app.state.context
    with ctx.store.session() as s:
        owner = s.scalar(
            select(JobRow.user)
            .join(AttemptRow, AttemptRow.job_id == JobRow.id)
            .where(
                JobRow.id == job_id,
                AttemptRow.end_time.is_(None),
                AttemptRow.token_sha256 == digest,
            )
        )
    users: list[UserConfig] = list(request.app.state.users.values())
    return next((u for u in users if u.name == owner), None) if owner else None


def local_user(request: Request, uid: int) -> UserConfig:
    """The user a caller on the Unix socket is: the one whose ``unix_user`` has that
    uid; root, or the service's own uid, is the first admin. 401 for anyone else."""
    users: list[UserConfig] = list(request.app.state.users.values())
    if uid in (0, os.geteuid()):
        admin = next((u for u in users if u.admin), None)
        if admin is not None:
            return admin
    for user in users:
        if user.unix_user is not None:
            try:
                if pwd.getpwnam(user.unix_user.rstrip("$")).pw_uid == uid:
                    return user
            except KeyError:
                continue
    raise HTTPException(
        status.HTTP_401_UNAUTHORIZED,
        f"uid {uid} is no user of this service (give them a unix_user in its config, or "
        "call with a token over TCP)",
    )


User = Annotated[UserConfig, Depends(caller)]

JobId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="job id")]


def error_answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers a route gives (all carry ``detail``)."""
    meaning = {
        400: "the body is not valid JSON",
        401: "missing or unknown token",
        403: "not the caller's job, or an admin's action",
        404: "no such job or node",
        409: "not possible in the job's or node's state",
        413: "the request body is too large",
        429: "the caller has too many jobs not yet ended, or its address sent too many "
        "wrong tokens (Retry-After says when to try again)",
    }
    return {code: {"model": ErrorView, "description": meaning[code]} for code in codes}


AUTH = error_answers(401)
ON_JOB = error_answers(401, 403, 404, 409)
WITH_BODY = error_answers(400, 401, 403, 404, 409)


def job_or_404(s: Session, job_id: int) -> JobRow:
    row = s.get(JobRow, job_id)
    if row is None:
        old = s.get(ArchivedJobRow, job_id)
        if old is not None:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"job {job_id} ended {old.status} long ago and was archived (archive_after): "
                "'corral history' shows its accounting; its attempts and events are not kept",
            )
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return row


def owned(s: Session, job_id: int, user: UserConfig) -> JobRow:
    row = job_or_404(s, job_id)
    if row.user != user.name and not user.admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"job {job_id} belongs to {row.user}; you are {user.name}",
        )
    return row


def gpus_held(running: Iterable[tuple[str | None, str, Any]]) -> dict[tuple[str, str], int]:
    """GPUs held per (virtual cluster, user), from running jobs' (vc, user, assigned
    GPUs) rows; a job with no VC counts under "default" (``/metrics`` and
    ``/v1/usage`` read the same figure)."""
    held: dict[tuple[str, str], int] = {}
    for vc, user, gpus in running:
        key = (vc or "default", user)
        held[key] = held.get(key, 0) + (len(gpus) if isinstance(gpus, list) else 0)
    return held


def positions(s: Session, ids: Iterable[int] | None = None) -> dict[int, int]:
    """Waiting jobs' places in the queue (1 first: the highest priority, then the
    oldest), for ``ids`` only where given (a page of a listing). Ranked by the
    database over every waiting job, returned for the few asked about: a listing's
    page of 100 costs a fraction of ranking thousands in Python. Many ids are
    looked up in what the database ranked rather than sent to it as a list (ten
    thousand bound values cost more than the ranking)."""
    place = func.row_number().over(order_by=(JobRow.priority.desc(), JobRow.id)).label("place")
    ranked = (
        select(JobRow.id, place)
        .where(JobRow.status == JobStatus.PENDING, JobRow.held.is_(None))
        .subquery()
    )
    query = select(ranked.c.id, ranked.c.place)
    if ids is None:
        return {int(job): int(k) for job, k in s.execute(query)}
    wanted = set(ids)
    if not wanted:
        return {}
    if len(wanted) <= MANY_IDS:
        query = query.where(ranked.c.id.in_(wanted))
    return {int(job): int(k) for job, k in s.execute(query) if job in wanted}


MANY_IDS = 500
"""Above this many ids, :func:`positions` filters the ranking itself."""
