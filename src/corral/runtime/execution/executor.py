"""Executors carry out the scheduler's decisions on real processes.

An executor knows its GPUs (:class:`GpuSlot`), launches an attempt on some of
them, signals it, kills it and reports how it ended. The scheduler loop only
talks to this interface, so the Ray executor and warm workers plug in beside
the local one.

:class:`LocalExecutor` runs each attempt on this machine as its own process
group (through :mod:`corral.runtime.execution.launcher`, which records the exit in the
attempt's folder, so the record survives a crash of the service). With
``gpus: auto`` it finds NVIDIA GPUs with ``nvidia-smi``; a configured list of
virtual GPUs of named types lets a machine without GPUs run jobs on the CPU.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from corral.errors import CorralError
from corral.model.cluster import Links
from corral.runtime.execution.gpu_devices import in_force
from corral.runtime.execution.gpu_driver import GpuDriver, GpuUsage, links_of, open_driver
from corral.runtime.execution.identity import RunAs
from corral.runtime.execution.job_files import read_small
from corral.runtime.execution.launcher import (
    ADMIN_ENV,
    ENV_FILE,
    EXIT_FILE,
    PID_FILE,
    PRIVATE_OPTIONS,
    Confinement,
    inherited,
    isolated_python,
    job_file_text,
    job_processes,
    live_processes,
    process_states,
    root_environment,
    write_atomic,
    write_private,
)
from corral.runtime.execution.standby import Idle, StandbyPool
from corral.runtime.execution.warm_worker import WarmWorkers
from corral.runtime.jobspec.config import GpuGroup
from corral.train.keeper_client import KEEPER_ENV

PASSED_ENV = (*ADMIN_ENV, "TERM", "CUDA_HOME")
"""The service's variables a job inherits (locale, libraries); nothing else of the
service's environment (its secrets, database URLs) reaches a job."""


@dataclass(frozen=True)
class GpuSlot:
    """One GPU: its dense id (the policy's GPU id), node, type and device (None: virtual)."""

    id: int
    node: str
    gpu_type: str
    device: str | None = None


@dataclass(frozen=True)
class KeeperRequest:
    """A round keeper wanted beside a task of a round (see :mod:`corral.train.round_keeper`)."""

    job: int
    """The job run as rounds whose state it holds."""
    gpu: int
    argv: list[str]
    """Its module and arguments, for a standby worker."""
    socket: Path
    dir: Path
    """Its launcher's folder (exit record, log)."""
    limit: int
    """Keepers kept per GPU at most (the least recently used goes first)."""


@dataclass(frozen=True)
class LaunchRequest:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    gpus: tuple[GpuSlot, ...]
    dir: Path
    log: Path
    run_as: RunAs | None = None
    """The Unix user the job runs as (None: the service's own)."""
    cpus: int | None = None
    memory: int | None = None
    """Bytes."""
    output: str | None = None
    """The job's output file (None: the attempt's log)."""
    error: str | None = None
    """The job's standard error file (None: with its output)."""
    warm_argv: list[str] | None = None
    """A task job's runner arguments: it may start in a standby worker."""
    warm_most: int | None = None
    """The most warm workers its user may have (``workers.warm``: the GPUs the user
    may hold; None: no cap): a cold start starts a worker for next time only below it."""
    nice: int | None = None
    """Niceness for the job's processes (opportunistic jobs: 19)."""
    keeper: KeeperRequest | None = None
    """A task of a round: the keeper that may hold its job on its GPU."""
    log_limit: int | None = None
    """Bytes of the job's output its attempt's log keeps (None: no limit)."""
    pids: int | None = None
    """Processes and threads the attempt may have at once (cgroup ``pids.max``)."""
    memory_default: int | None = None
    """Bytes a job that gave no ``memory`` may use, where a cgroup can hold it."""
    base_env: dict[str, str] | None = None
    """The submitting shell's environment (sbatch's ``--export``), the job's base in
    place of the service's few passed variables (None: those)."""


@dataclass(frozen=True)
class ProcessRef:
    """A launched process group, identified beyond its pid (pids are reused)."""

    pid: int
    pid_start: str


