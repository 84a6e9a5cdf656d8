"""Standby workers: processes with Python and PyTorch already loaded, waiting for a job.

Starting a training process cold costs seconds before its first step: a new
interpreter, importing PyTorch and the job's code, then building the model
and reading the checkpoint. PipeSwitch keeps *standby workers* with that
environment initialised, so a switch only loads the job. corral does the
same for jobs given as a task (``task: {factory: module:function, steps: N}``
in the spec; see :mod:`corral.train.task`): with ``workers: {standby: N}`` in
the config, the executor keeps N idle workers per GPU.

A standby worker (``python -m corral.runtime.execution.standby FD``) imports PyTorch
and corral's training code, says it is ready on its socket and waits. To
launch an attempt the executor sends it the attempt's folder, confinement,
environment and task arguments, with the attempt's log as a passed file
descriptor. From then on the worker *is* that attempt's launcher: it forks
the job (which runs the task in the already-initialised interpreter, after
taking the job's Unix identity and limits), waits for it, kills whatever it
left, and writes the exit record, exactly as :mod:`corral.runtime.execution.launcher`
does for a cold start. An idle worker dies with the service; a busy one, like
any launcher, outlives it so the restarted service can adopt the job. A
round keeper (:mod:`corral.train.round_keeper`) also starts in a standby
worker, but *tethered*: it goes with the service, like an idle worker.

**CUDA is never initialised in a worker.** A process that forks after the
CUDA driver is initialised leaves its child unable to use the GPU ("Cannot
re-initialize CUDA in forked subprocess", or ``cudaErrorInitializationError``
when only the driver was), so the worker forks first and the job creates its
CUDA context itself, on its own GPU, on its first use. Three things in a
warm-up initialise the driver on a GPU machine: the autograd engine's first
backward pass (it counts the CUDA devices to start
its device threads), an optimiser's step (it asks the accelerator's current
stream whether a CUDA graph is being captured) and ``torch.cuda.is_available``
itself (it counts devices through the driver). So the warm-up runs its
optimiser steps on hand-made gradients, with no backward pass, with PyTorch
told that no accelerator is present (:func:`cpu_only`); the worker runs with
``PYTORCH_NVML_BASED_CUDA_CHECK=1``, so any availability check in it (a
preloaded module's) asks NVIDIA's management library instead of the driver;
and a worker that finds the driver initialised all the same refuses the job with a
message instead of forking into a crash (:func:`cuda_initialised`). What a
switch keeps warm is therefore the interpreter, PyTorch, its lazily imported
modules and the job's code, not a CUDA context: PipeSwitch also keeps the
context, which needs one worker per GPU that runs the job in its own process
(not a fork); the cost of creating the context in the job is in the docs'
GPU section (``benchmarks/gpu_check.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from corral.runtime.execution.launcher import (
    NOT_STARTED,
    PR_SET_PDEATHSIG,
    STOP_SIGNALS,
    Confinement,
    isolated_python,
    parse,
    prctl,
    root_environment,
    supervise,
)

READY = b"R"
WARM_MARK = "corral: started in a standby worker (interpreter and PyTorch already loaded)"


class CudaBeforeFork(subprocess.SubprocessError):
    """CUDA was initialised in a process that is about to fork a job (the launcher
    records it as a job that could not be started)."""


WORKER_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
"""Set in a worker: PyTorch's CUDA availability checks ask NVML, not the driver."""


CUDA_ERROR_NOT_INITIALIZED = 3


def cuda_initialised() -> bool:
    """Whether this process has initialised CUDA: PyTorch's CUDA state, or the CUDA
    driver itself (a forked child cannot use the GPU after either)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return True
        except Exception:
            pass
    return driver_initialised()


def driver_initialised() -> bool:
    """Whether the CUDA driver (libcuda) has been initialised in this process, asked
    without initialising it: only when the library is already loaded, through a call
    that answers "not initialised" rather than initialising (merely loading the
    library, as importing a CUDA build of PyTorch may, does not stop a fork)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False  # not loaded: not initialised
    count = ctypes.c_int(0)
    return int(lib.cuDeviceGetCount(ctypes.byref(count))) != CUDA_ERROR_NOT_INITIALIZED


@contextlib.contextmanager
def cpu_only() -> Iterator[None]:
    """Within: PyTorch sees no accelerator, so nothing it runs creates a CUDA context
    (an optimiser's step asks the accelerator's current stream otherwise)."""
    import torch

    saved = [(torch.cuda, "is_available", torch.cuda.is_available)]
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "current_accelerator"):
        saved.append((accelerator, "current_accelerator", accelerator.current_accelerator))
    for owner, name, _ in saved:
        setattr(owner, name, _no_accelerator)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _no_accelerator(*_args: object, **_kwargs: object) -> None:
    return None


def warm_up(preload: list[str]) -> None:
    """Load what a training job needs before its first step: PyTorch, corral's runner,
    the modules PyTorch imports lazily on first use (an optimiser's first step
    pulls in its compiler stack, over a second), and any modules the config names;
    all without initialising CUDA (the job is forked from here)."""
    import importlib

    import torch

    import corral.train.round_keeper
    import corral.train.rounds
    import corral.train.run_task  # noqa: F401

    with cpu_only():
        weight = torch.zeros(4, requires_grad=True)
        for optimizer in (torch.optim.SGD([weight], lr=0.1), torch.optim.Adam([weight])):
            # a gradient made by hand: no backward pass, whose first run would start the
            # autograd engine's device threads and with them the CUDA driver
            weight.grad = torch.ones(4)
            optimizer.step()
            optimizer.zero_grad()
    for name in preload:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def run_module(module: str, argv: list[str]) -> int:
    """Run one of the runners a worker has loaded (``WARM_MODULES``), as ``python -m``."""
    import importlib

    from corral.runtime.jobspec.specs import KEEPER_MODULE, WARM_MODULES

    if module not in (*WARM_MODULES, KEEPER_MODULE):
        print(f"corral: a standby worker does not run {module}", file=sys.stderr)
        return 2
    code = importlib.import_module(module).main(argv)
    return int(code or 0)


