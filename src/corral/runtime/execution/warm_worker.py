"""Warm workers: one process per user and GPU that keeps its CUDA context and memory
pool, and runs that user's task jobs on that GPU one after another (PipeSwitch's
active-standby worker).

A standby worker (:mod:`corral.runtime.execution.standby`) saves a start the
interpreter and PyTorch's imports, but it forks the job, and a forked job must
create its own CUDA context (hundreds of milliseconds) and warm the framework's
first-use costs again. A warm worker never forks. The service starts it, as
root, for one user and one GPU; it confines itself to that GPU's device node
(:mod:`corral.runtime.execution.gpu_devices`), takes the user's identity for
good, creates its CUDA context, warms cuBLAS and the autograd engine with a
step, and listens on a Unix socket only that user can open. A job of that user
on that GPU is then launched as usual, through the root launcher (its
identity, limits, confinement and exit record as for any attempt), but its
command is a small client (:mod:`corral.runtime.execution.warm_client`) that
hands the job to the worker and relays the scheduler's signals to it. The
worker runs the task in its own process: the job's code and model are built,
its checkpoint restored and its tensors moved onto memory the caching
allocator already holds, with the previous job's last allocations freed at
its end. When the job is preempted it checkpoints, the worker reports its exit
code to the client (which exits with it, so the launcher records it) and waits
for the next job. A worker whose client is killed stops at once (os._exit):
the GPU is released with the attempt, never kept by a job the scheduler took
it from.

Separation: a worker runs one user's jobs only. It runs as that user, its
socket is that user's (mode 0600, in a folder of the service's), and it checks
the peer's identity (``SO_PEERCRED``) of every connection. A job with limits
a shared process cannot keep (a memory limit, several GPUs, a round's keeper)
starts as before, cold or in a standby worker, and its start event says why.

Idle workers end after ``workers.warm_idle`` seconds. The loop has one started
for a (user, GPU) while that user's task jobs wait (see
:mod:`corral.runtime.loop.warm_ahead`), and the service starts one when a job
is launched there and none is ready (that start runs as before; the next one
is warm).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from corral.runtime.execution.launcher import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    STOP_SIGNALS,
    Confinement,
    _cgroup,
    cgroup_name,
    cgroup_paths,
    isolated_python,
    job_processes,
    prctl,
    root_environment,
)

WARM_MARK = "corral: started in a warm worker"
"""First line of a job run in a warm worker (its log), before the worker's own words."""
RELAYED = (*STOP_SIGNALS, signal.SIGTSTP, signal.SIGCONT)
"""Signals the client passes on to the worker."""
MESSAGE_LIMIT = 1 << 20


# ------------------------------------------------------------------ the worker
@dataclass
class WorkerArgs:
    socket: Path
    gpu: str | None
    uid: int | None
    gid: int | None
    groups: list[int]
    idle: float


def parse(argv: list[str]) -> WorkerArgs:
    values = dict(zip(argv[::2], argv[1::2], strict=False))
    uid = values.get("--uid")
    gid = values.get("--gid")
    return WorkerArgs(
        socket=Path(values["--socket"]),
        gpu=values.get("--gpu") or None,
        uid=int(uid) if uid else None,
        gid=int(gid) if gid else None,
        groups=[int(g) for g in values.get("--groups", "").split(",") if g],
        idle=float(values.get("--idle", "300")),
    )


def become(args: WorkerArgs) -> str:
    """As root: confine this process to its GPU's node, then take the user's identity
    (for good: a worker never runs anyone else's code). Returns how it is confined."""
    how = "no GPU node to confine (virtual GPU)"
    if args.gpu is not None:
        from corral.runtime.execution.gpu_devices import confine

        cgroup = _cgroup(args.socket, Confinement())
        how = confine(cgroup_name(args.socket, os.getpid()), [int(args.gpu)], cgroup).how
    if args.uid is not None:
        os.setgroups(args.groups)
        os.setgid(args.gid if args.gid is not None else args.uid)
        os.setuid(args.uid)
    return how


def warm_up(gpu: str | None) -> str:
    """Import the runners and PyTorch; on a GPU, create the CUDA context and run one
    training step so that cuBLAS, cuDNN and the autograd engine's device threads
    are made before the first job. Returns what was made, for the log."""
    import torch

    import corral.train.run_task  # noqa: F401  (the runner the jobs call)

    if gpu is None or not torch.cuda.is_available():
        return "no CUDA device: interpreter and PyTorch only"
    began = time.perf_counter()
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.LazyLinear(4)
    )
    model = model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = model(torch.randn(2, 3, 16, 16, device="cuda")).square().mean()
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    del model, optimizer, loss
    took = time.perf_counter() - began
    return f"CUDA context on {torch.cuda.get_device_name(0)} made and warmed in {took:.2f} s"


