"""``corral serve``: the scheduler loop and the API in one process.

The loop runs in a thread beside uvicorn's event loop. Stopping the service
(Ctrl-C, SIGTERM) stops scheduling and the API but leaves running jobs
alone: a restarted service adopts them, as it does after a crash.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import uvicorn
from sqlalchemy.engine import make_url

from corral.api.app import create_app
from corral.runtime.config import ServiceConfig
from corral.runtime.executor import LocalExecutor
from corral.runtime.scheduler import Scheduler
from corral.runtime.store import Store


def build(config: ServiceConfig) -> tuple[Store, Scheduler]:
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.store_url)
    executor = LocalExecutor(config.gpus)
    return store, Scheduler(config, store, executor)


def serve(config: ServiceConfig, announce: Callable[[str], None] = print) -> None:
    store, scheduler = build(config)
    stop = threading.Event()
    scheduler.recover()  # before the API answers: nodes, adopted jobs and queue are known
    loop = threading.Thread(
        target=scheduler.run, args=(stop, False), name="corral-scheduler", daemon=True
    )
    app = create_app(config, store, scheduler)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=config.host, port=config.port, log_level="warning", access_log=False
        )
    )
    types = ", ".join(f"{n} {t}" for t, n in scheduler.cluster.gpus_by_type().items())
    announce(
        f"corral: serving {config.url} (policy {config.policy}; GPUs: {types}; "
        f"store {make_url(config.store_url).render_as_string(hide_password=True)})"
    )
    loop.start()
    try:
        server.run()
    finally:
        stop.set()
        scheduler.notify()
        loop.join(timeout=10)
        store.dispose()
