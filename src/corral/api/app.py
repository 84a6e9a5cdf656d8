"""The REST API (FastAPI; OpenAPI schema at ``/openapi.json``, docs at ``/docs``).

Callers authenticate with ``Authorization: Bearer <token>``; tokens map to
users in the service config. Anyone authenticated may list the queue and
read a job's state (as ``squeue`` shows every job); only the owner or an
admin may cancel, suspend, resume, reprioritise or read a job's logs.
Running jobs authenticate their heartbeats with their attempt's own token.

The API never changes a running job itself: it records a request in the
store and wakes the scheduler loop, then waits briefly for the loop's next
pass so the answer shows the effect. A request survives a crash of the
service (it is in the store) and is carried out after the restart.
"""

from __future__ import annotations

import hmac
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response, status
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from corral.api.guards import BodyLimit, validation_error
from corral.api.views import (
    LOG_CHUNK,
    MAX_ID,
    AttemptView,
    ErrorView,
    EventView,
    Health,
    HeartbeatAnswer,
    HeartbeatBody,
    HistoryView,
    JobDetail,
    JobView,
    NodeStateBody,
    NodeView,
    PriorityBody,
)
from corral.model.jobs import JobStatus
from corral.runtime.config import ServiceConfig, UserConfig, hash_token
from corral.runtime.scheduler import TERMINAL, Scheduler
from corral.runtime.specs import JobSpec, array_indices
from corral.runtime.store import AttemptRow, EventRow, JobRow, NodeRow, Store

_bearer = HTTPBearer(auto_error=False)


def _version() -> str:
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
    """The user a bearer token belongs to; 401 for a missing or unknown token."""
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    digest = hash_token(credentials.credentials)
    for known, user in request.app.state.users.items():
        if hmac.compare_digest(known, digest):
            return user
    raise HTTPException(
        status.HTTP_401_UNAUTHORIZED, "invalid token", headers={"WWW-Authenticate": "Bearer"}
    )


User = Annotated[UserConfig, Depends(caller)]