def serve(args: WorkerArgs) -> int:
    """Listen for this user's jobs; run each; end after ``idle`` seconds without one."""
    for sig in RELAYED[:-1]:  # idle: the scheduler's signals for a job already ended
        signal.signal(sig, signal.SIG_IGN)
    args.socket.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(str(args.socket))
    finally:
        os.umask(old)
    listener.listen(4)
    listener.settimeout(args.idle)
    print(f"corral: warm worker {os.getpid()} ready on {args.socket}", flush=True)
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                print(
                    f"corral: warm worker {os.getpid()} idle {args.idle:.0f} s: ending", flush=True
                )
                return 0
            with conn:
                serve_one(conn)
    finally:
        with contextlib.suppress(OSError):
            args.socket.unlink()


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def serve_one(conn: socket.socket) -> None:
    """One job, from the client on ``conn``: run it here and send its exit code."""
    if peer_uid(conn) != os.getuid():  # another user's process: never run its job
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"refused": "not this worker's user"}).encode() + b"\n")
        return
    try:
        message, fds, _, _ = socket.recv_fds(conn, MESSAGE_LIMIT, 2)
        job = json.loads(message)
    except (OSError, ValueError):
        return
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return
    conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
    running = threading.Event()
    running.set()

    def watch() -> None:  # the client gone mid-job: the attempt was killed
        with contextlib.suppress(OSError):
            conn.recv(1)
        if running.is_set():
            os._exit(137)

    threading.Thread(target=watch, daemon=True).start()
    go_with_the_service(idle=False)
    code = run_job(job["argv"], job["env"], job["cwd"], fds)
    running.clear()
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
    go_with_the_service(idle=True)


