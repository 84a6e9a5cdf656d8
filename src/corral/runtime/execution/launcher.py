"""The small parent of every job process: confines the job and records how it ended.

The service starts ``python -m corral.runtime.execution.launcher DIR [OPTIONS] -- argv...``
in a new session (its own process group) instead of the job itself. The
launcher runs the argv (directly, no shell), waits for it and writes
``DIR/exit.json`` atomically. The exit status therefore survives the service:
a service killed with ``kill -9`` and restarted reads it from the file, which
a process that is not the job's parent could not otherwise learn. SIGTERM and
SIGINT sent to the group reach the job; the launcher ignores them and keeps
waiting.

The launcher also keeps the job inside its allocation:

- **Nothing outlives the job.** The launcher is a child subreaper: whatever
  the job leaves behind (``sleep 47 &``, a daemon that called ``setsid``) is
  re-parented to it, and once the job's main process ends every remaining
  descendant, process-group member and cgroup member is killed and reaped
  *before* the exit record is written, so the GPUs are never released while
  a process of the job still runs. The job gets ``SIGKILL`` if the launcher
  itself dies (``PR_SET_PDEATHSIG``), so it cannot overlap the next attempt.
  With ``--parent PID`` the launcher ends the job, and everything the job
  left, when that process dies (a Ray rank's actor: nothing could report or
  stop a rank whose actor is gone, and its job is started again elsewhere).
- **Identity.** ``--uid/--gid/--groups`` run the job as another Unix user
  (the service runs as root; the launcher stays root to write the record).
- **Privilege separation.** A launcher run as root must never be steered by
  the job's user. It is started in Python's isolated mode (``-I``: no
  ``PYTHON*`` variables, no user site, not the current folder on its path)
  with a fixed environment of its own (:func:`root_environment`), never the
  job's; the job's variables reach it as a private file in the attempt's
  folder (``job-env.json``, which the service wrote and only root can read),
  read and removed before the job starts and handed to the job alone. The
  job's working directory and output file are entered and opened in the
  job's process after it has taken the job's identity, so a link or a swap
  there gets the user's rights, never root's.
- **CPUs and memory** (Slurm's ``--cpus-per-task`` and ``--mem``): with cgroups
  v2 delegated to the service, a cgroup per attempt with ``cpu.max`` and
  ``memory.max``; otherwise the job is pinned to its CPUs
  (``sched_setaffinity``) and its data segment capped (``RLIMIT_DATA``, which
  counts private writable mappings but not the large address-space
  reservations CUDA makes).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from corral import wire_json

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: each job's start)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from corral.runtime.execution.gpu_devices import Confined

EXIT_FILE = "exit.json"
PID_FILE = "launcher.pid"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals for the job, never the launcher: it waits on and records the job's end."""
ENV_FILE = "job-env.json"
"""The job itself (its program and arguments, environment, working directory and
output files), written by the service for the launcher (mode 0600, root's when
the service is root): nothing of a job is on a root process's command line,
which every user of the host can read with ``ps`` (a ``--password=...`` among
its arguments, a private path)."""
PRIVATE_OPTIONS = ("cwd", "output", "error")
"""Options handed over in :data:`ENV_FILE`, never on the launcher's command line."""
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ADMIN_ENV = ("LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "TMPDIR")
"""The service's own variables a root-run helper keeps (set by whoever started the
service, never by a job): locale, time zone, the libraries its Python needs."""
OOM_NOTE = "out of memory: the kernel killed it at its memory limit"
"""What the exit record says when the job's cgroup counted an out-of-memory kill (the
job, killed by SIGKILL, says nothing itself): the service reads it as ``oom``."""
NOT_STARTED = 127
"""Exit code when the program could not be started (as a shell reports it)."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PARENT_DIED = signal.SIGUSR2
"""The launcher's own signal that its ``--parent`` died (``PR_SET_PDEATHSIG``)."""
_CLEANUP_SECONDS = 10.0


def inherited(names: tuple[str, ...]) -> dict[str, str]:
    """The service's own variables among ``names``, with its locale (``LC_*``)."""
    return {k: v for k, v in os.environ.items() if k in names or k.startswith("LC_")}


def root_environment() -> dict[str, str]:
    """The environment of a helper that runs as root before a job drops its privileges
    (launcher, standby worker, round keeper's worker): a fixed ``PATH`` and the
    service's locale and library settings, nothing a job's user could have set."""
    return {**inherited(ADMIN_ENV), "PATH": ROOT_PATH}


def isolated_python() -> list[str]:
    """This Python in isolated mode (``-I``), for a helper run as root: it reads no
    ``PYTHON*`` variable, no user site and nothing from the current folder."""
    return [sys.executable, "-I"]


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, never through a link at ``path``."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def job_file_text(
    env: dict[str, str], argv: list[str] | None = None, conf: Confinement | None = None
) -> str:
    """What :data:`ENV_FILE` holds: the job's environment, and its argv and private
    options when they are not on the launcher's command line."""
    data: dict[str, object] = {"env": env}
    if argv is not None:
        data["argv"] = argv
    if conf is not None:
        data.update({name: getattr(conf, name) for name in PRIVATE_OPTIONS})
    return wire_json.dumps(data)