@dataclass
class RunningKeeper:
    """A round keeper the executor started, and when a task last went its way."""

    process: subprocess.Popen[bytes]
    used: float


@dataclass(frozen=True)
class ExitRecord:
    exit_code: int | None
    signal: int | None
    detail: str | None = None
    lost: bool = False
    """True when the process is gone without a record (killed with its launcher, node lost)."""
    end: float | None = None
    """When it ended (wall clock), if the record says."""


class Executor(ABC):
    runs_without_gpus: bool = True
    """Whether it can launch a process that holds no GPU (an early staging)."""

    @abstractmethod
    def slots(self) -> list[GpuSlot]:
        """All GPUs this executor offers, ids dense from 0, grouped by node."""

    @abstractmethod
    def launch(self, request: LaunchRequest) -> ProcessRef: ...

    @abstractmethod
    def signal(self, ref: ProcessRef, sig: int) -> None:
        """Send a signal to the whole attempt (its process group)."""

    @abstractmethod
    def poll(self, ref: ProcessRef, folder: Path) -> ExitRecord | None:
        """How the attempt ended, or None while it runs."""

    def kill(self, ref: ProcessRef) -> None:
        self.signal(ref, signal.SIGKILL)

    def warn(self, ref: ProcessRef, sig: int, whom: str) -> bool:
        """Send a job's ``--signal`` warning: to its main process alone (``whom`` is
        ``batch``: the script's shell), to its other processes (``steps``), or to
        every process of the job (``all``), never to its launcher. False where this
        executor cannot (the warning is then not sent)."""
        return False

    def gpu_confinement(self) -> str | None:
        """How jobs are kept to their GPUs' device nodes, for the start-up lines and
        ``/v1/health`` (None: the GPUs are virtual, there is nothing to confine)."""
        return None

    def renice(self, ref: ProcessRef, nice: int) -> bool:
        """Set the whole attempt's OS priority; False where this executor cannot (or
        may not: raising priority needs privilege)."""
        return False

    def adopt(self, ref: ProcessRef) -> bool:
        """True when the attempt's process still runs (after a service restart)."""
        return False

    def paused(self, ref: ProcessRef) -> bool:
        """True once the attempt's processes have all stopped after a pause request
        (False where this executor cannot tell: the caller then waits out the
        pause grace)."""
        return False

    def pid_from(self, folder: Path) -> ProcessRef | None:
        """The process of an attempt whose pid was never stored (crash during launch)."""
        return None

    def watch(self) -> bool:
        """Look for nodes that left or joined; True when :meth:`slots` or
        :meth:`unavailable_nodes` changed (the loop then re-reads them)."""
        return False

    def unavailable_nodes(self) -> set[str]:
        """Nodes whose GPUs cannot be used now (gone from the executor's cluster)."""
        return set()

    def unavailable_reason(self, node: str) -> str | None:
        """Why a node of :meth:`unavailable_nodes` cannot be used (None: not known)."""
        return None

    def release_keepers(self, job: int) -> None:
        """The job run as rounds is over: its round keepers may go."""
        return None

    def links(self) -> Links | None:
        """What links the GPUs inside a node, as the driver reports it (None: the
        model's default, PCIe)."""
        return None

    def gpu_faults(self) -> dict[int, str]:
        """GPUs (by id) the driver reports failed now, with why (none for virtual GPUs)."""
        return {}

    def gpu_usage(self) -> dict[int, GpuUsage]:
        """Each real GPU's utilisation, memory and processes now (by id)."""
        return {}

    def gpu_resumed(self, gpus: list[int]) -> None:
        """An admin put these GPUs back: forget the faults the driver remembers."""
        return None

    def tend(self) -> None:
        """Upkeep between the loop's passes (the local executor starts the round
        keepers it could not start when their task launched)."""
        return None

    def warm_up(self, run_as: RunAs | None, slot: GpuSlot, most: int | None = None) -> bool:
        """Have a warm worker of this user on this GPU (``workers.warm``), started now
        if there is none and the user has fewer than ``most`` (None: no cap); False
        where none runs after (this executor keeps none, or the cap)."""
        return False

    def close(self, jobs_running: bool) -> None:
        """The service is stopping; ``jobs_running`` when attempts go on without it
        (they are adopted at the next start)."""
        return None