def run_job(argv: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> int:
    """Run a runner module (``argv``: module and arguments) in this process, with the
    job's environment, folder and output, then put everything back."""
    from corral.runtime.execution.standby import run_module
    from corral.train.session import EndOfRun, WarmHost

    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    saved_fds = [os.dup(1), os.dup(2)]
    own_gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    WarmHost.active, WarmHost.early_stop = True, None

    def early(signum: int, _frame: object) -> None:  # before the job's Session exists
        WarmHost.early_stop = f"signal {signal.Signals(signum).name}"

    for sig in STOP_SIGNALS:
        signal.signal(sig, early)
    code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.environ.clear()
        os.environ.update(env)
        os.environ["CUDA_VISIBLE_DEVICES"] = own_gpu  # this worker's GPU, whatever it says
        sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.chdir(cwd)
        print(f"{WARM_MARK} {os.getpid()} (its CUDA context and memory pool kept)", flush=True)
        code = run_module(argv[0], argv[1:])
    except EndOfRun as end:
        code = end.code
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        _end_leftovers()  # nothing the job started outlives it (the worker starts none)
        WarmHost.active, WarmHost.early_stop = False, None
        for sig in RELAYED[:-1]:
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGCONT, signal.SIG_DFL)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        for fd, saved in zip((1, 2), saved_fds, strict=True):
            os.dup2(saved, fd)
            os.close(saved)
        for fd in fds:
            os.close(fd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        with contextlib.suppress(OSError):
            os.chdir(saved_cwd)
        gc.collect()  # the job's tensors back to the caching allocator, kept for the next
    return int(code)


def _end_leftovers() -> None:
    """Kill every process the job left (a data loader's workers, ``sleep &``, a
    daemon: as a subreaper the worker inherits whatever its children orphan) and
    reap them, before the job's end is reported and its GPU given to another."""
    for _ in range(50):
        left = job_processes(os.getpid())
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass


SERVICE = [0]
"""The service's pid (the worker's parent): an idle worker goes with it."""


def go_with_the_service(idle: bool) -> None:
    """Idle, the worker dies with the service (as an idle standby worker does); running a
    job, it outlives it, as any attempt does (the restarted service adopts the attempt)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL if idle else 0)
    if idle and os.getppid() != SERVICE[0]:  # it went while the job ran
        sys.stdout.flush()
        os._exit(0)


def main(argv: list[str]) -> int:
    args = parse(argv)
    SERVICE[0] = os.getppid()
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    how = become(args)
    go_with_the_service(idle=True)  # (after the identity change, which clears it)
    print(f"corral: warm worker {os.getpid()}: GPU confinement: {how}", flush=True)
    print(f"corral: warm worker {os.getpid()}: {warm_up(args.gpu)}", flush=True)
    return serve(args)


# ------------------------------------------------------------------ the service's side
@dataclass
class Warm:
    """A warm worker the service started: its process, socket and jobs."""

    process: subprocess.Popen[bytes]
    socket: Path
    busy: int | None = None
    """The launcher pid of the attempt it runs (None: idle)."""
    used: float = field(default_factory=time.monotonic)


class WarmWorkers:
    """The service's warm workers, one per (user, GPU device)."""

    def __init__(self, folder: Path, idle: float, log: Path | None = None) -> None:
        self.folder = folder
        self.idle = idle
        self.log = log
        self.workers: dict[tuple[int | None, str], Warm] = {}
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o711)  # its sockets are reached by name, never listed

    @staticmethod
    def why_not(
        gpus: int, memory: int | None, keeper: bool, runs_python: bool = True
    ) -> str | None:
        """Why a task job cannot run in a warm worker (None: it can)."""
        if gpus != 1:
            return f"a warm worker holds one GPU; the job has {gpus}"
        if memory is not None:
            return "the job has a memory limit, which a shared process cannot keep"
        if keeper:
            return "a round's task runs beside its keeper"
        if not runs_python:
            return "the job's user cannot run the service's Python"
        return None

    def running(self, key: tuple[int | None, str]) -> bool:
        """Whether ``key``'s worker runs (warming up, idle or busy)."""
        warm = self.workers.get(key)
        return warm is not None and warm.process.poll() is None

    def count(self, user: int | None) -> int:
        """How many of this user's workers run (on any GPU)."""
        return sum(1 for key in list(self.workers) if key[0] == user and self.running(key))

    def take(self, key: tuple[int | None, str], launcher: int | None = None) -> Path | None:
        """The socket of the ready, idle worker for ``key`` (marked busy), or None."""
        warm = self.workers.get(key)
        if warm is None or warm.busy is not None or warm.process.poll() is not None:
            return None
        if not warm.socket.exists():  # still warming up
            return None
        warm.busy = launcher if launcher is not None else -1
        return warm.socket

    def claimed(self, key: tuple[int | None, str], launcher: int) -> None:
        """The attempt that took ``key``'s worker runs under ``launcher``."""
        warm = self.workers.get(key)
        if warm is not None:
            warm.busy = launcher

    def release(self, launcher: int) -> None:
        """The attempt under ``launcher`` ended: its worker is free again."""
        for warm in self.workers.values():
            if warm.busy == launcher:
                warm.busy = None
                warm.used = time.monotonic()

    def start(
        self, key: tuple[int | None, str], uid: int | None, gid: int | None, groups: list[int]
    ) -> None:
        """Start the worker for ``key`` unless one runs (it warms up in the background)."""
        warm = self.workers.get(key)
        if warm is not None and warm.process.poll() is None:
            return
        user, device = key
        path = self.folder / f"{'service' if user is None else user}-gpu{device}.sock"
        argv = [*isolated_python(), "-m", "corral.runtime.execution.warm_worker"]
        argv += ["--socket", str(path), "--idle", str(self.idle)]
        if device.isdigit():
            argv += ["--gpu", device]
        if uid is not None:
            argv += ["--uid", str(uid), "--gid", str(gid if gid is not None else uid)]
            argv += ["--groups", ",".join(map(str, groups))]
        env = {**root_environment(), "CUDA_VISIBLE_DEVICES": device if device.isdigit() else ""}
        if device.isdigit():
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        out = open(self.log, "ab") if self.log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            process = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        self.workers[key] = Warm(process, path)

    def tend(self) -> None:
        """Forget workers that ended (idle too long, or killed with their job), and
        remove the cgroups they confined themselves in (they ran as their user, who
        may not)."""
        for key, warm in list(self.workers.items()):
            if warm.process.poll() is not None:
                del self.workers[key]
                _drop_cgroups(warm)

    def close(self) -> None:
        """Stop the idle workers; a busy one finishes its job (it outlives the service,
        as a launcher does) and ends when idle."""
        for warm in self.workers.values():
            if warm.busy is None:
                with contextlib.suppress(ProcessLookupError):
                    warm.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    warm.process.wait(5)
                _drop_cgroups(warm)
        self.workers = {}


def _drop_cgroups(warm: Warm) -> None:
    """Remove the cgroups an ended worker confined itself in (v2's own, or v1's
    devices group); nothing where it made none or they are not empty."""
    for group in cgroup_paths(warm.socket, warm.process.pid):
        with contextlib.suppress(OSError):
            group.rmdir()


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except KeyboardInterrupt:
        code = 1
    sys.stdout.flush()
    os._exit(code)