def take_job_file(folder: Path) -> dict[str, object] | None:
    """What ``folder/job-env.json`` holds (see :func:`job_file_text`), removing the
    file (it holds the attempt's token); None when there is none or it is not one."""
    path = folder / ENV_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, encoding="utf-8") as handle:
        data = wire_json.loads(handle.read())
    path.unlink(missing_ok=True)
    if not isinstance(data, dict) or not isinstance(data.get("env"), dict):
        return None
    return data


def take_job_env(folder: Path) -> dict[str, str] | None:
    """The job's environment from ``folder/job-env.json``, removing the file; None when
    there is none."""
    data = take_job_file(folder)
    if data is None:
        return None
    env = data["env"]
    assert isinstance(env, dict)
    return {str(k): str(v) for k, v in env.items()}


def write_atomic(path: Path, text: str) -> None:
    """Write a file so readers see the old content or the new, never a part (and no
    temporary file left behind when the write fails: a full disk)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


RESERVE_FILE = ".exit.reserve"
"""Room for the exit record, taken when the attempt starts: a job that fills the
disk cannot leave its launcher without the few bytes that say how it ended (the
service then took the attempt for a lost node, requeued it without counting a
retry, and drained the node after three)."""
RECORD_ROOM = 4096


def reserve_record(folder: Path) -> None:
    """Take :data:`RECORD_ROOM` bytes on the attempt's disk for its exit record
    (written, not sparse, so the blocks are the file's)."""
    with contextlib.suppress(OSError):  # (already full: the record is tried as ever)
        fd = os.open(folder / RESERVE_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b" " * RECORD_ROOM)
            os.fsync(fd)
        finally:
            os.close(fd)


def write_record(folder: Path, record: dict[str, object]) -> None:
    """Write the exit record; on a full disk, into the room :func:`reserve_record`
    took (padded with spaces, which JSON allows), moved into place, with a note of
    the full disk in its detail."""
    try:
        write_atomic(folder / EXIT_FILE, wire_json.dumps(record))
    except OSError as exc:
        reserve = folder / RESERVE_FILE
        if not reserve.exists():
            raise
        note = f"the disk holding {folder} was full ({exc.strerror or exc})"
        base = str(record.get("detail") or "")
        record["detail"] = f"{base}; {note}" if base else note
        data = wire_json.dumps(record).encode()
        if len(data) > RECORD_ROOM:  # (a detail of kilobytes: its start kept, and the note)
            record["detail"] = f"{base[: RECORD_ROOM // 2]} ...; {note}"
            data = wire_json.dumps(record).encode()
        fd = os.open(reserve, os.O_WRONLY)
        try:
            os.write(fd, data.ljust(RECORD_ROOM))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(reserve, folder / EXIT_FILE)
        return
    with contextlib.suppress(OSError):
        (folder / RESERVE_FILE).unlink()


class Confinement:
    """Who the job runs as and what it may use (parsed from the launcher's options).

    A plain class, not a dataclass: ``dataclasses`` (with the ``inspect`` it
    imports) was a fifth of the launcher's start, paid by every job."""

    __slots__ = (
        "cpu_quota",
        "cpus",
        "cwd",
        "device_dir",
        "error",
        "gid",
        "gpu_devices",
        "groups",
        "log_limit",
        "memory",
        "memory_default",
        "nice",
        "output",
        "parent",
        "pids",
        "uid",
    )

    def __init__(
        self,
        uid: int | None = None,
        gid: int | None = None,
        groups: list[int] | None = None,
        cpus: list[int] | None = None,
        cpu_quota: int | None = None,
        memory: int | None = None,
        cwd: str | None = None,
        output: str | None = None,
        error: str | None = None,
        nice: int | None = None,
        log_limit: int | None = None,
        gpu_devices: str | None = None,
        device_dir: str | None = None,
        parent: int | None = None,
        pids: int | None = None,
        memory_default: int | None = None,
    ) -> None:
        self.uid, self.gid = uid, gid
        self.pids = pids
        self.memory_default = memory_default
        """Bytes of memory a job that asked for none may use (its share of the host, by
        its GPUs): held by a cgroup where there is one, never by an rlimit (which
        counts address space a job may well reserve)."""
        """Processes and threads the job may have at once (cgroup v2 ``pids.max``, where
        the controller is there: a default limit, so without it the job still runs)."""
        self.groups: list[int] = list(groups or [])
        self.cpus: list[int] = list(cpus or [])
        """CPU ids the job may run on (empty: any)."""
        self.cpu_quota = cpu_quota
        """CPUs' worth of time per period (cgroup ``cpu.max``)."""
        self.memory = memory
        """Bytes."""
        self.cwd = cwd
        """Working directory, entered as the job's user (so it must be theirs to enter)."""
        self.output = output
        """File the job's output goes to, opened as the job's user (Slurm's --output)."""
        self.error = error
        """File the job's standard error goes to, apart from its output (Slurm's --error)."""
        self.nice = nice
        """Niceness added to the job's processes (opportunistic jobs run at 19)."""
        self.log_limit = log_limit
        """Bytes of the job's output the log (the launcher's own output) keeps: the job
        writes into a pipe the launcher relays, cut at this size (None: the job
        writes to the log itself, without limit)."""
        self.gpu_devices = gpu_devices
        """The GPUs (indices, comma-separated, or ``none``) whose device nodes the job
        may open (see :mod:`corral.runtime.execution.gpu_devices`); None: not confined
        (virtual GPUs, no NVIDIA nodes)."""
        self.device_dir = device_dir
        """Where the GPU device nodes are (default ``/dev``; tests give fake ones)."""
        self.parent = parent
        """The process the job may not outlive (the launcher's parent): when it dies the
        job is killed, with what it left, as at the job's end (None: the job outlives
        the launcher's parent, as it must outlive a service killed and restarted)."""

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in _OPTION_NAMES)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Confinement) and self._values() == other._values()

    # (unhashable: mutable, as a dataclass is)
    __hash__ = None  # type: ignore[assignment]

    def as_dict(self) -> dict[str, object]:
        """Each option's value by name (what ``Confinement(**...)`` takes back)."""
        return {name: getattr(self, name) for name in _OPTION_NAMES}

    def __repr__(self) -> str:
        given = (f"{name}={getattr(self, name)!r}" for name in _OPTION_NAMES)
        return f"Confinement({', '.join(given)})"

    def options(self) -> list[str]:
        """The launcher's command-line options that give this confinement."""
        out: list[str] = []
        for name in _OPTION_NAMES:
            value = getattr(self, name)
            if value is None or value == []:
                continue
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            out += [_option(name), text]
        return out