def warm_key(who: RunAs | None, slot: GpuSlot) -> tuple[int | None, str]:
    """The warm worker of this user (by uid; None: the service's own) on this GPU
    (its device, or ``v<id>`` for a virtual one)."""
    return (who.uid if who is not None else None, slot.device or f"v{slot.id}")


def process_start(pid: int) -> str | None:
    """The start time of a live process (clock ticks since boot), None if gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def read_exit_record(folder: Path) -> ExitRecord | None:
    """The launcher's record of how an attempt ended, if it wrote one."""
    try:
        data = read_small(folder / EXIT_FILE)
        record = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    code, sig, detail = record.get("exit_code"), record.get("signal"), record.get("detail")
    lost = bool(record.get("lost", False))
    return ExitRecord(code, sig, detail, lost=lost, end=record.get("end_time"))


def write_exit_record(folder: Path, exit_code: int, detail: str) -> None:
    """Record an attempt that never started (the launcher could not be run)."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {"exit_code": exit_code, "signal": None, "detail": detail, "end_time": None}
    write_atomic(folder / EXIT_FILE, json.dumps(record))


def group_stopped(pgid: int) -> bool:
    """True when every live member of a process group but its leader (the
    launcher, which ignores job-control stops) is stopped: the job has paused."""
    members = [state for pid, state, _, pgrp in process_states() if pgrp == pgid and pid != pgid]
    return bool(members) and all(state in ("T", "t", "Z", "X") for state in members)


def group_alive(pgid: int) -> bool:
    """True while a process group has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(pgrp == pgid for _, _, pgrp in live_processes())


SLURM_BIN = Path(__file__).parent / "slurm_bin"
"""Programs a job written for Slurm calls, first on its ``PATH`` (``srun``)."""


@functools.cache
def slurm_bin() -> list[str]:
    """:data:`SLURM_BIN`, its programs made executable if an install dropped the bit
    (empty, and no ``srun`` or ``scontrol`` for jobs, where they cannot be)."""
    for shim in (SLURM_BIN / "srun", SLURM_BIN / "scontrol"):
        if not os.access(shim, os.X_OK):
            try:
                shim.chmod(0o755)
            except OSError:
                print(f"corral: {shim} is not executable: jobs get no {shim.name}", file=sys.stderr)
                return []
    return [str(SLURM_BIN)]


def job_environment(request: LaunchRequest) -> dict[str, str]:
    """A job's variables: a base (the submitting shell's, or a clean one), its
    identity, its spec's env and its GPUs."""
    ours = str(Path(sys.executable).parent)
    if request.base_env is not None:
        # the user's own PATH first (their conda's `python`, their modules' programs),
        # then the service's Python for corral.train where the user's has none;
        # `srun` is always corral's, which starts an srun line's tasks on the job's node
        env = dict(request.base_env)
        path = env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        env["PATH"] = os.pathsep.join([*slurm_bin(), path, ours])
    else:
        # `python` in a job means the service's own environment (where corral.train is)
        env = inherited(PASSED_ENV)
        path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        env["PATH"] = os.pathsep.join([*slurm_bin(), ours, path])
    env["CORRAL_PYTHON"] = sys.executable
    if request.run_as is not None:
        who = request.run_as
        env.update(HOME=who.home, USER=who.name, LOGNAME=who.name)
    elif request.base_env is None:
        for key in ("HOME", "USER", "LOGNAME"):
            if key in os.environ:
                env[key] = os.environ[key]
    env.update(request.env)
    devices = [g.device for g in request.gpus]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(d for d in devices if d is not None)
    if any(d is not None for d in devices):  # CUDA's numbering, as the driver's (PCI order)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


