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
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import OperationalError

from corral.api import bulk, cluster, dashboard, jobs, metrics, service_info, terminal
from corral.api.auth_guard import TRUST_FILE, AuthGuard
from corral.api.common import Context, service_version
from corral.api.guards import BodyLimit, refused_error, store_error_handler, validation_error
from corral.runtime.jobspec.config import ServiceConfig
from corral.runtime.loop.admission import Refused
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import Store


def create_app(config: ServiceConfig, store: Store, scheduler: Scheduler | None = None) -> FastAPI:
    """The API over ``store``; ``scheduler`` (when running) is woken by every change."""
    app = FastAPI(
        title="corral",
        version=service_version(),
        description="GPU cluster scheduler for deep-learning training jobs.",
        docs_url=None,  # served below from the package's own copy of Swagger UI
        redoc_url=None,
    )
    app.state.users = {u.digest: u for u in config.users}
    app.state.auth_guard = AuthGuard(
        config.auth.failures,
        config.auth.window,
        config.auth.backoff_max,
        trust_file=config.state_dir / TRUST_FILE if config.state_dir.is_dir() else None,
    )
    app.state.context = Context(config, store, scheduler)
    app.state.metrics = metrics.ApiMetrics(app.state.context)
    app.add_middleware(metrics.CountRequests, metrics=app.state.metrics)
    app.add_middleware(BodyLimit)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Refused, refused_error)
    app.add_exception_handler(OperationalError, store_error_handler(config.store_url))
    for routes in (
        service_info.router,
        bulk.router,  # before jobs': /v1/jobs/actions/... is not a job's id
        jobs.router,
        cluster.router,
        dashboard.router,
        metrics.router,
        terminal.router,
    ):
        app.include_router(routes)
    app.mount("/ui", StaticFiles(directory=dashboard.UI), name="ui")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        """The API's interactive docs, from assets the package ships (the page works
        offline: nothing is fetched from a CDN, no validator badge is asked for)."""
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title="corral API",
            swagger_js_url=f"{SWAGGER}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER}/swagger-ui.css",
            swagger_favicon_url=f"{SWAGGER}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    return app


SWAGGER = "/ui/swagger"
"""Where the shipped Swagger UI (swagger-ui-dist 5.35.0, Apache-2.0, its LICENSE beside
it) is served."""