_OPTION_NAMES = (
    "uid",
    "gid",
    "groups",
    "cpus",
    "cpu_quota",
    "memory",
    "cwd",
    "output",
    "error",
    "nice",
    "log_limit",
    "gpu_devices",
    "device_dir",
    "parent",
    "pids",
    "memory_default",
)
_LISTS = {"groups", "cpus"}
_TEXTS = {"cwd", "output", "error", "gpu_devices", "device_dir"}


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def parse(args: list[str]) -> tuple[Path, Confinement, list[str]] | None:
    """DIR, confinement and argv from the command line; None when malformed."""
    if "--" not in args or args.index("--") < 1:
        return None
    cut = args.index("--")
    head, argv = args[:cut], args[cut + 1 :]
    if len(head) % 2 != 1:  # (no argv: it is in the job's private file)
        return None
    conf = Confinement()
    by_option = {_option(name): name for name in _OPTION_NAMES}
    try:
        for key, text in zip(head[1::2], head[2::2], strict=True):
            name = by_option.get(key)
            if name is None:
                return None
            value: object = text
            if name in _LISTS:
                value = [int(x) for x in text.split(",") if x]
            elif name not in _TEXTS:
                value = int(text)
            setattr(conf, name, value)
    except ValueError:
        return None
    return Path(head[0]), conf, argv


