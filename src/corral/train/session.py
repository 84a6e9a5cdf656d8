"""The job side of corral: what a training script wraps around its loop.

::

    from corral.train import Session

    session = Session(model=model, optimizer=optimizer)
    step = session.restore()             # 0, or the step of the last checkpoint
    while step < total_steps:
        loss = train_one_iteration(step)
        step += 1
        session.report(step, loss=float(loss))
        if session.should_stop:          # preempted, suspended, lease ended, pre-run done
            session.stop(step)           # checkpoint (not in a pre-run) and exit

Time-slicing: the scheduler asks a job to pause with SIGTSTP; the session
pauses the process at the next ``report`` (an iteration boundary, as Gandiva
suspends at a mini-batch boundary) and it carries on where it was when the
scheduler resumes it (SIGCONT). On a GPU the paused job's state waits in
pinned host memory, so the job given the GPU meanwhile has its memory.

``report`` is cheap: it records progress, and a background thread sends it
to the service as a heartbeat every few seconds (the heartbeat also renews
the job's lease and may carry a stop order). The scheduler preempts with
SIGTERM; the session turns it into ``should_stop`` so the loop ends at the
next iteration boundary with a checkpoint, instead of dying mid-step.
Checkpoints are also saved every ``checkpoint_every`` seconds, so a crash
loses at most that much work.

Outside corral (no ``CORRAL_*`` variables) the same script runs as usual:
checkpoints go to ``./checkpoints`` and no heartbeats are sent.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

from corral.train import checkpoint
from corral.train.checkpoint import Stateful

STOPPED_EXIT = 75
"""Exit code of a job that stopped at the scheduler's request after checkpointing
(EX_TEMPFAIL: "try again later"); the scheduler requeues it."""


class WarmHost:
    """Set by a warm worker (:mod:`corral.runtime.execution.warm_worker`), which runs
    jobs in its own process one after another: a job's end must not end the process
    (``exit`` raises :class:`EndOfRun` instead), and a stop signal that came while the
    job was still starting (before its Session existed) is handed to the Session.

    A job stopped there may also stay *resident* (:mod:`corral.train.resident`): its
    objects kept in the worker's memory, so that its next attempt in the same worker
    neither rebuilds the model nor reads its checkpoint."""

    active = False
    early_stop: str | None = None


class EndOfRun(BaseException):
    """A job run in a warm worker ended (its exit code), as ``os._exit`` would end it."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _exit_now(code: int) -> NoReturn:
    if WarmHost.active:
        raise EndOfRun(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


PRERUN_EXIT = 76
"""Exit code of a job whose 1-GPU pre-run passed. A job that exits 0 in its pre-run
did not use this library (it ignored the pre-run): it ran to its end, so it is done."""


def cap_gpu_memory(text: str | None) -> float | None:
    """Apply the service's GPU memory cap to PyTorch's CUDA allocator on every
    visible GPU (AntMan's opportunistic jobs leave the rest to the guaranteed
    job they share with). Without PyTorch loaded, or without CUDA, nothing is
    done (the figure is still returned)."""
    if not text:
        return None
    try:
        fraction = float(text)
    except ValueError:
        return None
    if not 0.0 < fraction <= 1.0:
        return None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        for device in range(torch.cuda.device_count()):
            torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


def peak_gpu_memory() -> float | None:
    """The most GPU memory PyTorch held on any of the job's GPUs since the last call
    (None without PyTorch or CUDA in use)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    peak = 0.0
    for device in range(torch.cuda.device_count()):
        peak = max(peak, float(torch.cuda.max_memory_reserved(device)))
        torch.cuda.reset_peak_memory_stats(device)
    return peak


class Session:
    def __init__(
        self,
        checkpoint_every: float = 300.0,
        stop_signals: tuple[int, ...] = (signal.SIGTERM,),
        **objects: Stateful,
    ) -> None:
        env = os.environ
        self.objects = objects
        self.job_id = env.get("CORRAL_JOB_ID")
        self.rank = int(env.get("CORRAL_RANK", "0"))
        """This process's node rank in a multi-node gang: only rank 0 sends
        heartbeats and writes checkpoints (data-parallel ranks hold the same
        state), the others follow the scheduler through its signals."""
        self.attempt = int(env.get("CORRAL_ATTEMPT", "1"))
        self.checkpoint_dir = Path(env.get("CORRAL_CHECKPOINT_DIR", "checkpoints"))
        self.api_url = env.get("CORRAL_API_URL")
        self._token = env.get("CORRAL_JOB_TOKEN")
        self.heartbeat_interval = float(env.get("CORRAL_HEARTBEAT_INTERVAL", "5"))
        self.lease_seconds = float(env.get("CORRAL_LEASE_SECONDS", "300"))
        prerun = env.get("CORRAL_PRERUN_STEPS")
        self.prerun_steps = int(prerun) if prerun else None
        """Set in a pre-run: stop (successfully, without a checkpoint) after this many steps."""
        self.checkpoint_every = checkpoint_every
        self.step = 0
        self.loss: float | None = None
        self.saved_step: int | None = None
        self.lease_until = time.time() + self.lease_seconds
        self._stop_reason: str | None = WarmHost.early_stop
        self._last_save = time.monotonic()
        self._rate_mark = (time.monotonic(), 0)
        self.throughput: float | None = None
        self._throughput_from = self._rate_mark[0]
        """When (monotonic) the window ``throughput`` covers began: heartbeats say
        how old it is, so the service can tell a figure measured after a change
        (packed, unpacked) from one that still covers time before it."""
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._pause_asked = False
        self._woken = False
        """Resumed after a pause: the throughput window restarts, so time paused
        is not read as a slow step."""
        self.resumptions = 0
        """Times this process was resumed after a pause (parked, time-sliced)."""
        if threading.current_thread() is threading.main_thread():
            for sig in stop_signals:
                signal.signal(sig, self._on_signal)
            signal.signal(signal.SIGTSTP, self._on_pause)
            signal.signal(signal.SIGCONT, self._on_continue)
        self.num_gpus = int(env.get("CORRAL_NUM_GPUS", "1"))
        """GPUs this attempt was given: a policy that resizes jobs (Optimus, Pollux)
        may give another count than asked; the job picks it up at each start."""
        batch = env.get("CORRAL_BATCH_SIZE")
        self.batch_size: int | None = int(batch) if batch else None
        """The global batch size the scheduler sets, when its policy tunes one
        (Pollux, for jobs that state their model and batch size; None: the job's
        own choice): given at launch and updated by heartbeat answers, so a job
        that reads it each step follows the policy without a restart."""
        self.reported_batch: int | None = None
        self.noise_scale: float | None = None
        self.memory_fraction = cap_gpu_memory(env.get("CORRAL_GPU_MEMORY_FRACTION"))
        """The share of each GPU's memory this job may use (set for opportunistic jobs)."""
        self.reported_memory: float | None = None
        """GPU memory the job said it uses (bytes per GPU); else PyTorch's peak is sent."""
        self._suspended: Any = None  # a GPU job's parked state between pauses
        self._thread: threading.Thread | None = None
        if self.api_url and self._token and self.job_id and self.rank == 0:
            self._thread = threading.Thread(target=self._beat_loop, daemon=True)
            self._thread.start()

    # -------------------------------------------------------------- api
    @property
    def managed(self) -> bool:
        """True when the job runs under corral (heartbeats go to a service)."""
        return self._thread is not None

    @property
    def should_stop(self) -> bool:
        if self.prerun_steps is not None and self.step >= self.prerun_steps:
            return True
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        if self.prerun_steps is not None and self.step >= self.prerun_steps:
            return "prerun done"
        return self._stop_reason

    def lease_remaining(self) -> float:
        """Seconds until the lease ends unless a heartbeat renews it."""
        return self.lease_until - time.time()

    def resume_resident(self, step: int) -> int:
        """Carry on from ``step`` with objects that are still in memory as that step's
        checkpoint left them (a resident job in a warm worker): as :meth:`restore`,
        without reading the checkpoint."""
        self.step = self.saved_step = int(step)
        self._rate_mark = (time.monotonic(), self.step)
        return self.step

    def restore(self) -> int:
        """Load the last checkpoint, if any, into the objects and RNGs; returns its step."""
        payload = checkpoint.load(self.checkpoint_dir)
        if payload is None:
            return 0
        self.step = checkpoint.restore(payload, self.objects)
        self.saved_step = self.step
        self._rate_mark = (time.monotonic(), self.step)
        return self.step

    def report(
        self,
        step: int,
        loss: float | None = None,
        batch_size: int | None = None,
        grad_noise_scale: float | None = None,
        gpu_memory: float | None = None,
    ) -> None:
        """Progress after an iteration: feeds heartbeats and periodic checkpoints.

        ``batch_size`` (the step's global batch) and ``grad_noise_scale`` (see
        :class:`corral.train.noise.GradientNoise`) are what goodput models read;
        ``gpu_memory`` (bytes per GPU; by default PyTorch's peak since the last
        heartbeat) is what a job sharing its GPUs may use beside it (AntMan). All
        are optional."""
        with self._lock:
            if gpu_memory is not None:
                self.reported_memory = float(gpu_memory)
            if batch_size is not None:
                self.reported_batch = int(batch_size)
            if grad_noise_scale is not None and math.isfinite(grad_noise_scale):
                self.noise_scale = max(float(grad_noise_scale), 0.0)
            if self._woken:
                self._woken = False
                self._rate_mark = (time.monotonic(), self.step)
            self.step = int(step)
            if loss is not None:  # a diverged loss (nan, inf) is reported as none
                self.loss = float(loss) if math.isfinite(float(loss)) else None
            mark_t, mark_step = self._rate_mark
            elapsed = time.monotonic() - mark_t
            if elapsed >= 1.0:
                self.throughput = (self.step - mark_step) / elapsed
                self._throughput_from = mark_t
                self._rate_mark = (time.monotonic(), self.step)
        due = time.monotonic() - self._last_save >= self.checkpoint_every
        if due and self.prerun_steps is None:
            self.save(step)
        if self._pause_asked:
            self._pause()

    def save(self, step: int, **extra: Any) -> None:
        """Checkpoint now (atomically; rank 0 of a multi-node gang only)."""
        if self.rank == 0:
            checkpoint.save(self.checkpoint_dir, step, self.objects, extra)
        self.saved_step = int(step)
        self._last_save = time.monotonic()

    def stop(self, step: int) -> NoReturn:
        """End the job at an iteration boundary: checkpoint and exit so it can resume.

        Once the checkpoint is on disk the process exits at once: atexit
        handlers run and output is flushed, but Python's module teardown is
        skipped (with PyTorch loaded it takes 0.5-1 s, all of it on the
        critical path of a preemption).
        """
        prerun_done = self.prerun_steps is not None and step >= self.prerun_steps
        if not prerun_done:
            self.save(step)
        self.step = int(step)
        self.close()
        _exit_now(PRERUN_EXIT if prerun_done else STOPPED_EXIT)

    def finish(self, step: int | None = None) -> None:
        """The loop is done: a last heartbeat with the final step."""
        if step is not None:
            self.step = int(step)
        self.close()

    def close(self) -> None:
        if self._thread is not None and not self._done.is_set():
            self._done.set()
            self._thread.join(timeout=2.0)
            self._send()

    # ---------------------------------------------------------- internals
    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._stop_reason = f"signal {signal.Signals(signum).name}"

    def _asked_to_stop(self) -> bool:
        """Whether a stop signal came. A call of its own: Python runs pending signal
        handlers on entering a function, so one delivered with the SIGCONT that
        woke the process is counted."""
        return self._stop_reason is not None

    def _on_pause(self, _signum: int, _frame: Any) -> None:
        self._pause_asked = True

    def _on_continue(self, _signum: int, _frame: Any) -> None:
        self._pause_asked = False
        self._woken = True
        self.resumptions += 1

    def _recap(self, fraction: float) -> None:
        """Take the service's new GPU memory cap; on shrinking, hand PyTorch's cached
        blocks back so the job sharing the GPUs can have them."""
        shrinking = self.memory_fraction is not None and fraction < self.memory_fraction
        self.memory_fraction = cap_gpu_memory(str(fraction))
        torch = sys.modules.get("torch")
        if shrinking and torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _pause(self) -> None:
        """Pause the whole process here, at an iteration boundary, until SIGCONT. A job
        whose state is on a GPU parks it in host memory first and frees the GPU's
        memory for the job sharing it (Gandiva's suspend), and gets it back, pipelined
        with its next step, when resumed."""
        self._pause_asked = False
        if self._asked_to_stop():  # a stop asked meanwhile comes first
            return
        suspension = self._suspension()
        if suspension is not None:
            suspension.suspend(self.objects)
        # the log says when the GPU was given up (a switch to another job starts here)
        print(f"corral: paused at step {self.step} at t={time.time():.3f}", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        if self._asked_to_stop():
            # stopped while paused (a parked job started elsewhere, cancelled or
            # suspended): checkpoint from the parked state and exit, without
            # touching the GPU it left, which another job may hold now
            self.stop(self.step)
        if suspension is not None:
            suspension.resume(self.objects)

    def _suspension(self) -> Any:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            return None
        from corral.train.residency import Suspension, device_of, worker_mover

        device = device_of(self.objects)
        if device is None:
            return None
        if self._suspended is None or self._suspended.mover.device != device:
            self._suspended = Suspension(worker_mover(device))
        return self._suspended

    def _beat_loop(self) -> None:
        self._send()  # at once: the service learns the job can pause and checkpoint
        while not self._done.wait(self.heartbeat_interval):
            self._send()

    def _send(self) -> None:
        with self._lock:
            body = {
                "attempt": self.attempt,
                "step": self.step,
                "throughput": self.throughput,
                "throughput_age": (
                    None if self.throughput is None else time.monotonic() - self._throughput_from
                ),
                "loss": self.loss,
                "batch_size": self.reported_batch,
                "grad_noise_scale": self.noise_scale,
                "checkpoint_step": self.saved_step,
                "gpu_memory": self.reported_memory
                if self.reported_memory is not None
                else peak_gpu_memory(),
            }
        request = urllib.request.Request(
            f"{self.api_url}/v1/jobs/{self.job_id}/heartbeat",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=2.0) as response:
                answer = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return  # the service may be restarting; the next beat tries again
        self.lease_until = float(answer.get("lease_until", self.lease_until))
        if answer.get("batch_size"):
            self.batch_size = int(answer["batch_size"])
        cap = answer.get("memory_fraction")
        if cap is not None and cap != self.memory_fraction:
            self._recap(float(cap))
        if answer.get("stop") and self._stop_reason is None:
            self._stop_reason = f"stop requested ({answer.get('why', 'scheduler')})"
