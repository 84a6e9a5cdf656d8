"""``corral serve``: the scheduler loop and the API in one process.

This module wires the layers together (store, executor, scheduler, API), so
it sits above them all: nothing in ``runtime`` imports the API.

The loop runs in a thread beside uvicorn's event loop. Stopping the service
(Ctrl-C, SIGTERM) stops scheduling and the API but leaves running jobs
alone: a restarted service adopts them, as it does after a crash.

Start-up is ordered so that a service which cannot run changes nothing: it
takes the store's lock (one scheduler per store), then binds its port, and
only then opens the store and adopts running jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvicorn
from sqlalchemy.engine import make_url

from corral.api.app import create_app
from corral.api.connections import (
    ACCEPT_BATCH,
    ConnectionLimits,
    QuietErrors,
    guarded_protocol,
    raise_open_files_limit,
    unix_listener,
)
from corral.errors import CorralError
from corral.runtime import systemd
from corral.runtime.execution.executor import Executor, LocalExecutor
from corral.runtime.execution.identity import isolation_warning
from corral.runtime.execution.launcher import SERVICE_OOM_SCORE_ADJ, set_oom_score_adj
from corral.runtime.job_mail import Mailer, fan_out
from corral.runtime.jobspec.config import ServiceConfig
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.service_log import ServiceLog
from corral.runtime.storage.migrate import Upgrade
from corral.runtime.storage.store import Store
from corral.runtime.storage.store_lock import StoreLock, holder_line

COLLECTOR_THRESHOLDS = (50_000, 20, 10)
"""The cycle collector's thresholds while serving (Python's are 700, 10, 10). A
service over ten thousand jobs holds millions of objects, and a listing of them
allocates tens of thousands: at 700 a young collection came every few hundred
rows, and the full ones they lead to walked the whole heap, doubling one
listing's time in one request of three (0.18 s became 0.27-0.42 s)."""