def main(args: list[str]) -> int:
    parsed = parse(args)
    if parsed is None:
        print(
            "usage: python -m corral.runtime.execution.launcher DIR "
            "[--uid N --gid N --groups N,..] [--cpus N,..] [--cpu-quota N] [--memory BYTES] "
            "[--cwd DIR] [--output FILE] [--error FILE] [--nice N] [--log-limit BYTES] "
            "[--gpu-devices N,..|none] [--device-dir DIR] [--parent PID] -- PROGRAM [ARGS...]",
            file=sys.stderr,
        )
        return 2
    folder, conf, argv = parsed
    job = take_job_file(folder)
    env: dict[str, str] | None = None
    if job is not None:
        given, private_argv = job["env"], job.get("argv")
        env = {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else None
        if not argv and isinstance(private_argv, list):
            argv = [str(a) for a in private_argv]
            for name in PRIVATE_OPTIONS:
                value = job.get(name)
                setattr(conf, name, None if value is None else str(value))
    if not argv:
        print(f"corral launcher: no program to run (none given, none in {ENV_FILE})",
              file=sys.stderr)  # fmt: skip
        return 2
    started: list[subprocess.Popen[bytes]] = []  # kept: a dropped Popen may reap our child

    relay = LogRelay(conf.log_limit) if conf.log_limit else None

    def start(child_setup: Callable[[], None]) -> int:
        child = subprocess.Popen(
            argv,
            env=env,
            restore_signals=True,
            preexec_fn=child_setup,
            user=conf.uid,
            group=conf.gid,
            extra_groups=conf.groups if conf.uid is not None else None,
            stdout=None if relay is None else relay.write_fd,
            stderr=None if relay is None else subprocess.STDOUT,
        )
        started.append(child)
        if relay is not None:
            relay.start()
        return child.pid

    return supervise(
        folder, conf, start, what=argv[0], before_record=relay.finish if relay else None
    )


class LogRelay:
    """The job's output, copied from a pipe into the log (the launcher's standard
    output) up to a limit: one job's output cannot fill the disk the service's
    store and every other job's log live on. Past the limit a line says where
    the log was cut, and the rest is read and discarded (the job never blocks on
    a full pipe)."""

    def __init__(self, limit: int, out: int = 1) -> None:
        self.limit, self.out = limit, out
        self.read_fd, self.write_fd = os.pipe()
        self.written = 0
        self.failed: str | None = None
        """Why the log stopped being written (a full disk), if it did."""
        self.thread = threading.Thread(target=self._relay, daemon=True)

    def start(self) -> None:
        """The job has its end of the pipe: close ours, so the relay sees its end."""
        os.close(self.write_fd)
        self.thread.start()

    def _relay(self) -> None:
        cut = False
        while chunk := os.read(self.read_fd, 1 << 16):
            keep = chunk[: max(self.limit - self.written, 0)]
            if keep:
                self._write(keep)
                self.written += len(keep)
            if len(keep) < len(chunk) and not cut:
                cut = True
                self._write(
                    f"\ncorral: the log was cut here at {self.limit} bytes (log_limit); "
                    "the job's further output is discarded\n".encode()
                )
        os.close(self.read_fd)

    def _write(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.out, view) :]
        except OSError as exc:  # a full disk: the job goes on, its log is short
            self.failed = self.failed or f"its log could not be written ({exc.strerror or exc})"

    def finish(self) -> str | None:
        """Wait (briefly) for the relay to copy what the job wrote last (nothing to
        wait for when the job never started); why the log was cut short, if it was."""
        if self.thread.is_alive() or self.thread.ident is not None:
            self.thread.join(5.0)
        else:
            os.close(self.write_fd)
            os.close(self.read_fd)
        return self.failed


