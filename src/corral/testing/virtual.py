"""The scheduler loop in virtual time: a clock the test moves and an executor
whose "processes" are records that live in that time.

The real loop, store and policies run; only the clock and the processes are
stand-ins, so a loop test is exact, repeatable and as fast as the loop's own
code (no process, thread or wall-clock wait is involved).

A job's command says what its process does:

- ``["sleep", "N"]``: N seconds of work, then exit 0;
- ``["false"]``: exit 1 at once;
- ``["crash", "N"]``: killed by SIGSEGV after N seconds of work;
- ``["hang"]``: never ends by itself and ignores SIGTERM (only SIGKILL ends it);
- ``["train", "STEPS", "RATE"]`` (``"exclusive"`` after them: see below): a
  job that reports heartbeats as ``corral.train`` does (steps, throughput over
  the last second, at each heartbeat interval), checkpoints and exits when
  asked to stop (SIGTERM), and resumes from its checkpoint when relaunched;
- ``["work", "W", "ASKED", "EFFICIENCY"]``: W seconds of work that survive a
  stop (the executor keeps the job's progress, as a checkpoint would: a stopped
  one leaves with the code of a checkpointed stop and resumes where it was),
  done faster when granted more GPUs than ASKED (each extra gang adds
  EFFICIENCY of its speed), as the simulator's model of an elastic job;
- anything else: :data:`DEFAULT_RUN` seconds of work.

Work is done at speed 1, except that processes marked ``exclusive`` that run on
the same GPU share it: each of n such runs at 1/n (as compute-bound jobs packed
on a real GPU take turns step by step). A paused process (SIGSTOP, SIGTSTP)
does no work until SIGCONT. SIGTERM and SIGKILL end a process at once (a
``train`` process checkpoints first; a ``hang`` one ignores SIGTERM).

Nodes can fail (:meth:`VirtualExecutor.fail_node`: their processes are lost
and their GPUs unavailable) and come back (:meth:`VirtualExecutor.return_node`).

What the executor knows of a process is what a real one can see: a process's
"launcher" writes its pid file into the attempt's folder when it starts and its
exit record there when it ends (real files); :meth:`VirtualExecutor.poll`,
:meth:`~VirtualExecutor.adopt` and :meth:`~VirtualExecutor.pid_from` read only
those and the process table (a pid and its start). The process table is the
host's: :meth:`VirtualExecutor.restarted` gives a new executor over the same
host, as a restarted service's is, knowing nothing the old one held.

Faults of the executor (:attr:`VirtualExecutor.faults`, each used once): a launch
that raises, a process that ignores SIGTERM or takes seconds to leave after it, an
exit record missing (the launcher's disk full) or corrupt; a foreign process may
take a freed pid (:meth:`VirtualExecutor.reuse_pid`).

Warm workers (``workers.warm``) are kept per (user, GPU), as the local executor
keeps them: one asked by :meth:`VirtualExecutor.warm_up` (or by a task job's cold
start) is ready :data:`WARM_UP` seconds later, runs one task job of its user on
its GPU at a time, and ends after ``workers.warm_idle`` seconds idle or with its
node. A restarted executor knows none (they went with the service).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from corral.runtime.execution.executor import (
    Executor,
    ExitRecord,
    GpuSlot,
    LaunchRequest,
    ProcessRef,
    read_exit_record,
)
from corral.runtime.execution.identity import RunAs
from corral.runtime.execution.launcher import EXIT_FILE, PID_FILE
from corral.runtime.jobspec.config import ServiceConfig
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import AttemptRow, JobRow, Store
from corral.train.session import STOPPED_EXIT

DEFAULT_RUN = 5.0
WINDOW = 1.0
"""Seconds a reported throughput covers (as ``corral.train``'s window)."""
EPSILON = 1e-6
"""Work left (seconds) under which a process has ended: clock sums are not exact."""
WARM_UP = 2.0
"""Seconds a virtual warm worker takes to be ready (a CUDA context and PyTorch)."""

WarmKey = tuple[str | None, int]
"""A warm worker's (user it runs as, None: the service's own; GPU id)."""


@dataclass
class VirtualWarm:
    """One warm worker: whose, where, and what it runs."""

    node: str
    ready_at: float
    idle_since: float
    busy: int | None = None
    """The pid of the job process it runs (None: idle)."""


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
    """One launched job process, and what it has done so far."""

    request: LaunchRequest
    pid: int
    started: float
    work: float
    """Seconds of work at speed 1 it does before it exits (inf: never by itself)."""
    exit_code: int | None = 0
    exit_signal: int | None = None
    done: float = 0.0
    ended: float | None = None
    paused: bool = False
    paused_at: float | None = None
    paused_total: float = 0.0
    """Seconds it spent paused before ``paused_at`` (its current pause)."""
    ignores_term: bool = False
    exclusive: bool = False
    rate: float = 0.0
    """Steps per second at speed 1, for a process that reports heartbeats (else 0)."""
    speeds: list[tuple[float, float]] = field(default_factory=list)
    """(since, speed) at each change of its speed: its throughput's history."""
    last_beat: float = -math.inf
    lost: bool = False
    scale: float = 1.0
    """Its speed alone (an elastic job granted more GPUs than it asked runs faster)."""
    keeps_progress: bool = False
    term_delay: float = 0.0
    """Seconds it takes to leave after SIGTERM (a checkpoint being written)."""
    leaving_at: float | None = None
    """When it leaves, after a SIGTERM that takes time."""
    record: str = "kept"
    """What its launcher leaves at its end: ``kept``, ``missing`` (a full disk) or ``corrupt``."""
    foreign: bool = False
    """Not a job's: a process of someone else's that took a freed pid."""
    in_worker: WarmKey | None = None
    """The warm worker it runs in (None: started cold, by its own launcher)."""
    signalled: list[int] = field(default_factory=list)
    warned: list[tuple[float, int, str]] = field(default_factory=list)
    """The ``--signal`` warnings it got: (when, signal, whom)."""
    """The signals sent to it."""
    stamp: str = field(init=False, default="")
    """Its start as the process table keeps it (see :attr:`start`)."""

    def __post_init__(self) -> None:
        self.stamp = f"{self.started:.6f}/{id(self)}"

    @property
    def start(self) -> str:
        """Its start as the process table says it (unique: pids are reused; counted
        from the boot, so a step of the wall clock leaves it as it was)."""
        return self.stamp

    def shift(self, seconds: float) -> None:
        """Restate its wall-clock marks ``seconds`` earlier (the clock stepped back:
        what it has done and how long it has left are unchanged)."""
        self.started -= seconds
        self.last_beat -= seconds
        self.speeds = [(since - seconds, speed) for since, speed in self.speeds]
        for name in ("ended", "paused_at", "leaving_at"):
            mark = getattr(self, name)
            if mark is not None:
                setattr(self, name, mark - seconds)

    @property
    def job(self) -> int:
        return int(self.request.env.get("CORRAL_JOB_ID", "0"))

    @property
    def attempt(self) -> int:
        return int(self.request.env.get("CORRAL_ATTEMPT", "0"))

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(slot.id for slot in self.request.gpus)

    def alive(self) -> bool:
        return self.ended is None

    def paused_for(self, now: float) -> float:
        """Seconds it has spent paused up to ``now`` (or its end: a process that ended
        while stopped, killed without being resumed, is paused no longer)."""
        if self.paused_at is None:
            return self.paused_total
        until = now if self.ended is None else min(now, self.ended)
        return self.paused_total + max(until - self.paused_at, 0.0)

    def mean_speed(self, since: float, until: float) -> float:
        """Its average speed over ``[since, until]`` (from its history)."""
        total = 0.0
        marks = [*self.speeds, (until, 0.0)]
        for (t0, speed), (t1, _) in itertools.pairwise(marks):
            lo, hi = max(t0, since), min(t1, until)
            if hi > lo:
                total += speed * (hi - lo)
        return total / (until - since) if until > since else 0.0


def _behaviour(argv: list[str]) -> dict[str, Any]:
    """What a command stands for: its work, exit and heartbeats."""
    head, args = (argv[0] if argv else ""), argv[1:]

    def number(k: int, default: float) -> float:
        return float(args[k]) if len(args) > k else default

    if head == "sleep":
        return {"work": number(0, DEFAULT_RUN)}
    if head == "false":
        return {"work": 0.0, "exit_code": 1}
    if head == "crash":
        return {"work": number(0, 1.0), "exit_code": None, "exit_signal": int(signal.SIGSEGV)}
    if head == "hang":
        return {"work": math.inf, "ignores_term": True}
    if head == "work":
        return {"work": number(0, DEFAULT_RUN), "keeps_progress": True}
    if head == "train":
        steps, rate = number(0, 100.0), number(1, 10.0)
        return {"work": steps / rate, "rate": rate, "exclusive": "exclusive" in args}
    return {"work": DEFAULT_RUN}


class VirtualExecutor(Executor):
    """GPUs of the config's groups, a node each; processes that live in virtual time.

    Given the store, ``train`` processes write their heartbeats into it (as the
    API's heartbeat route does) and read their checkpoint from it.
    """

    def __init__(
        self, config: ServiceConfig, clock: VirtualClock, store: Store | None = None
    ) -> None:
        self.clock = clock
        self.store = store
        self.beat_every = config.heartbeat_interval
        ids = itertools.count()
        groups = config.gpus if isinstance(config.gpus, list) else []
        self._slots = [
            GpuSlot(next(ids), f"node-{n}", group.type)
            for n, group in enumerate(groups)
            for _ in range(group.count)
        ]
        self.processes: dict[int, VirtualProcess] = {}
        self._live: dict[int, VirtualProcess] = {}
        """The processes not known to have ended (the table keeps ended ones for ever: a
        virtual day's hundred thousand would be read at every look)."""
        self._beaten_at: float | None = None
        """When heartbeats were last looked for (None: a change since asks again)."""
        self._pids = itertools.count(1000)
        self.launches: list[LaunchRequest] = []
        self.progress: dict[int, float] = {}
        """Job -> work done when its last ``work`` process left (its checkpoint)."""
        self.down: set[str] = set()
        self._changed = False
        self._at = clock()
        self.on_launch: Callable[[VirtualProcess], None] | None = None
        """Called at each launch (a test's check that the attempt row exists)."""
        self.on_checkpoint: Callable[[int, int], None] | None = None
        """Called with (job, step) when a checkpoint's step is kept in the store."""
        self.faults: dict[str, float] = {}
        """Faults for the next launch or end: ``launch_fails``, ``ignores_term``,
        ``slow_term`` (seconds), ``record_missing``, ``record_corrupt``."""
        self.met: list[tuple[int, str]] = []
        """(job, fault) for each fault of :attr:`faults` a job's launch or end met."""
        self.freed: list[int] = []
        """Pids of job processes that have ended, most recent last (for reuse)."""
        self.beat_route: Callable[[VirtualProcess, dict[str, Any]], None] | None = None
        """Where heartbeats go (the API's route, as a test sets it); unset, they are
        written into the store as that route writes them."""
        self.sent: list[tuple[VirtualProcess, dict[str, Any]]] = []
        """The last heartbeats sent through :attr:`beat_route` (for replays)."""
        self.on_call: Callable[[str], None] | None = None
        """Called at each boundary of a call into the executor: ``launch`` before a
        launch, ``launched`` after it (before the loop stores its pid), ``signal``."""
        self.warm_idle = config.workers.warm_idle if config.workers.warm else None
        """Seconds a warm worker waits idle before it ends (None: no warm workers)."""
        self.warm: dict[WarmKey, VirtualWarm] = {}
        self.warm_starts: list[tuple[int, WarmKey, tuple[int, ...]]] = []
        """(job, worker, the job's GPUs) of each start in a warm worker, for the checks."""

    def restarted(self) -> VirtualExecutor:
        """A new executor over the same host (its process table, files and nodes), as
        a restarted service builds: it knows of processes only what it can read."""
        new = copy.copy(self)
        new._changed = True
        new.warm = {}  # (idle workers go with the service; a busy one ends with its job)
        return new

    # ----------------------------------------------------------- Executor
    def slots(self) -> list[GpuSlot]:
        return list(self._slots)

    def _boundary(self, where: str) -> None:
        if self.on_call is not None:
            self.on_call(where)

    def launch(self, request: LaunchRequest) -> ProcessRef:
        self._boundary("launch")
        self._sync()
        now = self.clock()
        job = int(request.env.get("CORRAL_JOB_ID", "0"))
        if self.faults.pop("launch_fails", None) is not None:
            self.met.append((job, "its launch failed"))
            raise OSError("cannot fork: resource temporarily unavailable")
        pid = next(self._pids)
        process = VirtualProcess(request, pid, now, **_behaviour(request.argv))
        if self.faults.pop("ignores_term", None) is not None:
            process.ignores_term = True
        process.term_delay = self.faults.pop("slow_term", 0.0)
        for how in ("missing", "corrupt"):
            if self.faults.pop(f"record_{how}", None) is not None:
                process.record = how
                self.met.append((job, f"its exit record {how}"))
        if process.keeps_progress:
            asked = int(request.argv[2]) if len(request.argv) > 2 else len(request.gpus)
            efficiency = float(request.argv[3]) if len(request.argv) > 3 else 0.0
            process.scale = 1.0 + efficiency * (len(request.gpus) / asked - 1.0)
            process.done = min(self.progress.get(process.job, 0.0), process.work)
        if process.rate and self.store is not None:
            with self.store.session() as s:
                row = s.get(JobRow, process.job)
                step = row.checkpoint_step if row is not None else None
            if isinstance(step, int | float) and step > 0:
                process.done = min(step / process.rate, process.work)
        self._warm_start(process, now)
        self.processes[pid] = process
        self._live[pid] = process
        self._beaten_at = None
        self.launches.append(request)
        request.dir.mkdir(parents=True, exist_ok=True)
        (request.dir / PID_FILE).write_text(str(pid))  # as the launcher does at its start
        if self.on_launch is not None:
            self.on_launch(process)
        if any(slot.node in self.down for slot in request.gpus):
            self._end(process, now, lost=True)
        self._resettle(now)
        self._boundary("launched")
        return ProcessRef(pid, process.start)

    def warm_up(self, run_as: RunAs | None, slot: GpuSlot, most: int | None = None) -> bool:
        if self.warm_idle is None:
            return False
        self._sync()
        now = self.clock()
        self._tend_warm(now)
        key = (run_as.name if run_as is not None else None, slot.id)
        if key in self.warm:
            return True
        if most is not None and self.warm_count(key[0]) >= most:
            return False
        self.warm[key] = VirtualWarm(slot.node, now + WARM_UP, now)
        return True

    def warm_count(self, user: str | None) -> int:
        """How many warm workers of ``user`` run (on any GPU)."""
        return sum(1 for who, _ in self.warm if who == user)

    def _warm_start(self, process: VirtualProcess, now: float) -> None:
        """A task job starts in its user's ready, idle worker on its GPU; where there
        is none, it starts cold, and a worker is started for next time (within the
        user's cap), as the local executor does."""
        request = process.request
        if self.warm_idle is None or request.warm_argv is None:
            return
        if len(request.gpus) != 1 or request.memory is not None or request.keeper is not None:
            return
        self._tend_warm(now)
        key = (request.run_as.name if request.run_as is not None else None, request.gpus[0].id)
        worker = self.warm.get(key)
        if worker is not None and worker.busy is None and now >= worker.ready_at:
            worker.busy, process.in_worker = process.pid, key
            self.warm_starts.append((process.job, key, process.gpus))
        elif worker is None and (
            request.warm_most is None or self.warm_count(key[0]) < request.warm_most
        ):
            self.warm[key] = VirtualWarm(request.gpus[0].node, now + WARM_UP, now)

    def _tend_warm(self, now: float) -> None:
        """End the workers idle too long and those of a failed node."""
        assert self.warm_idle is not None
        for key, worker in list(self.warm.items()):
            idle = worker.busy is None and now - max(worker.idle_since, worker.ready_at)
            if worker.node in self.down or (idle is not False and idle > self.warm_idle):
                del self.warm[key]

    def tend(self) -> None:
        if self.warm_idle is not None:
            self._tend_warm(self.clock())

    def _own(self, ref: ProcessRef) -> VirtualProcess | None:
        """The live process ``ref`` names (None: gone, or its pid is another's now)."""
        process = self.processes.get(ref.pid)
        if process is None or not process.alive() or process.start != ref.pid_start:
            return None
        return process

    def signal(self, ref: ProcessRef, sig: int) -> None:
        self._boundary("signal")
        self._sync()
        process = self._own(ref)
        now = self.clock()
        if process is None:
            return
        process.signalled.append(sig)
        self._beaten_at = None  # (a process let go on may be due a heartbeat)
        if sig in (signal.SIGSTOP, signal.SIGTSTP):
            if not process.paused:
                process.paused, process.paused_at = True, now
        elif sig == signal.SIGCONT:
            if process.paused_at is not None:
                process.paused_total += now - process.paused_at
            process.paused, process.paused_at = False, None
        elif sig == signal.SIGTERM and process.term_delay > 0 and not process.ignores_term:
            if process.leaving_at is None:  # it checkpoints, then leaves
                process.leaving_at = now + process.term_delay
        elif sig == signal.SIGTERM and not process.ignores_term:
            self._leave(process, now)
        elif sig == signal.SIGKILL:
            process.exit_code, process.exit_signal = None, int(sig)
            self._end(process, now)
        self._resettle(now)

    def warn(self, ref: ProcessRef, sig: int, whom: str) -> bool:
        self._boundary("signal")
        self._sync()
        process = self._own(ref)
        if process is not None:
            process.warned.append((self.clock(), sig, whom))
        return True

    def _leave(self, process: VirtualProcess, now: float) -> None:
        """It leaves as SIGTERM asks: a training job checkpoints first."""
        if process.rate:
            self._checkpoint(process)
            process.exit_code, process.exit_signal = STOPPED_EXIT, None
        elif process.keeps_progress:
            self.progress[process.job] = process.done
            process.exit_code, process.exit_signal = STOPPED_EXIT, None
        else:
            process.exit_code, process.exit_signal = None, int(signal.SIGTERM)
        self._end(process, now)

    def poll(self, ref: ProcessRef, folder: Path) -> ExitRecord | None:
        """None while the process runs; then its launcher's exit record, or a lost
        one where there is none (as the local executor reads them)."""
        self._sync()
        if self._own(ref) is not None:
            return None
        return read_exit_record(folder) or ExitRecord(
            None, None, "the process vanished without an exit record", lost=True
        )

    def adopt(self, ref: ProcessRef) -> bool:
        self._sync()
        return self._own(ref) is not None

    def pid_from(self, folder: Path) -> ProcessRef | None:
        """The process an attempt's launcher started, from its pid file (found when
        the pid's write to the store failed), if that pid still runs."""
        try:
            pid = int((folder / PID_FILE).read_text())
        except (OSError, ValueError):
            return None
        process = self.processes.get(pid)
        if process is None or not process.alive():
            return None
        return ProcessRef(pid, process.start)

    def reuse_pid(self) -> VirtualProcess | None:
        """A foreign process (someone else's, never to be signalled) takes the pid of
        the job process that ended last, as the kernel hands freed pids out again."""
        while self.freed:
            pid = self.freed.pop()
            old = self.processes.get(pid)
            if old is not None and not old.alive():
                request = LaunchRequest(["foreign"], {}, "/", (), Path("/nonexistent"), Path("/"))
                process = VirtualProcess(request, pid, self.clock(), math.inf, foreign=True)
                self.processes[pid] = process
                self._live[pid] = process
                return process
        return None

    def watch(self) -> bool:
        changed, self._changed = self._changed, False
        return changed

    def unavailable_nodes(self) -> set[str]:
        return set(self.down)

    def unavailable_reason(self, node: str) -> str | None:
        return "node failed" if node in self.down else None

    # ------------------------------------------------------------- faults
    def fail_node(self, node: str) -> None:
        """The node is lost: its processes vanish and its GPUs cannot be used."""
        self._sync()
        self.down.add(node)
        self._changed = True
        for process in self._alive():
            if any(slot.node == node for slot in process.request.gpus):
                self._end(process, self.clock(), lost=True)
        self._resettle(self.clock())

    def clock_stepped_back(self, seconds: float) -> None:
        """The host's wall clock stepped back ``seconds`` (it has already moved): the
        processes go on in real time, so every mark kept in wall-clock time moves
        with it. Without this they would stand still until the clock caught up."""
        self._at -= seconds
        self._beaten_at = None
        for process in self.processes.values():
            process.shift(seconds)

    def return_node(self, node: str) -> None:
        self.down.discard(node)
        self._changed = True

    def nodes(self) -> list[str]:
        return sorted({slot.node for slot in self._slots})

    # ------------------------------------------------------------ the model
    def _alive(self) -> list[VirtualProcess]:
        """The processes alive now, in the order they started."""
        ended = [pid for pid, p in self._live.items() if not p.alive()]
        for pid in ended:
            del self._live[pid]
        return list(self._live.values())

    def running(self) -> list[VirtualProcess]:
        self._sync()
        return [p for p in self._alive() if not p.foreign]

    def _speed(self, process: VirtualProcess, live: list[VirtualProcess]) -> float:
        if process.paused:
            return 0.0
        if not process.exclusive:
            return process.scale
        mine = set(process.gpus)
        sharing = sum(1 for p in live if p.exclusive and not p.paused and mine.intersection(p.gpus))
        return 1.0 / max(sharing, 1)

    def _resettle(self, now: float) -> None:
        """Record each live process's speed from ``now`` (after a change)."""
        live = self._alive()
        for p in live:
            speed = self._speed(p, live)
            if not p.speeds or p.speeds[-1][1] != speed:
                p.speeds.append((now, speed))

    def next_end(self) -> float | None:
        """When the first live process will end at today's speeds (None: none will)."""
        self._sync()
        live = self._alive()
        ends = [
            self._at + (p.work - p.done) / speed
            for p in live
            if (speed := self._speed(p, live)) > 0 and p.work != math.inf
        ]
        ends += [p.leaving_at for p in live if p.leaving_at is not None]
        return min(ends, default=None)

    def _sync(self) -> None:
        """Bring every process up to the clock: work done, exits, heartbeats."""
        now = self.clock()
        if self._at >= now and self._beaten_at == now:
            return  # (nothing moved since the last look at this instant)
        while self._at < now:
            live = self._alive()
            if not live:
                break
            speeds = {p.pid: self._speed(p, live) for p in live}
            step = now - self._at
            for p in live:
                if speeds[p.pid] > 0:
                    step = min(step, (p.work - p.done) / speeds[p.pid])
                if p.leaving_at is not None:
                    step = min(step, p.leaving_at - self._at)
            step = max(step, 0.0)
            at = self._at + step
            for p in live:
                p.done += speeds[p.pid] * step
                if p.leaving_at is not None and at >= p.leaving_at - EPSILON:
                    self._leave(p, at)
                elif p.done >= p.work - EPSILON:
                    self._end(p, at)
            self._at = at
            self._resettle(at)
            if step == 0.0 and not any(not p.alive() for p in live):
                break
        self._at = max(self._at, now)
        self._beat(now)
        self._beaten_at = now

    def _end(self, process: VirtualProcess, at: float, lost: bool = False) -> None:
        process.ended = at
        process.lost = lost
        process.speeds.append((at, 0.0))
        if process.foreign:
            return
        worker = self.warm.get(process.in_worker) if process.in_worker is not None else None
        if worker is not None and worker.busy == process.pid:
            worker.busy, worker.idle_since = None, at
        self.freed.append(process.pid)
        if lost or process.record == "missing":
            return  # its node is gone, or its launcher could not write (a full disk)
        record = {
            "exit_code": process.exit_code,
            "signal": process.exit_signal,
            "detail": None,
            "end_time": at,
        }
        text = json.dumps(record) if process.record == "kept" else '{"exit_code": 0, "sig'
        with contextlib.suppress(OSError):
            (process.request.dir / EXIT_FILE).write_text(text)

    def _beat(self, now: float) -> None:
        """Heartbeats of the ``train`` processes due one."""
        if self.store is None:
            return
        due = [
            p
            for p in self._alive()
            if p.rate
            and not p.paused
            and now - p.last_beat >= self.beat_every
            and now - p.started >= WINDOW
        ]
        if not due:
            return
        if self.beat_route is not None:
            for p in due:
                p.last_beat = now
                body = {
                    "attempt": p.attempt,
                    "step": int(p.done * p.rate),
                    "throughput": p.mean_speed(now - WINDOW, now) * p.rate,
                    "throughput_age": WINDOW,
                }
                self.sent = [*self.sent[-20:], (p, body)]
                self.beat_route(p, body)
            return
        with contextlib.suppress(OperationalError):  # a full disk: the API answers 507
            self._write_beats(due, now)

    def _write_beats(self, due: list[VirtualProcess], now: float) -> None:
        assert self.store is not None
        with self.store.session() as s:
            for p in due:
                attempt = s.scalars(
                    select(AttemptRow).where(
                        AttemptRow.job_id == p.job, AttemptRow.number == p.attempt
                    )
                ).first()
                row = s.get(JobRow, p.job)
                if attempt is None or attempt.end_time is not None or row is None:
                    continue
                p.last_beat = now
                row.steps = int(p.done * p.rate)
                row.throughput = p.mean_speed(now - WINDOW, now) * p.rate
                row.throughput_since = now - WINDOW
                row.last_heartbeat = now

    def _checkpoint(self, process: VirtualProcess) -> None:
        if self.store is None:
            return
        step = int(process.done * process.rate)
        try:
            with self.store.session() as s:
                row = s.get(JobRow, process.job)
                if row is None:
                    return
                row.checkpoint_step = step
                row.steps = row.checkpoint_step
        except OperationalError:
            return  # a full disk: the checkpoint's step is not recorded
        if self.on_checkpoint is not None:
            self.on_checkpoint(process.job, step)


def virtual_scheduler(
    config: ServiceConfig, store: Store, clock: VirtualClock, executor: Any = None
) -> Scheduler:
    """A loop on ``store`` in virtual time, recovered as ``corral serve`` starts it
    (the store's events are stamped in virtual time too)."""
    store.clock = clock
    scheduler = Scheduler(
        config, store, executor or VirtualExecutor(config, clock, store), clock=clock
    )
    scheduler.recover()
    return scheduler


def run_for(scheduler: Scheduler, clock: VirtualClock, seconds: float, tick: float = 0.5) -> None:
    """Step the loop every ``tick`` virtual seconds for ``seconds``."""
    for _ in range(int(seconds / tick)):
        scheduler.step()
        clock.advance(tick)
