"""The scheduler loop in virtual time: a clock the test moves and an executor
whose "processes" are records that end when the clock says.

A job's command says what its process does: ``["sleep", "N"]`` runs N virtual
seconds and exits 0, ``["false"]`` exits 1 at once, anything else runs for
:data:`DEFAULT_RUN` seconds. A signal ends it at once (SIGTERM as a clean
stop, SIGKILL as killed). No process, thread or wall-clock wait is involved,
so a loop test is exact and as fast as the loop's own code.
"""

from __future__ import annotations

import itertools
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.runtime.execution.executor import (
    Executor,
    ExitRecord,
    GpuSlot,
    LaunchRequest,
    ProcessRef,
)
from corral.runtime.jobspec.config import ServiceConfig
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import Store

DEFAULT_RUN = 5.0


class VirtualClock:
    """Wall-clock seconds the test moves by hand."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class VirtualProcess:
    request: LaunchRequest
    started: float
    ends: float
    exit_code: int | None = 0
    signal: int | None = None


class VirtualExecutor(Executor):
    """GPUs of the config's groups, a node each; processes that live in virtual time."""

    def __init__(self, config: ServiceConfig, clock: VirtualClock) -> None:
        self.clock = clock
        ids = itertools.count()
        groups = config.gpus if isinstance(config.gpus, list) else []
        self._slots = [
            GpuSlot(next(ids), f"node-{n}", group.type)
            for n, group in enumerate(groups)
            for _ in range(group.count)
        ]
        self.processes: dict[int, VirtualProcess] = {}
        self._pids = itertools.count(1000)
        self.launches: list[LaunchRequest] = []

    def slots(self) -> list[GpuSlot]:
        return list(self._slots)

    def launch(self, request: LaunchRequest) -> ProcessRef:
        now = self.clock()
        argv = request.argv
        run, code = DEFAULT_RUN, 0
        if argv[:1] == ["sleep"] and len(argv) > 1:
            run = float(argv[1])
        elif argv[:1] == ["false"]:
            run, code = 0.0, 1
        pid = next(self._pids)
        self.processes[pid] = VirtualProcess(request, now, now + run, code)
        self.launches.append(request)
        return ProcessRef(pid, str(pid))

    def signal(self, ref: ProcessRef, sig: int) -> None:
        process = self.processes.get(ref.pid)
        if process is None or process.ends <= self.clock():
            return
        if sig in (signal.SIGTERM, signal.SIGKILL):
            process.ends = self.clock()
            process.exit_code, process.signal = (None, int(sig))

    def poll(self, ref: ProcessRef, folder: Path) -> ExitRecord | None:
        process = self.processes.get(ref.pid)
        if process is None:
            return ExitRecord(None, None, "lost", lost=True)
        if process.ends > self.clock():
            return None
        return ExitRecord(process.exit_code, process.signal, end=process.ends)

    def adopt(self, ref: ProcessRef) -> bool:
        process = self.processes.get(ref.pid)
        return process is not None and process.ends > self.clock()

    def running(self) -> list[VirtualProcess]:
        return [p for p in self.processes.values() if p.ends > self.clock()]


def virtual_scheduler(
    config: ServiceConfig, store: Store, clock: VirtualClock, executor: Any = None
) -> Scheduler:
    """A loop on ``store`` in virtual time, recovered as ``corral serve`` starts it."""
    scheduler = Scheduler(config, store, executor or VirtualExecutor(config, clock), clock=clock)
    scheduler.recover()
    return scheduler


def run_for(scheduler: Scheduler, clock: VirtualClock, seconds: float, tick: float = 0.5) -> None:
    """Step the loop every ``tick`` virtual seconds for ``seconds``."""
    for _ in range(int(seconds / tick)):
        scheduler.step()
        clock.advance(tick)