def supervise(
    folder: Path,
    conf: Confinement,
    start: Callable[[Callable[[], None]], int],
    what: str = "the job",
    before_record: Callable[[], str | None] | None = None,
) -> int:
    """Be an attempt's launcher: ``start(child_setup)`` starts the job's process (calling
    ``child_setup`` in it once its identity is set) and returns its pid; then wait for
    it, kill what it left and write the exit record. Returns the launcher's exit code."""
    write_atomic(folder / PID_FILE, str(os.getpid()))
    reserve_record(folder)
    early: list[int] = []  # stop signals sent to the group before the job's process was in it
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, _frame: early.append(signum))
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    parent = ParentWatch(conf.parent)
    cgroup = _cgroup(folder, conf)
    v1 = _v1_limits(folder, conf) if cgroup is None else []
    rlimits = cgroup is None and not any(controller == "memory" for _, controller in v1)
    confined = _confine_gpus(folder, conf, cgroup)
    record: dict[str, object] = {"exit_code": None, "signal": None, "detail": None}
    me = os.getpid()
    # the job's process says on this pipe why it could not start (its output file or
    # working directory refused to its user); the pipe closes unwritten when it runs
    said, tell = os.pipe()
    try:
        if parent.died:
            raise OSError(f"its launcher's parent (process {conf.parent}) ended")
        pid = start(lambda: _in_child(conf, rlimits, me, tell))
        parent.job_started(pid)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"corral: cannot start {what!r}: {_why(exc)}", file=sys.stderr)
        record.update(exit_code=NOT_STARTED, detail=f"cannot start {what!r}: {_why(exc)}")
    else:
        os.close(tell)
        tell = -1
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        _pass_on(early, pid)
        code = _wait(pid)
        if code < 0:
            record["signal"] = -code
        else:
            record["exit_code"] = code
        why = _read_all(said)
        if why and code == NOT_STARTED:
            record["detail"] = why
    finally:
        if tell >= 0:
            os.close(tell)
        os.close(said)
    left = _kill_leftovers(cgroup)
    if left:
        record["detail"] = f"killed {left} process(es) the job left running"
    if parent.died:
        record.update(lost=True, detail="killed: the launcher's parent (a Ray rank's actor) ended")
    if _oom_killed(cgroup, v1):
        record["detail"] = f"{record['detail']}; {OOM_NOTE}" if record["detail"] else OOM_NOTE
    _drop_cgroup(cgroup)
    for group, controller in v1:
        _drop_v1(group, controller)
    if confined is not None:
        confined.release()
    note = before_record() if before_record is not None else None
    if note:  # (the log could not be written: a full disk, named in the attempt's end)
        record["detail"] = f"{record['detail']}; {note}" if record["detail"] else note
    record["end_time"] = time.time()
    write_record(folder, record)
    ended, killed_by = record["exit_code"], record["signal"]
    if isinstance(ended, int):
        return ended
    return 128 + (killed_by if isinstance(killed_by, int) else 0)


def _pass_on(early: list[int], pid: int) -> None:
    """Give the job's process the stop signals its group got before it existed.

    The service signals the attempt's group; one sent while the launcher was still
    starting the job reached the launcher alone, which ignores it, and the job would
    run on as if never asked to stop (a suspend or cancel lost, the attempt recorded
    as a success). A signal that came while the job's process was being forked may
    reach it twice: the job dies of the first, before it can set a handler."""
    for sig in dict.fromkeys(early):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _read_all(fd: int) -> str:
    """What is in the pipe now, without waiting (a process the job left may still hold
    its other end)."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace").strip()


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


class ParentWatch:
    """Kills the job when the launcher's ``--parent`` dies: its main process at once,
    and the rest at the launcher's usual end (which kills whatever the job left)."""

    def __init__(self, parent: int | None) -> None:
        self.died = False
        self.job: int | None = None
        self.parent = parent
        if parent is None:
            return
        signal.signal(PARENT_DIED, self._parent_died)
        prctl(PR_SET_PDEATHSIG, PARENT_DIED)
        if os.getppid() != parent:  # it died before the line above took effect
            self.died = True

    def job_started(self, pid: int) -> None:
        self.job = pid
        if self.died:  # (it died while the job was being started)
            self._kill()

    def _parent_died(self, _signum: int, _frame: object) -> None:
        if os.getppid() == self.parent:  # (the signal sent by someone else: ignored)
            return
        self.died = True
        self._kill()

    def _kill(self) -> None:
        if self.job is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.job, signal.SIGKILL)