def private_dir(path: Path) -> None:
    """Create ``path`` (and parents) if needed and make it 0700: the service's alone."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)
    except OSError as exc:
        raise CorralError(f"state_dir: cannot use {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CorralError(f"state_dir: {path} is not writable by this user")


def private_file(path: Path | None, announce: Callable[[str], None]) -> None:
    """Tighten a config holding tokens to 0600 (as ssh insists for its keys), and say so."""
    if path is None or not path.exists():
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077 and path.stat().st_uid == os.geteuid():
        path.chmod(mode & 0o700)
        announce(f"corral: {path} holds tokens; made it private (mode {mode & 0o700:o})")


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, taken before the store is touched (a busy port changes nothing)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named explicitly: asyncio turns Nagle off (TCP_NODELAY) only on
    # sockets whose protocol says TCP; with proto 0 every answer waited ~40 ms
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CorralError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def build(config: ServiceConfig) -> tuple[Store, Scheduler]:
    """The store, executor and scheduler (the state directory exists and is private)."""
    store = Store(config.store_url)
    executor: Executor
    if config.executor == "ray":
        from corral.runtime.execution.ray_executor import RayExecutor

        executor = RayExecutor(config)
    else:
        executor = LocalExecutor(
            config.gpus,
            config.workers.standby,
            config.state_dir / "standby.log",
            warm=(config.state_dir / "warm", config.workers.warm_idle)
            if config.workers.warm
            else None,
        )
    return store, Scheduler(config, store, executor)


def serve(
    config: ServiceConfig,
    announce: Callable[[str], None] = print,
    config_path: Path | None = None,
    standby: bool = False,
) -> None:
    private_dir(config.state_dir)
    private_file(config_path, announce)
    lock = StoreLock(config.store_url, config.state_dir, holder_line(config.url))
    lock.acquire(wait=standby, on_wait=announce)
    try:
        sock = bind(config.host, config.port)
        local = unix_listener(config.socket) if config.socket is not None else None
        try:
            _run(config, [sock] if local is None else [sock, local], lock, announce)
        finally:
            sock.close()
            if local is not None:
                local.close()
                with contextlib.suppress(OSError):
                    os.unlink(str(config.socket))
    finally:
        lock.release()


def migration_note(done: Upgrade) -> str | None:
    """What opening the store did to an existing store's schema, for the start-up
    lines (an operator learns of an upgrade, and where the old store is, without
    running ``corral store`` first); None for a new store or one already current."""
    if not done.changed or (
        done.before is None and done.backup is None and not done.legacy_columns
    ):
        return None
    line = (
        f"upgraded the store's schema from revision {done.before or 'none (unversioned)'} "
        f"to {done.after}"
    )
    if done.backup is not None:
        return f"{line}; the store as it was: {done.backup}"
    return f"{line} (no copy was made: back up a PostgreSQL store with pg_dump before upgrading)"


def _run(
    config: ServiceConfig,
    sockets: list[socket.socket],
    lock: StoreLock,
    announce: Callable[[str], None],
) -> None:
    store, scheduler = build(config)
    log = ServiceLog(config.log_level, config.log_format)
    mailer = Mailer(store, config.mail_program) if config.mail_program is not None else None
    store.echo = log if mailer is None else fan_out(log, mailer)
    if os.geteuid() == 0:  # (the kernel's OOM killer takes a greedy job, not the service)
        set_oom_score_adj(SERVICE_OOM_SCORE_ADJ)
    stop = threading.Event()
    scheduler.recover()  # before the API answers: nodes, adopted jobs and queue are known
    loop = threading.Thread(
        target=scheduler.run, args=(stop, False), name="corral-scheduler", daemon=True
    )
    app = create_app(config, store, scheduler)
    open_files = raise_open_files_limit()
    limits = ConnectionLimits.within(
        config.max_connections,
        config.max_connections_per_address,
        config.request_timeout,
        open_files,
    )
    if limits.total < config.max_connections:
        announce(
            f"corral: {open_files} open files allowed (RLIMIT_NOFILE): at most {limits.total} "
            f"API connections, not max_connections {config.max_connections}; raise the "
            "limit (systemd: LimitNOFILE=)"
        )
    server = _Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
            http=guarded_protocol(limits),
            backlog=ACCEPT_BATCH,
        )
    )
    watch = threading.Thread(
        target=_watch_lock, args=(lock, server, stop, announce), name="corral-lock", daemon=True
    )
    types = ", ".join(f"{n} {t}" for t, n in scheduler.cluster.gpus_by_type().items())
    server.scheduler = scheduler
    server.ready_status = f"serving {config.url}, policy {config.policy}, GPUs {types}"
    announce(
        f"corral: serving {config.url}"
        + (f" and {config.socket} (no token needed there)" if config.socket else "")
        + f" (policy {config.policy}; GPUs: {types}; "
        f"store {make_url(config.store_url).render_as_string(hide_password=True)})"
    )
    migrated = migration_note(store.upgrade)
    if migrated:
        announce(f"corral: {migrated}")
    confinement = scheduler.executor.gpu_confinement()
    if confinement is not None:
        announce(f"corral: GPU confinement: {confinement}")
    warning = isolation_warning(config)
    if warning:
        announce(f"corral: {warning}")
    if threading.current_thread() is threading.main_thread():
        # a job's process (its launcher) that ends wakes the loop at once, so the next
        # job starts on the freed GPUs now rather than at the next tick
        signal.signal(signal.SIGCHLD, wake_on_signal(scheduler.notify))
        # the web server handles SIGTERM (a graceful stop) and then raises it again
        # under the handler it found; with the default one the process would end there,
        # before the loop is stopped and the executor closed (a warm worker, a local Ray
        # head left behind); this one asks the server to stop (as it would have, had the
        # signal come before it took over) and lets ``server.run`` return to the cleanup
        signal.signal(signal.SIGTERM, lambda _signum, _frame: setattr(server, "should_exit", True))
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    loop.start()
    watch.start()
    try:
        server.run(sockets=sockets)
    finally:
        stop.set()
        scheduler.notify()
        loop.join(timeout=10)
        running = len(scheduler.attempts)
        scheduler.executor.close(jobs_running=running > 0)
        if mailer is not None:
            mailer.close()
        store.dispose()
        announce(
            f"corral: stopped; {running} running job(s) go on and are adopted at the next start"
            if running
            else "corral: stopped"
        )


def wake_on_signal(notify: Callable[[], None]) -> Callable[[int, object], None]:
    """A signal handler that has ``notify`` called soon, by a thread of its own.
    A handler runs in the main thread between two of its bytecodes, possibly while
    that thread holds the very lock ``notify`` takes (an ``Event.set`` of its own
    under way): calling it there deadlocked the service (found in a full run: the
    API stopped answering). The handler only writes a byte to a pipe, which takes
    no lock; the thread that reads the pipe calls ``notify``."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def relay() -> None:
        while os.read(read_end, 512):
            notify()

    threading.Thread(target=relay, name="corral-wake", daemon=True).start()

    def handler(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # (the pipe full: a wake is on its way)
            os.write(write_end, b"\0")

    return handler


class _Server(uvicorn.Server):
    """The web server, which also keeps Python's handlers for SIGTERM and SIGINT in
    force. Ray's core worker installs a C handler for SIGTERM (its failure-signal
    handler: it prints a stack and ends the process) each time it joins a cluster.
    Joined from the loop's thread (a configured Ray head that came back), it replaced
    Python's, and a SIGTERM then ended the service without its cleanup; only the main
    thread may install handlers, and this runs there, once a second."""

    scheduler: Scheduler | None = None
    """The loop whose passes the systemd watchdog's pings vouch for."""
    ready_status = "serving"

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(QuietErrors())
        await super().startup(sockets)
        if self.started:
            systemd.notify(f"READY=1\nSTATUS={self.ready_status}")
        self._watchdog = systemd.watchdog_interval()
        self._pinged, self._passes_seen = time.monotonic(), -1

    async def on_tick(self, counter: int) -> bool:
        if counter % 10 == 0:
            for sig in (signal.SIGTERM, signal.SIGINT):
                handler = signal.getsignal(sig)
                if callable(handler):
                    signal.signal(sig, handler)
        if self._watchdog is not None and time.monotonic() - self._pinged >= self._watchdog:
            passes = self.scheduler.passes if self.scheduler is not None else 0
            if passes != self._passes_seen:  # (a loop that hangs makes systemd restart us)
                systemd.notify("WATCHDOG=1")
                self._pinged, self._passes_seen = time.monotonic(), passes
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        systemd.notify("STOPPING=1")
        await super().shutdown(sockets)


def _watch_lock(
    lock: StoreLock, server: uvicorn.Server, stop: threading.Event, announce: Callable[[str], None]
) -> None:
    """Stop scheduling at once if the store's lock is lost (its database session ended):
    a standby may be taking over."""
    while not stop.wait(5.0):
        if not lock.alive():
            announce("corral: lost the store's lock (database session ended); stopping")
            stop.set()
            server.should_exit = True
            return