def cpus_near(gpus: tuple[GpuSlot, ...], slots: list[GpuSlot], count: int) -> list[int]:
    """``count`` CPUs for a job, taken first from its GPUs' share of the machine.

    The machine's CPUs are split evenly among the GPUs of this host (as Slurm
    binds cores to GPUs), so jobs on different GPUs get different CPUs without
    any record of who has which; a job asking for more takes its neighbours'."""
    available = sorted(os.sched_getaffinity(0))
    local = [s.id for s in slots if s.device is not None] or [s.id for s in slots]
    per = len(available) / max(len(local), 1)
    order: list[int] = []
    for gpu in gpus:
        k = local.index(gpu.id) if gpu.id in local else 0
        lo, hi = int(k * per), max(int((k + 1) * per), int(k * per) + 1)
        order += [available[c % len(available)] for c in range(lo, hi)]
    order += available
    out: list[int] = []
    for cpu in order:
        if cpu not in out:
            out.append(cpu)
        if len(out) == min(count, len(available)):
            break
    return out


def confinement(request: LaunchRequest, slots: list[GpuSlot]) -> Confinement:
    """Who an attempt runs as and what it may use, for the launcher."""
    conf = Confinement(
        memory=request.memory,
        cpu_quota=request.cpus,
        cwd=request.cwd,
        output=request.output,
        error=request.error,
        nice=request.nice,
        log_limit=request.log_limit if request.output is None or request.error is None else None,
        pids=request.pids,
        memory_default=None if request.memory else request.memory_default,
    )
    if request.run_as is not None:
        who = request.run_as
        conf.uid, conf.gid, conf.groups = who.uid, who.gid, list(who.groups)
    if request.cpus:
        conf.cpus = cpus_near(request.gpus, slots, request.cpus)
    if any(s.device is not None for s in slots):  # real GPUs: the job opens its own alone
        given = [g.device for g in request.gpus if g.device is not None]
        conf.gpu_devices = ",".join(given) or "none"
    return conf


def launcher_argv(folder: Path, conf: Confinement, argv: list[str]) -> list[str]:
    """The command that runs ``argv`` under the launcher, which records its exit in ``folder``
    (an isolated Python: the launcher may run as root)."""
    return [
        *isolated_python(),
        "-m",
        "corral.runtime.execution.launcher",
        str(folder),
        *conf.options(),
        "--",
        *argv,
    ]