def _wait(pid: int) -> int:
    """The main process's status (as a subreaper, orphans are reaped later, not here)."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0
        return os.waitstatus_to_exitcode(status)


SERVICE_OOM_SCORE_ADJ = -500
"""The service's (and so its launchers', which inherit it) standing with the kernel's
out-of-memory killer: well below a job's, so a greedy job is killed before the
service that schedules everyone's (lowering it needs root; a user's service keeps 0)."""
JOB_OOM_SCORE_ADJ = 500
"""A job's own: raised (anyone may), so its memory is reclaimed first."""


def set_oom_score_adj(value: int) -> bool:
    """Set this process's ``oom_score_adj``; False where it cannot (not Linux, or a
    value below the present one without root)."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as handle:
            handle.write(str(value))
    except OSError:
        return False
    return True


def _in_child(conf: Confinement, rlimits: bool, launcher: int, tell: int = -1) -> None:
    """In the job's process, after its user and groups are set, before it runs.
    ``tell``: where to say why the job cannot start (the launcher's pipe)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the credential change, which clears it
    if os.getppid() != launcher:  # the launcher died before the line above took effect
        os._exit(NOT_STARTED)
    set_oom_score_adj(JOB_OOM_SCORE_ADJ)
    places = (("working directory", conf.cwd), ("output", conf.output), ("error", conf.error))
    for what, path in places:
        if path is None:
            continue
        try:
            if what in ("output", "error"):  # error after output: it takes stderr back
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                if what == "output":
                    os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
            else:
                os.chdir(path)
        except OSError as exc:
            why = f"cannot use {what} {path}: {exc.strerror}"
            os.write(2, f"corral: {why}\n".encode())
            if tell >= 0:
                with contextlib.suppress(OSError):
                    os.write(tell, why.encode())
            os._exit(NOT_STARTED)
    if conf.cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, conf.cpus)
    if conf.nice:
        with contextlib.suppress(OSError):
            os.nice(conf.nice)
    if rlimits and conf.memory:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_DATA, (conf.memory, conf.memory))


def prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def process_states() -> Iterator[tuple[int, str, int, int]]:
    """(pid, state letter, parent pid, process group) of every process, from /proc
    (processes that end while it is read are skipped)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:  # (os calls: a file object for each of hundreds of processes costs more)
            fd = os.open(f"{entry.path}/stat", os.O_RDONLY)
            try:
                text = os.read(fd, 4096).decode("utf-8", "replace")
            finally:
                os.close(fd)
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        yield int(entry.name), fields[0], int(fields[1]), int(fields[2])


def live_processes() -> Iterator[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every process that is not a zombie."""
    for pid, state, ppid, pgrp in process_states():
        if state not in ("Z", "X"):
            yield pid, ppid, pgrp


def job_processes(launcher: int) -> set[int]:
    """Every live process of the job ``launcher`` runs: its process group (when the
    launcher leads it, as the service starts it) and all its descendants, however
    deep (a process that called ``setsid`` is still one: as a subreaper the
    launcher inherits whatever its parent leaves), the launcher excepted."""
    children: dict[int, list[int]] = {}
    group: set[int] = set()
    for pid, ppid, pgrp in live_processes():
        children.setdefault(ppid, []).append(pid)
        if pgrp == launcher:
            group.add(pid)
    out: set[int] = set()
    stack = [launcher, *group]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in out:
                out.add(child)
                stack.append(child)
    return (out | group) - {launcher}