def main(fd: int, preload: list[str]) -> int:
    """Wait for one assignment on socket ``fd``, then run it as its launcher."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # idle: go with the service
    sock = socket.socket(fileno=fd)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    warm_up(preload)
    sock.sendall(READY)
    try:
        message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
    except OSError:
        return 0
    sock.close()
    if not message or not fds:
        return 0  # the service went away before giving work
    assignment = json.loads(message)
    if not assignment.get("tethered"):  # an attempt: it outlives the service
        prctl(PR_SET_PDEATHSIG, 0)
    log = fds[0]
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    parsed = parse([assignment["dir"], *assignment["options"], "--", *assignment["argv"]])
    if parsed is None:
        print("corral: a standby worker got a malformed assignment", file=sys.stderr)
        return 2
    folder, conf, argv = parsed
    env = assignment["env"]
    return supervise(folder, conf, lambda child_setup: _fork_task(conf, env, argv, child_setup))


def _fork_task(
    conf: Confinement, env: dict[str, str], argv: list[str], child_setup: Callable[[], None]
) -> int:
    """Fork the job: identity, limits and environment, then the task in this interpreter.
    Refused (CudaBeforeFork) when this process has initialised CUDA: the child could
    not use the GPU."""
    if cuda_initialised():
        raise CudaBeforeFork(
            "this standby worker initialised CUDA before starting the job (a module it "
            "preloaded used the GPU at import?); a forked job could not use the GPU"
        )
    pid = os.fork()
    if pid:
        return pid
    try:
        if conf.uid is not None:
            os.setgroups(conf.groups)
            os.setgid(conf.gid if conf.gid is not None else conf.uid)
            os.setuid(conf.uid)
        child_setup()
        os.environ.clear()
        os.environ.update(env)
        # as a cold start would: the job's own module folders first (the worker itself,
        # run as root, never read them)
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = extra
        print(WARM_MARK, flush=True)
        code = run_module(argv[0], argv[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


@dataclass
class Idle:
    """A standby worker waiting for work, and the service's end of its socket."""

    process: subprocess.Popen[bytes]
    sock: socket.socket
    ready: bool = False


class StandbyPool:
    """Idle standby workers the executor launches task jobs into."""

    def __init__(
        self, size: int, log: Path | None = None, preload: list[str] | None = None
    ) -> None:
        self.size = size
        self.log = log
        self.preload = preload or []
        self.idle: list[Idle] = []
        self.refill()

    def refill(self) -> None:
        """Start workers until ``size`` are idle (they become ready in the background)."""
        self.idle = [w for w in self.idle if w.process.poll() is None]
        while len(self.idle) < self.size:
            ours, theirs = socket.socketpair()
            out = open(self.log, "ab") if self.log is not None else subprocess.DEVNULL  # noqa: SIM115
            try:
                process = subprocess.Popen(
                    [
                        *isolated_python(),
                        "-m",
                        "corral.runtime.execution.standby",
                        str(theirs.fileno()),
                        *self.preload,
                    ],
                    pass_fds=[theirs.fileno()],
                    # a fork of it runs the job: nothing of the service's environment
                    # may be in its memory
                    env={**root_environment(), **WORKER_ENV},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            finally:
                theirs.close()
                if out is not subprocess.DEVNULL:
                    out.close()  # type: ignore[union-attr]
            ours.setblocking(False)
            self.idle.append(Idle(process, ours))

    def ready(self) -> int:
        """How many idle workers are ready now."""
        return sum(self._is_ready(w) for w in list(self.idle))

    def take(self) -> Idle | None:
        """A ready idle worker (removed from the pool), or None if none is ready yet."""
        for worker in list(self.idle):
            if self._is_ready(worker):
                self.idle.remove(worker)
                return worker
        return None

    @staticmethod
    def _is_ready(worker: Idle) -> bool:
        if not worker.ready:
            with contextlib.suppress(BlockingIOError, InterruptedError, OSError):
                worker.ready = worker.sock.recv(1) == READY
        return worker.ready and worker.process.poll() is None

    def assign(
        self,
        worker: Idle,
        folder: Path,
        log_path: Path,
        conf: Confinement,
        env: dict[str, str],
        argv: list[str],
        tethered: bool = False,
    ) -> int:
        """Hand an attempt to ``worker``; its pid (the attempt's launcher from now on).
        ``tethered``: it dies with the service (a round keeper), unlike an attempt."""
        message = json.dumps(
            {
                "dir": str(folder),
                "options": conf.options(),
                "env": env,
                "argv": argv,
                "tethered": tethered,
            }
        ).encode()
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            worker.sock.setblocking(True)
            socket.send_fds(worker.sock, [message], [log])
        finally:
            os.close(log)
            worker.sock.close()
        return worker.process.pid

    def close(self) -> None:
        for worker in self.idle:
            worker.sock.close()
            with contextlib.suppress(ProcessLookupError):
                worker.process.kill()
            worker.process.wait()
        self.idle = []


if __name__ == "__main__":
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        print("usage: python -m corral.runtime.execution.standby FD [MODULE...]", file=sys.stderr)
        sys.exit(2)
    try:
        code = main(int(sys.argv[1]), sys.argv[2:])
    except KeyboardInterrupt:
        code = NOT_STARTED
    # The exit record is written: skip tearing down PyTorch (up to a second), since
    # the service counts the attempt running until this process is gone.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