def start_launcher(
    folder: Path, conf: Confinement, argv: list[str], env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """Run ``argv`` under the launcher in its own session (process group), its
    output appended to ``log``; the launcher records the exit in ``folder``.

    The launcher itself gets a fixed environment (it may run as root); the job's
    ``env``, ``argv``, working directory and output files go to it as a private
    file in ``folder``, for the job alone: the launcher's command line, which any
    user sees with ``ps``, names the attempt's folder and its limits only."""
    write_private(folder / ENV_FILE, job_file_text(env, argv, conf))
    public = copy.copy(conf)
    for name in PRIVATE_OPTIONS:
        setattr(public, name, None)
    with open(log, "ab") as out:
        return subprocess.Popen(
            launcher_argv(folder, public, []),
            cwd=folder,
            env=root_environment(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def free_port() -> int:
    """A TCP port free on the loopback interface now (for a job's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_TYPE_TOKEN = re.compile(r"^[A-Z]{1,3}\d{1,4}[A-Z]{0,2}$")


def gpu_type_from_name(name: str) -> str:
    """A short type from a product name.

    'Tesla V100-SXM2-16GB' -> V100, 'NVIDIA H100 80GB HBM3' -> H100.
    """
    tokens = [t for t in re.split(r"[\s\-_]+", name.upper()) if t]
    for token in tokens:
        if token not in ("NVIDIA", "TESLA") and _TYPE_TOKEN.match(token) and "GB" not in token:
            return token
    rest = [t for t in tokens if t not in ("NVIDIA", "TESLA", "GEFORCE")]
    return "".join(rest) or "GPU"


def discover_nvidia() -> list[GpuSlot]:
    """NVIDIA GPUs on this machine (none when nvidia-smi is missing or fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    node = socket.gethostname()
    slots: list[GpuSlot] = []
    for line in out.splitlines():
        if "," not in line:
            continue
        index, name = (part.strip() for part in line.split(",", 1))
        slots.append(GpuSlot(len(slots), node, gpu_type_from_name(name), index))
    return slots


def slots_of(driver: GpuDriver) -> list[GpuSlot]:
    """This machine's GPUs as the driver lists them (device: the driver's index)."""
    node = socket.gethostname()
    return [
        GpuSlot(gpu.index, node, gpu_type_from_name(gpu.name), str(gpu.index))
        for gpu in driver.gpus()
    ]


def virtual_slots(groups: list[GpuGroup]) -> list[GpuSlot]:
    """Virtual GPUs: one node per group (named, or ``local-<type>``)."""
    slots: list[GpuSlot] = []
    for k, group in enumerate(groups):
        node = group.node or f"local-{group.type.lower()}"
        if any(s.node == node for s in slots):
            node = f"{node}-{k}"
        first = len(slots)
        slots.extend([GpuSlot(first + i, node, group.type) for i in range(group.count)])
    return slots


class LocalExecutor(Executor):
    """Processes on this machine, one process group per attempt."""

    def __init__(
        self,
        gpus: str | list[GpuGroup],
        standby: int = 0,
        standby_log: Path | None = None,
        preload: list[str] | None = None,
        driver: GpuDriver | None = None,
        warm: tuple[Path, float] | None = None,
    ) -> None:
        self.driver: GpuDriver | None = None
        """The GPUs' driver (``gpus: auto`` with NVIDIA's management library)."""
        if gpus == "auto":
            self.driver = driver or open_driver()
            self._slots = slots_of(self.driver) if self.driver else discover_nvidia()
            if not self._slots:
                raise CorralError(
                    "gpus: auto found no NVIDIA GPU (nvidia-smi); list virtual GPUs in the "
                    "config instead, e.g. gpus: [{type: V100, count: 2}]"
                )
        else:
            assert isinstance(gpus, list)
            self._slots = virtual_slots(gpus)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._confinement: str | None = None
        self.warm = WarmWorkers(warm[0], warm[1], warm[0] / "workers.log") if warm else None
        """Warm workers per user and GPU (``workers.warm``)."""
        self.started_how: dict[int, str] = {}
        """How each attempt (its launcher's pid) was started, when not plainly: read
        once by the loop for the attempt's start event."""
        self.pool = (
            StandbyPool(standby * len(self._slots), standby_log, preload) if standby else None
        )
        self.keepers: dict[tuple[int, int], RunningKeeper] = {}
        """Round keepers by (job, GPU)."""
        self._ending: list[subprocess.Popen[bytes]] = []
        self._wanted: dict[tuple[int, int], tuple[KeeperRequest, Confinement, dict[str, str]]] = {}
        """Keepers asked for while no standby worker was ready (started by :meth:`tend`)."""

    def slots(self) -> list[GpuSlot]:
        return list(self._slots)

    def gpu_confinement(self) -> str | None:
        if not any(s.device is not None for s in self._slots):
            return None
        if self._confinement is None:
            self._confinement = in_force()
        return self._confinement

    def links(self) -> Links | None:
        return links_of(self.driver.topology()) if self.driver else None

    def gpu_faults(self) -> dict[int, str]:
        return self.driver.faults() if self.driver else {}

    def gpu_usage(self) -> dict[int, GpuUsage]:
        return self.driver.usage() if self.driver else {}

    def gpu_resumed(self, gpus: list[int]) -> None:
        if self.driver:
            for gpu in gpus:
                self.driver.clear(gpu)

    def launch(self, request: LaunchRequest) -> ProcessRef:
        request.dir.mkdir(parents=True, exist_ok=True)
        env = job_environment(request)
        conf = confinement(request, self._slots)
        how: str | None = None
        if request.warm_argv is not None and self.warm is not None:
            started, how = self._launch_warm(request, conf, env)
            if started is not None:
                return started
        if request.warm_argv is not None and self.pool is not None:
            # a keeper first: a task it runs needs no warm worker (its process only asks)
            if request.keeper is not None and self._keeper(request.keeper, conf, env):
                env = {**env, KEEPER_ENV: str(request.keeper.socket)}
            worker = self.pool.take()
            if worker is not None:
                pid = self.pool.assign(
                    worker, request.dir, request.log, conf, env, request.warm_argv
                )
                self._children[pid] = worker.process
                self.pool.refill()
                if how is not None:
                    self.started_how[pid] = how + " (in a standby worker)"
                return ProcessRef(pid, process_start(pid) or "")
            self.pool.refill()
        child = start_launcher(request.dir, conf, request.argv, env, request.log)
        self._children[child.pid] = child
        if how is not None:
            self.started_how[child.pid] = how
        return ProcessRef(child.pid, process_start(child.pid) or "")

    def _launch_warm(
        self, request: LaunchRequest, conf: Confinement, env: dict[str, str]
    ) -> tuple[ProcessRef | None, str]:
        """Start a task job in its user's warm worker on its GPU: the attempt, or None
        and why it starts as before (a worker for next time is started if missing)."""
        assert self.warm is not None and request.warm_argv is not None
        who = request.run_as
        why = WarmWorkers.why_not(
            len(request.gpus),
            request.memory,
            request.keeper is not None,
            who.runs_python if who is not None else True,
        )
        if why is not None:
            return None, f"cold: {why}"
        key = warm_key(who, request.gpus[0])
        sock = self.warm.take(key)
        if sock is None:
            if self.warm.running(key):
                return None, "cold: this user's warm worker on this GPU is warming up"
            most = request.warm_most
            if most is not None and self.warm.count(key[0]) >= most:
                return None, "cold: this user has warm workers on as many GPUs as they may hold"
            self._start_warm(key, who)
            return None, "cold: this user's warm worker on this GPU is warming up"
        argv = [sys.executable, "-m", "corral.runtime.execution.warm_client", str(sock)]
        child = start_launcher(
            request.dir, conf, [*argv, "--", *request.warm_argv], env, request.log
        )
        self._children[child.pid] = child
        self.warm.claimed(key, child.pid)
        self.started_how[child.pid] = "warm: in this user's warm worker on this GPU"
        return ProcessRef(child.pid, process_start(child.pid) or ""), ""

    def warm_up(self, run_as: RunAs | None, slot: GpuSlot, most: int | None = None) -> bool:
        if self.warm is None:
            return False
        key = warm_key(run_as, slot)
        if not self.warm.running(key):
            if most is not None and self.warm.count(key[0]) >= most:
                return False
            self._start_warm(key, run_as)
        return True

    def _start_warm(self, key: tuple[int | None, str], who: RunAs | None) -> None:
        assert self.warm is not None
        if who is not None:
            self.warm.start(key, who.uid, who.gid, list(who.groups))
        else:
            self.warm.start(key, None, None, [])

    def _keeper(self, want: KeeperRequest, conf: Confinement, env: dict[str, str]) -> bool:
        """Have a keeper for the task's job on its GPU: True when one runs or was started
        (it starts in a standby worker, as the job's user with its limits and GPU)."""
        key = (want.job, want.gpu)
        running = self.keepers.get(key)
        if running is not None and running.process.poll() is None:
            running.used = time.monotonic()
            return True
        assert self.pool is not None
        worker = self.pool.take()
        if worker is None:  # for the job's next task here
            self._wanted[key] = (want, conf, env)
            return False
        self._start_keeper(worker, want, conf, env)
        return True

    def tend(self) -> None:
        self._reap()
        if self.warm is not None:
            self.warm.tend()
        started = False
        for want, conf, env in list(self._wanted.values()):
            worker = self.pool.take() if self.pool is not None else None
            if worker is None:
                break
            self._start_keeper(worker, want, conf, env)  # (no longer wanted)
            started = True
        if started and self.pool is not None:
            self.pool.refill()

    def _reap(self) -> None:
        """Reap every launcher (or worker) of ours that has ended, at each pass: one
        whose attempt ended by another way than :meth:`poll` (set aside, stopped at a
        restart's recovery) was once left a zombie for as long as the service ran."""
        for pid, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[pid]
        self._ending = [p for p in self._ending if p.poll() is None]

    def _start_keeper(
        self, worker: Idle, want: KeeperRequest, conf: Confinement, env: dict[str, str]
    ) -> None:
        assert self.pool is not None
        key = (want.job, want.gpu)
        self._wanted.pop(key, None)
        self._evict(want.gpu, want.limit - 1)
        shutil.rmtree(want.dir, ignore_errors=True)  # an earlier keeper's record
        want.dir.mkdir(parents=True, exist_ok=True)
        own = {k: v for k, v in env.items() if k != "CORRAL_JOB_TOKEN"}  # not the task's
        self.pool.assign(worker, want.dir, want.dir / "log.txt", conf, own, want.argv, True)
        self.keepers[key] = RunningKeeper(worker.process, time.monotonic())

    def _evict(self, gpu: int, keep: int) -> None:
        """End the least recently used keepers on ``gpu`` beyond ``keep``."""
        on_gpu = [k for k in self.keepers if k[1] == gpu]
        on_gpu.sort(key=lambda k: self.keepers[k].used)
        for key in on_gpu[: max(0, len(on_gpu) - keep)]:
            self._end_keeper(key, signal.SIGTERM)

    def _end_keeper(self, key: tuple[int, int], sig: int) -> None:
        """SIGTERM: it ends after the task it runs, if any; its launcher is reaped later."""
        keeper = self.keepers.pop(key)
        if keeper.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(keeper.process.pid, sig)
            self._ending.append(keeper.process)
        self._ending = [p for p in self._ending if p.poll() is None]  # reap the ended

    def release_keepers(self, job: int) -> None:
        for key in [k for k in self._wanted if k[0] == job]:
            del self._wanted[key]
        for key in [k for k in self.keepers if k[0] == job]:
            self._end_keeper(key, signal.SIGTERM)

    def close(self, jobs_running: bool) -> None:
        for key in list(self.keepers):  # (they would die with the service anyway)
            self._end_keeper(key, signal.SIGKILL)
        if self.pool is not None:
            self.pool.close()
        if self.warm is not None:
            self.warm.close()
        if self.driver is not None:
            self.driver.close()

    def signal(self, ref: ProcessRef, sig: int) -> None:
        if not self._same(ref):
            return
        if sig == signal.SIGKILL:
            # the job's processes, not its launcher: the launcher then kills whatever
            # else the job left (a setsid'd daemon is outside the group) and records
            # the end only once none is left; killed itself, it could do neither
            for pid in job_processes(ref.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ref.pid, sig)

    def warn(self, ref: ProcessRef, sig: int, whom: str) -> bool:
        if not self._same(ref):
            return False
        mine = job_processes(ref.pid)
        main = {pid for pid, ppid, pgrp in live_processes() if ppid == ref.pid == pgrp} & mine
        chosen = {"batch": main, "steps": mine - main}.get(whom, mine)
        for pid in chosen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return True

    def renice(self, ref: ProcessRef, nice: int) -> bool:
        if not self._same(ref):
            return False
        try:
            os.setpriority(os.PRIO_PGRP, ref.pid, nice)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def poll(self, ref: ProcessRef, folder: Path) -> ExitRecord | None:
        child = self._children.get(ref.pid)
        if child is not None and child.poll() is not None:  # reap our own children
            del self._children[ref.pid]
        if self._same(ref):
            return None
        if group_alive(ref.pid):  # the launcher died (kill -9) but the job's processes live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(ref.pid, signal.SIGKILL)  # its GPUs are released only once they end
            return None
        if self.warm is not None:
            self.warm.release(ref.pid)
        return read_exit_record(folder) or ExitRecord(
            None, None, "the process vanished without an exit record", lost=True
        )

    def adopt(self, ref: ProcessRef) -> bool:
        return self._same(ref)

    def paused(self, ref: ProcessRef) -> bool:
        return self._same(ref) and group_stopped(ref.pid)

    def pid_from(self, folder: Path) -> ProcessRef | None:
        try:
            pid = int(read_small(folder / PID_FILE, 64) or b"")
        except ValueError:
            return None
        start = process_start(pid)
        return ProcessRef(pid, start) if start is not None else None

    def _same(self, ref: ProcessRef) -> bool:
        start = process_start(ref.pid)
        return start is not None and (not ref.pid_start or start == ref.pid_start)