def _kill_leftovers(cgroup: Path | None) -> int:
    """Kill and reap every process the job left; how many there were.

    Each round stops them all first (``SIGSTOP``: a stopped process cannot fork, so
    a job that re-forks when its parent dies cannot outrun the kill), looks
    again until no new one appears, then kills them. It never gives up: the exit
    record, and with it the job's end and the release of its GPUs, waits until
    none is left (a line in the attempt's log every ``_CLEANUP_SECONDS`` says so).

    A process is signalled through a pidfd taken when it was found (so a pid freed
    and handed to someone else's process is never hit, though the launcher is
    root), and only while it is still among the job's; those gone are forgotten
    each round."""
    me = os.getpid()
    found: dict[int, int | None] = {}  # pid -> its pidfd (None: none to be had)
    count = 0
    _cgroup_kill(cgroup)
    began = warned = time.monotonic()
    try:
        while alive := job_processes(me) | _cgroup_members(cgroup):
            for pid in set(found) - alive:  # gone (reaped): its pid may be another's now
                _close(found.pop(pid))
            while alive:  # freeze, then look for what was forked meanwhile
                for pid in alive:
                    if pid not in found:
                        found[pid] = _pidfd(pid)
                        count += 1
                    _signal(pid, found[pid], signal.SIGSTOP)
                alive = (job_processes(me) | _cgroup_members(cgroup)) - set(found)
            for pid, handle in found.items():
                _signal(pid, handle, signal.SIGKILL)
            _reap()
            time.sleep(0.02)
            if time.monotonic() - warned >= _CLEANUP_SECONDS:
                warned = time.monotonic()
                left = len(job_processes(me) | _cgroup_members(cgroup))
                print(
                    f"corral: {left} process(es) of the job still alive after "
                    f"{warned - began:.0f}s of killing; the attempt ends when they are gone",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for handle in found.values():
            _close(handle)
    _reap()
    return count


def _pidfd(pid: int) -> int | None:
    """A handle on the process ``pid`` is now (None: gone, or no pidfds here)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _signal(pid: int, handle: int | None, sig: int) -> None:
    """Signal the process found as ``pid``: through its pidfd where there is one (the
    very process, or nothing), else by its pid, just seen among the job's."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if handle is not None:
            signal.pidfd_send_signal(handle, sig)
        else:
            os.kill(pid, sig)


def _close(handle: int | None) -> None:
    if handle is not None:
        with contextlib.suppress(OSError):
            os.close(handle)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ------------------------------------------------------------- cgroups v2
def cgroup_name(folder: Path, pid: int) -> str:
    """The name of the cgroups the launcher (or warm worker) of ``folder`` with process
    id ``pid`` makes for itself: its v2 group, and its v1 devices group where v2's
    device program cannot be used."""
    return f"{folder.parent.name}-{folder.name}-{pid}"


def cgroup_paths(folder: Path, pid: int) -> tuple[Path, Path]:
    """The v2 group and the v1 devices group that process may have made, to remove
    once it has ended (its own, made as root, are not its to remove as a user)."""
    from corral.runtime.execution.gpu_devices import v1_group

    name = cgroup_name(folder, pid)
    return CGROUP_ROOT / "corral" / name, v1_group(name)


def _cgroup(folder: Path, conf: Confinement) -> Path | None:
    """A cgroup v2 for this attempt, the launcher moved into it, with the job's limits
    where it asked for any: every attempt gets one where cgroups v2 is delegated
    to the service, so its processes are ended together (``cgroup.kill``).
    None elsewhere (the job then gets rlimits; its processes are found by the tree
    under the launcher)."""
    base = CGROUP_ROOT / "corral"
    try:
        controllers = set((CGROUP_ROOT / "cgroup.controllers").read_text().split())
        limits = {"memory", "cpu"} <= controllers
        if (conf.memory or conf.cpu_quota) and not limits:
            return None
        base.mkdir(exist_ok=True)
        if limits:
            (CGROUP_ROOT / "cgroup.subtree_control").write_text("+memory +cpu")
            (base / "cgroup.subtree_control").write_text("+memory +cpu")
        pids = conf.pids is not None and "pids" in controllers
        if pids:
            with contextlib.suppress(OSError):
                (CGROUP_ROOT / "cgroup.subtree_control").write_text("+pids")
                (base / "cgroup.subtree_control").write_text("+pids")
        group = base / cgroup_name(folder, os.getpid())
        group.mkdir()
        if pids:
            with contextlib.suppress(OSError):  # (a default: the job runs without it)
                (group / "pids.max").write_text(str(conf.pids))
        if conf.memory or (conf.memory_default and limits):
            (group / "memory.max").write_text(str(conf.memory or conf.memory_default))
        if conf.cpu_quota:
            (group / "cpu.max").write_text(f"{conf.cpu_quota * 100000} 100000")
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return None
    return group


def _confine_gpus(folder: Path, conf: Confinement, cgroup: Path | None) -> Confined | None:
    """Confine the launcher, and so the job, to its GPUs' device nodes, and say how in
    the log (None: not asked, the GPUs are virtual)."""
    if conf.gpu_devices is None:
        return None
    allowed = [int(k) for k in conf.gpu_devices.split(",") if k.strip().isdigit()]
    from corral.runtime.execution.gpu_devices import DEV, confine  # (confined jobs only)

    dev = Path(conf.device_dir) if conf.device_dir else DEV
    confined = confine(cgroup_name(folder, os.getpid()), allowed, cgroup, dev)
    print(f"corral: GPU confinement: {confined.how}", file=sys.stderr, flush=True)
    return confined


def _cgroup_kill(cgroup: Path | None) -> None:
    """Kill every process of the attempt's cgroup but the launcher, at once, where the
    kernel offers ``cgroup.kill`` (5.14+): the launcher first moves itself out."""
    if cgroup is None or not (cgroup / "cgroup.kill").exists():
        return
    with contextlib.suppress(OSError):
        (CGROUP_ROOT / "cgroup.procs").write_text(str(os.getpid()))
        (cgroup / "cgroup.kill").write_text("1")


def _cgroup_members(cgroup: Path | None) -> set[int]:
    if cgroup is None:
        return set()
    try:
        pids = {int(x) for x in (cgroup / "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return set()
    return pids - {os.getpid()}


def _v1_limits(folder: Path, conf: Confinement) -> list[tuple[Path, str]]:
    """On a cgroup v1 host (the service root): groups of the attempt's own, the launcher
    in them (the job then too), for its process limit (``pids``) and its memory
    (``memory``: what it asked, else its default share) where those controllers are
    mounted; (group, controller) of each made."""
    wanted = {"pids": ("pids.max", conf.pids),
              "memory": ("memory.limit_in_bytes", conf.memory or conf.memory_default)}  # fmt: skip
    made: list[tuple[Path, str]] = []
    for controller, (knob, value) in wanted.items():
        root = CGROUP_ROOT / controller
        if value is None or not (root / "cgroup.procs").exists():
            continue
        group = root / "corral" / cgroup_name(folder, os.getpid())
        try:
            group.mkdir(parents=True)
            (group / knob).write_text(str(value))
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            continue
        made.append((group, controller))
    return made


def _oom_killed(cgroup: Path | None, v1: list[tuple[Path, str]]) -> bool:
    """Whether the kernel killed a process of the attempt's memory cgroup for its limit
    (v2 ``memory.events``, v1 ``memory.oom_control``: ``oom_kill N``)."""
    files = [cgroup / "memory.events"] if cgroup is not None else []
    files += [group / "memory.oom_control" for group, controller in v1 if controller == "memory"]
    for path in files:
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                name, _, count = line.partition(" ")
                if name == "oom_kill" and int(count) > 0:
                    return True
    return False


def _drop_v1(group: Path | None, controller: str) -> None:
    """The launcher back to ``controller``'s root group, and ``group`` removed (its
    job's processes are gone by now)."""
    if group is None:
        return
    with contextlib.suppress(OSError):
        (CGROUP_ROOT / controller / "cgroup.procs").write_text(str(os.getpid()))
        group.rmdir()


def _drop_cgroup(cgroup: Path | None) -> None:
    if cgroup is None:
        return
    with contextlib.suppress(OSError):
        (CGROUP_ROOT / "cgroup.procs").write_text(str(os.getpid()))
        cgroup.rmdir()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
