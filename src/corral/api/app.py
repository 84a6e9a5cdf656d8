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

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles

from corral.api import cluster, dashboard, jobs, service_info
from corral.api.common import Context, service_version
from corral.api.guards import BodyLimit, validation_error
from corral.runtime.jobspec.config import ServiceConfig
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import Store


def create_app(config: ServiceConfig, store: Store, scheduler: Scheduler | None = None) -> FastAPI:
    """The API over ``store``; ``scheduler`` (when running) is woken by every change."""
    app = FastAPI(
        title="corral",
        version=service_version(),
        description="GPU cluster scheduler for deep-learning training jobs.",
    )
    app.state.users = {u.digest: u for u in config.users}
    app.state.context = Context(config, store, scheduler)
    app.add_middleware(BodyLimit)
    app.add_exception_handler(RequestValidationError, validation_error)
    for routes in (service_info.router, jobs.router, cluster.router, dashboard.router):
        app.include_router(routes)
    app.mount("/ui", StaticFiles(directory=dashboard.UI), name="ui")
    return app
