"""An in-process service for tests: store, local executor, scheduler loop and API.

The loop runs in a thread exactly as under ``corral serve``; the API is
called through FastAPI's test client (no socket). Jobs are real processes
on 4 virtual GPUs (2 V100, 2 K80).
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from corral.api.app import create_app
from corral.runtime.execution.executor import LocalExecutor
from corral.runtime.jobspec.config import GpuGroup, RetryConfig, ServiceConfig, UserConfig
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import AttemptRow, EventRow, Store
from corral.testing.service_process import kill_open_attempts, wait_for

__all__ = ["wait_for"]

PY = sys.executable
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-12", "root": "root-token-1"}
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}


def make_config(state_dir: Path, **overrides: Any) -> ServiceConfig:
    fields: dict[str, Any] = {
        "state_dir": state_dir,
        "policy": "las",
        "policy_options": {"quantum": 1.0},
        "gpus": [GpuGroup(type="V100", count=2), GpuGroup(type="K80", count=2)],
        "users": [
            UserConfig(name="alice", token=TOKENS["alice"]),
            UserConfig(name="bob", token=TOKENS["bob"]),
            UserConfig(name="root", token=TOKENS["root"], admin=True),
        ],
        "stop_grace": 5.0,
        "heartbeat_interval": 0.5,
        "tick": 0.1,
        "retry": RetryConfig(backoff=0.2, backoff_max=1.0),
    }
    fields.update(overrides)
    return ServiceConfig(**fields)


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[user]}"}


class Harness:
    def __init__(self, state_dir: Path, driver: Any = None, **overrides: Any) -> None:
        self.config = make_config(state_dir, **overrides)
        self.store = Store(self.config.store_url)
        self.driver = driver
        """The GPUs' driver for ``gpus: auto`` (tests give one over a fake NVML)."""
        self._start()

    def _start(self) -> None:
        executor = LocalExecutor(self.config.gpus, self.config.workers.standby, driver=self.driver)
        self.scheduler = Scheduler(self.config, self.store, executor)
        self.scheduler.recover()  # as ``corral serve`` does, before the API answers
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.scheduler.run, args=(self.stop_event, False))
        self.thread.start()
        self.client = TestClient(create_app(self.config, self.store, self.scheduler))

    def crash(self) -> None:
        """Stop the loop without touching its processes (as a killed service would)."""
        self.stop_event.set()
        self.scheduler.notify()
        self.thread.join(120)  # (a pass under load can take seconds: never two loops at once)
        assert not self.thread.is_alive(), "the loop thread did not stop in 120 s"

    def restart(self) -> None:
        self.crash()
        self._start()

    def submit(self, user: str = "alice", **spec: Any) -> dict[str, Any]:
        response = self.client.post("/v1/jobs", json=spec, headers=auth(user))
        assert response.status_code == 201, response.text
        return response.json()

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.client.get(f"/v1/jobs/{job_id}", headers=auth("root"))
        assert response.status_code == 200, response.text
        return response.json()

    def wait_state(self, job_id: int, states: set[str], timeout: float = 60.0) -> dict[str, Any]:
        return wait_for(
            lambda: (j := self.job(job_id))["status"] in states and j,
            timeout,
            f"job {job_id} to reach {states}",
        )

    def wait_loop(self, predicate: Any, timeout: float, what: str) -> Any:
        """:func:`wait_for`, and on a timeout what the loop was doing (for a
        failure seen only on a loaded machine: the loop stalled, or ran and
        did not see what was waited for)."""
        try:
            return wait_for(predicate, timeout, what)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; {self.loop_report()}") from None

    def loop_report(self) -> str:
        sch = self.scheduler
        passes = sch._passes
        time.sleep(1.0)
        attempts = [(a.job, list(a.gpus), a.stop) for a in list(sch.attempts.values())]
        return (
            f"loop thread alive: {self.thread.is_alive()}; passes {passes}, "
            f"{sch._passes - passes} more in the next second; errors {sch.errors}; "
            f"attempts (job, GPUs, stop) {attempts}; GPUs polled at {sch.gpus_polled_at:.1f} "
            f"(clock {sch.clock():.1f}); driver usage {sch.executor.gpu_usage()}"
        )

    def wait_done(self, ids: list[int], timeout: float = 120.0) -> list[dict[str, Any]]:
        for job_id in ids:
            self.wait_state(job_id, TERMINAL, timeout)
        return [self.job(j) for j in ids]

    def attempts(self) -> list[AttemptRow]:
        with self.store.session() as s:
            return list(s.query(AttemptRow).order_by(AttemptRow.id))

    def events(self, kind: str) -> list[EventRow]:
        with self.store.session() as s:
            return list(s.query(EventRow).filter(EventRow.kind == kind).order_by(EventRow.id))

    def close(self) -> None:
        self.crash()
        kill_open_attempts(self.attempts())
        self.store.dispose()


def check_history(attempts: list[AttemptRow]) -> None:
    """The recorded history is consistent: every attempt closed, no GPU used twice at once."""
    by_gpu: dict[int, list[tuple[float, float, int]]] = {}
    for a in attempts:
        assert a.end_time is not None, f"attempt {a.id} of job {a.job_id} never closed"
        assert a.cause is not None
        assert a.end_time >= a.start_time
        for g in a.gpus:
            by_gpu.setdefault(g, []).append((a.start_time, a.end_time, a.job_id))
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_s0, e0, j0), (s1, _, j1) in itertools.pairwise(spans):
            assert s1 >= e0, f"GPU {gpu}: job {j1} started at {s1} before job {j0} ended at {e0}"
    by_job: dict[int, list[AttemptRow]] = {}
    for a in attempts:
        by_job.setdefault(a.job_id, []).append(a)
    for job, rows in by_job.items():
        rows.sort(key=lambda r: r.number)
        for before, after in itertools.pairwise(rows):
            assert after.start_time >= before.end_time, f"job {job} ran two attempts at once"