JobId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="job id")]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers a route gives (all carry ``detail``)."""
    meaning = {
        400: "the body is not valid JSON",
        401: "missing or unknown token",
        403: "not the caller's job, or an admin's action",
        404: "no such job or node",
        409: "not possible in the job's or node's state",
        413: "the request body is too large",
        429: "the caller has too many jobs not yet ended",
    }
    return {code: {"model": ErrorView, "description": meaning[code]} for code in codes}


AUTH = _errors(401)
ON_JOB = _errors(401, 403, 404, 409)
WITH_BODY = _errors(400, 401, 403, 404, 409)


def create_app(config: ServiceConfig, store: Store, scheduler: Scheduler | None = None) -> FastAPI:
    """The API over ``store``; ``scheduler`` (when running) is woken by every change."""
    app = FastAPI(
        title="corral",
        version=_version(),
        description="GPU cluster scheduler for deep-learning training jobs.",
    )
    app.state.users = {u.digest: u for u in config.users}
    app.add_middleware(BodyLimit)
    app.add_exception_handler(RequestValidationError, validation_error)
    gpus_by_type: dict[str, int] = {}
    if scheduler is not None:
        gpus_by_type = scheduler.cluster.gpus_by_type()

    def job_or_404(s: Session, job_id: int) -> JobRow:
        row = s.get(JobRow, job_id)
        if row is None:
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

    def positions(s: Session) -> dict[int, int]:
        waiting = s.execute(
            select(JobRow.id, JobRow.priority).where(JobRow.status == JobStatus.PENDING)
        ).all()
        ranked = sorted(waiting, key=lambda r: (-r.priority, r.id))
        return {r.id: k + 1 for k, r in enumerate(ranked)}

    def request(job_id: int, user: UserConfig, action: str, allowed: set[str]) -> JobView:
        before = scheduler.passes if scheduler is not None else 0
        with store.session() as s:
            row = owned(s, job_id, user)
            if row.status not in allowed:
                raise HTTPException(
                    status.HTTP_409_CONFLICT, f"job {job_id} is {row.status}; cannot {action}"
                )
            if row.request != "cancel":  # a cancel is never overridden
                row.request = action
            store.event(s, "requested", job_id, action=action, by=user.name)
        if scheduler is not None:
            scheduler.notify()
            scheduler.wait_passes(before)
        with store.session() as s:
            return JobView.of(job_or_404(s, job_id))

    @app.get("/v1/health", response_model=Health, tags=["service"])
    def health() -> Health:
        return Health(
            status="ok",
            policy=config.policy,
            gpus=gpus_by_type,
            passes=scheduler.passes if scheduler is not None else 0,
            version=_version(),
        )

    @app.get("/v1/whoami", tags=["service"], responses=AUTH)
    def whoami(user: User) -> dict[str, object]:
        return {"user": user.name, "admin": user.admin}

    def check_priority(priority: int, user: UserConfig) -> None:
        """Raising priority is the operators' lever (as in Slurm): users may only lower it."""
        if priority > config.max_user_priority and not user.admin:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"priority {priority} is above {config.max_user_priority}, the most a user "
                "may set; ask an admin",
            )

    @app.post(
        "/v1/jobs",
        response_model=JobView,
        status_code=201,
        tags=["jobs"],
        responses=_errors(400, 401, 403, 413, 429),
    )
    def submit(spec: JobSpec, user: User) -> JobView:
        check_priority(spec.priority, user)
        if gpus_by_type:
            if spec.gpu_type is not None and spec.gpu_type not in gpus_by_type:
                have = ", ".join(gpus_by_type)
                raise field_error("gpu_type", f"no {spec.gpu_type} GPUs here (there are {have})")
            limit = gpus_by_type[spec.gpu_type] if spec.gpu_type else sum(gpus_by_type.values())
            if spec.gpus > limit:
                kind = f"{spec.gpu_type} " if spec.gpu_type else ""
                raise field_error(
                    "gpus", f"asks for {spec.gpus} GPUs; the cluster has {limit} {kind}GPUs"
                )
        if config.vcs is not None and spec.vc is not None and spec.vc not in config.vcs:
            have = ", ".join(config.vcs)
            raise field_error("vc", f"no virtual cluster '{spec.vc}' here (there are {have})")
        if spec.workdir is not None:
            where = Path(spec.workdir).resolve()
            if not where.is_dir():
                raise field_error(
                    "workdir", f"{spec.workdir} is not a directory on the service's host"
                )
            if where.is_relative_to(config.state_dir.resolve()):
                raise field_error("workdir", "jobs may not run inside the service's state_dir")
        if spec.array_index is not None or spec.array_job is not None:
            field = "array_index" if spec.array_index is not None else "array_job"
            raise field_error(field, "set by corral for the tasks of an array; give 'array'")
        if spec.output is not None and Path(spec.output).resolve().is_relative_to(
            config.state_dir.resolve()
        ):
            raise field_error("output", "a job's output may not go inside the state_dir")
        indices = array_indices(spec.array) if spec.array else [None]
        prerun = spec.prerun_steps
        if prerun is None:
            rule = config.prerun
            prerun = rule.steps if rule.min_gpus and spec.gpus >= rule.min_gpus else 0
        with store.session() as s:
            queued = s.scalar(
                select(func.count()).where(JobRow.user == user.name, JobRow.status.not_in(TERMINAL))
            )
            if (queued or 0) + len(indices) > config.max_jobs_per_user:
                raise HTTPException(
                    status.HTTP_429_TOO_MANY_REQUESTS,
                    f"{user.name} has {queued} jobs not yet ended; {len(indices)} more would "
                    f"pass {config.max_jobs_per_user}, the most allowed (max_jobs_per_user)",
                )
            wanted = sorted({i for group in spec.dependency.values() for i in group})
            if wanted:
                known = set(s.scalars(select(JobRow.id).where(JobRow.id.in_(wanted))))
                missing = [i for i in wanted if i not in known]
                if missing:
                    raise field_error("dependency", f"no job {missing[0]}")
            rows: list[JobRow] = []
            for index in indices:
                task = spec.model_copy(update={"array": None, "array_index": index})
                row = JobRow(
                    name=spec.name,
                    user=user.name,
                    spec=task.model_dump(mode="json"),
                    status=JobStatus.PENDING,
                    reason="Submitted",
                    priority=spec.priority,
                    submit_time=time.time(),
                    phase="prerun" if prerun else "main",
                )
                s.add(row)
                s.flush()
                rows.append(row)
            if spec.array:
                for row in rows:
                    row.spec = {**row.spec, "array_job": rows[0].id}
            for row in rows:
                store.event(s, "submitted", row.id, by=user.name, gpus=spec.gpus)
            view = JobView.of(rows[0])
            if spec.array:
                view.array_tasks = [r.id for r in rows]
        if scheduler is not None:
            scheduler.notify()
        return view

    @app.get("/v1/jobs", response_model=list[JobView], tags=["jobs"], responses=AUTH)
    def queue(
        user: User,
        state: Annotated[
            str | None,
            Query(max_length=200, description="comma-separated states, or 'all' (default: live)"),
        ] = None,
        mine: bool = False,
        limit: Annotated[int, Query(ge=1, le=100000)] = 1000,
    ) -> list[JobView]:
        with store.session() as s:
            query = select(JobRow).order_by(JobRow.id.desc()).limit(limit)
            if state and state.strip().lower() == "all":
                pass
            elif state:
                wanted = [x.strip().upper() for x in state.split(",") if x.strip()]
                unknown = [x for x in wanted if x not in JobStatus.__members__]
                if unknown:
                    raise HTTPException(
                        status.HTTP_422_UNPROCESSABLE_CONTENT,
                        detail=[
                            {
                                "loc": ["query", "state"],
                                "msg": f"unknown state {unknown[0]}",
                                "type": "value_error",
                            }
                        ],
                    )
                query = query.where(JobRow.status.in_(wanted))
            else:
                query = query.where(JobRow.status.not_in(TERMINAL))
            if mine:
                query = query.where(JobRow.user == user.name)
            rows = list(s.scalars(query))
            where = positions(s)
            return [JobView.of(r, where.get(r.id)) for r in reversed(rows)]

    @app.get("/v1/history", response_model=list[HistoryView], tags=["jobs"], responses=AUTH)
    def history(
        user: User,
        of: Annotated[
            str | None, Query(max_length=64, description="this user's jobs (default: yours)")
        ] = None,
        all_users: bool = False,
        since: Annotated[
            float, Query(ge=0, le=1e12, description="submitted at or after (Unix time)")
        ] = 0.0,
        limit: Annotated[int, Query(ge=1, le=100000)] = 1000,
    ) -> list[HistoryView]:
        """Accounting: every job's wait, run time and GPU-hours (Slurm's sacct)."""
        now = time.time()
        with store.session() as s:
            query = select(JobRow).where(JobRow.submit_time >= since)
            if not all_users:
                query = query.where(JobRow.user == (of or user.name))
            rows = list(s.scalars(query.order_by(JobRow.id.desc()).limit(limit)))
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
            return out

    @app.get(
        "/v1/jobs/{job_id}", response_model=JobDetail, tags=["jobs"], responses=_errors(401, 404)
    )
    def show(job_id: JobId, user: User) -> JobDetail:
        with store.session() as s:
            row = job_or_404(s, job_id)
            attempts = s.scalars(
                select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)
            )
            events = s.scalars(
                select(EventRow).where(EventRow.job_id == job_id).order_by(EventRow.id)
            )
            base = JobView.of(row, positions(s).get(job_id))
            spec = dict(row.spec)
            if row.user != user.name and not user.admin and spec.get("env"):
                spec["env"] = {key: "(hidden)" for key in spec["env"]}
            return JobDetail(
                **base.model_dump(),
                spec=spec,
                attempts=[AttemptView.of(a) for a in attempts],
                events=[EventView.of(e) for e in events],
            )

    live_states = {JobStatus.PENDING, JobStatus.STARTING, JobStatus.RUNNING}

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobView, tags=["jobs"], responses=ON_JOB)
    def cancel(job_id: JobId, user: User) -> JobView:
        return request(job_id, user, "cancel", live_states | {JobStatus.SUSPENDED})

    @app.post("/v1/jobs/{job_id}/suspend", response_model=JobView, tags=["jobs"], responses=ON_JOB)
    def suspend(job_id: JobId, user: User) -> JobView:
        return request(job_id, user, "suspend", live_states)

    @app.post("/v1/jobs/{job_id}/resume", response_model=JobView, tags=["jobs"], responses=ON_JOB)
    def resume(job_id: JobId, user: User) -> JobView:
        return request(job_id, user, "resume", {JobStatus.SUSPENDED, JobStatus.RUNNING})

    @app.put(
        "/v1/jobs/{job_id}/priority", response_model=JobView, tags=["jobs"], responses=WITH_BODY
    )
    def set_priority(job_id: JobId, body: PriorityBody, user: User) -> JobView:
        with store.session() as s:
            row = owned(s, job_id, user)
            check_priority(body.priority, user)
            if row.status in TERMINAL:
                raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} is {row.status}")
            row.priority = body.priority
        return request(job_id, user, "priority", live_states | {JobStatus.SUSPENDED})

    @app.get(
        "/v1/jobs/{job_id}/logs",
        tags=["jobs"],
        responses={
            200: {
                "content": {"text/plain": {"schema": {"type": "string"}}},
                "description": "a chunk of the log",
            },
            **_errors(401, 403, 404),
        },
    )
    def logs(
        job_id: JobId,
        user: User,
        attempt: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    ) -> Response:
        """A chunk of an attempt's log (the latest attempt by default).

        Headers: ``X-Attempt``, ``X-Next-Offset`` (ask again from there to
        follow) and ``X-Finished`` (1 once the attempt has ended).
        """
        with store.session() as s:
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
        try:
            with open(path, "rb") as handle:
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

    def jobs_by_node() -> dict[str, list[int]]:
        by_node: dict[str, list[int]] = {}
        if scheduler is not None:
            for gpu, job in scheduler.gpu_use().items():
                by_node.setdefault(scheduler.node_of(gpu), []).append(job)
        return by_node

    @app.get("/v1/nodes", response_model=list[NodeView], tags=["cluster"], responses=AUTH)
    def nodes(user: User) -> list[NodeView]:
        by_node = jobs_by_node()
        with store.session() as s:
            rows = list(s.scalars(select(NodeRow).order_by(NodeRow.name)))
            return [NodeView.of(r, by_node.get(r.name, [])) for r in rows]

    def set_node_state(name: str, user: UserConfig, state: str, reason: str | None) -> NodeView:
        if not user.admin:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, "only an admin may drain or resume nodes"
            )
        before = scheduler.passes if scheduler is not None else 0
        with store.session() as s:
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
            store.event(s, kind, None, node=name, by=user.name, reason=reason)
        if scheduler is not None:
            scheduler.nodes_changed()
            scheduler.wait_passes(before)
        with store.session() as s:
            return NodeView.of(s.get(NodeRow, name), jobs_by_node().get(name, []))

    @app.post(
        "/v1/nodes/{name}/drain", response_model=NodeView, tags=["cluster"], responses=WITH_BODY
    )
    def drain(name: str, user: User, body: NodeStateBody | None = None) -> NodeView:
        """Admin: start nothing more on the node; what runs there runs to its end."""
        return set_node_state(name, user, "drained", body.reason if body else None)

    @app.post(
        "/v1/nodes/{name}/resume", response_model=NodeView, tags=["cluster"], responses=WITH_BODY
    )
    def resume_node(name: str, user: User, body: NodeStateBody | None = None) -> NodeView:
        """Admin: put a drained node back in service and reset its failure count."""
        return set_node_state(name, user, "up", body.reason if body else None)

    @app.get("/v1/events", response_model=list[EventView], tags=["service"], responses=AUTH)
    def events(
        user: User,
        job: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
        limit: Annotated[int, Query(ge=1, le=100000)] = 1000,
    ) -> list[EventView]:
        with store.session() as s:
            query = select(EventRow).where(EventRow.id > after)
            if job is not None:
                query = query.where(EventRow.job_id == job)
            rows = s.scalars(query.order_by(EventRow.id).limit(limit))
            return [EventView.of(e) for e in rows]

    @app.post(
        "/v1/jobs/{job_id}/heartbeat",
        response_model=HeartbeatAnswer,
        tags=["jobs"],
        responses=_errors(400, 401),
    )
    def heartbeat(job_id: JobId, body: HeartbeatBody, request_: Request) -> HeartbeatAnswer:
        token = request_.headers.get("authorization", "").removeprefix("Bearer ").strip()
        now = time.time()
        with store.session() as s:
            att = s.scalars(
                select(AttemptRow).where(
                    AttemptRow.job_id == job_id, AttemptRow.number == body.attempt
                )
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
                row.loss = body.loss
                if body.checkpoint_step is not None:
                    row.checkpoint_step = body.checkpoint_step
                row.last_heartbeat = now
            stop = att.stop is not None or att.end_time is not None
            return HeartbeatAnswer(
                stop=stop, why=att.stop, lease_until=now + config.heartbeat_timeout
            )

    return app
