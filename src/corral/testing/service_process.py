"""Run ``corral serve`` as a child process on loopback (tests and benchmarks).

Writes a config with virtual GPUs into a folder, starts the service, waits
until it answers, and can stop it gracefully or with ``kill -9``. Whatever
happens, :meth:`ServiceProcess.close` leaves no job process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from corral.api.client import Client
from corral.runtime.execution.executor import free_port
from corral.runtime.storage.store import AttemptRow, EventRow, Store


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "a condition") -> Any:
    """Poll ``predicate`` until it returns something true; that value, or TimeoutError.

    The pause between polls grows from 0.05 s to 0.25 s: a predicate is often a
    request to a service, and a poll every 0.05 s of ten jobs for minutes was a
    hundred or more requests a second, a large share of a loaded host's cores."""
    deadline = time.monotonic() + timeout
    pause = 0.05
    while not (value := predicate()):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(min(pause, left))
        pause = min(pause * 1.25, 0.25)
    return value


def kill_open_attempts(attempts: list[AttemptRow]) -> None:
    """SIGKILL the process group of every attempt still open (clean-up after a run)."""
    for a in attempts:
        if a.end_time is None and a.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(a.pid, signal.SIGKILL)


class ServiceProcess:
    def __init__(
        self,
        folder: Path,
        policy: str,
        options: dict[str, Any] | None = None,
        users: dict[str, str] | None = None,
        gpus: list[dict[str, Any]] | None = None,
        unix_users: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        name: str = "serve",
        open_files: int | None = None,
        **settings: Any,
    ) -> None:
        self.folder = folder
        self.open_files = open_files
        """RLIMIT_NOFILE (soft and hard) the service starts under (None: this process's)."""
        self.name = name
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.users = users or {"alice": "alice-token-1", "root": "root-token-1"}
        config = {
            "host": "127.0.0.1",
            "port": self.port,
            "state_dir": "state",
            "policy": policy,
            "policy_options": options or {},
            "gpus": gpus or [{"type": "V100", "count": 2}, {"type": "K80", "count": 2}],
            "users": [
                {"name": n, "token": t, "admin": n == "root"}
                | ({"unix_user": unix_users[n]} if unix_users and n in unix_users else {})
                for n, t in self.users.items()
            ],
            "heartbeat_interval": 0.5,
            "tick": 0.2,
            **settings,
        }
        folder.mkdir(parents=True, exist_ok=True)
        self.config = folder / ("corral.yaml" if name == "serve" else f"{name}.yaml")
        self.config.write_text(yaml.safe_dump(config))
        self.store_url = settings.get("store") or f"sqlite:///{folder / 'state' / 'corral.db'}"
        self.proc: subprocess.Popen[bytes] | None = None
        first = next(iter(self.users))
        self.client = Client(self.url, self.users[first])
        self.admin = Client(self.url, self.users.get("root", self.users[first]))

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}.log"

    def start(self, timeout: float = 60.0, *args: str) -> None:
        """Start ``corral serve`` (with ``args``, e.g. ``--standby``) and wait until it answers."""
        self.launch(*args)
        self.wait_ready(timeout)

    def launch(self, *args: str) -> None:
        """Start ``corral serve`` without waiting for it."""
        env = {**os.environ, **self.env} if self.env else None
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "corral.cli", "serve", "--config", str(self.config), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                preexec_fn=None if self.open_files is None else self._limit_files,
            )

    def _limit_files(self) -> None:
        """(In the child, before ``exec``: a host whose hard limit is this low.)"""
        import resource

        assert self.open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if self.admin.json("GET", "/v1/health")["status"] == "ok":
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"the service did not start; see {self.log}")

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)  # (a graceful stop closes the executor: a local Ray head too)

    def store(self) -> Store:
        return Store(self.store_url)

    def attempts(self) -> list[AttemptRow]:
        store = self.store()
        try:
            with store.session() as s:
                return list(s.query(AttemptRow).order_by(AttemptRow.id))
        finally:
            store.dispose()

    def events(self, kind: str | None = None) -> list[EventRow]:
        store = self.store()
        try:
            with store.session() as s:
                query = s.query(EventRow).order_by(EventRow.id)
                if kind is not None:
                    query = query.filter(EventRow.kind == kind)
                return list(query)
        finally:
            store.dispose()

    def close(self) -> None:
        self.stop()
        kill_open_attempts(self.attempts())
        self.client.close()
        self.admin.close()
