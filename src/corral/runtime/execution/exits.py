"""Why an attempt ended, from how it exited and what the scheduler asked of it.

The cause decides what happens next: a preempted or suspended job waits to
resume from its checkpoint, a failure is retried with back-off up to the
job's ``max_retries``, a user error found by the pre-run is final at once,
and node failures count against the node (which drains after several).
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path

from corral.runtime.execution.executor import ExitRecord
from corral.runtime.execution.job_files import open_regular
from corral.runtime.execution.launcher import NOT_STARTED, OOM_NOTE
from corral.train.session import PRERUN_EXIT, STOPPED_EXIT


class Cause(StrEnum):
    SUCCEEDED = "succeeded"
    PRERUN_OK = "prerun_ok"
    PREEMPTED = "preempted"
    SUSPENDED = "suspended"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    HUNG = "hung"
    """Heartbeats stopped for longer than the lease: killed and retried."""
    USER_ERROR = "user_error"
    OOM = "oom"
    KILLED = "killed"
    """Killed by a signal nobody in corral sent (an operator, the kernel)."""
    NODE_FAILURE = "node_failure"

    @property
    def failure(self) -> bool:
        return self in _FAILURES


_FAILURES = {Cause.HUNG, Cause.USER_ERROR, Cause.OOM, Cause.KILLED, Cause.NODE_FAILURE}

PARK = "park"
"""The stop of a parked attempt: it is paused and keeps its process, not asked to
leave (its heartbeats must not tell it to stop: it resumes in place)."""

STOPS = {
    "preempt": Cause.PREEMPTED,
    PARK: Cause.PREEMPTED,
    "suspend": Cause.SUSPENDED,
    "cancel": Cause.CANCELLED,
    "timeout": Cause.TIMEOUT,
    "hung": Cause.HUNG,
    "gpu_failure": Cause.NODE_FAILURE,
}
"""Stop requests of the scheduler and the cause they give the attempt."""

FINAL_STOPS = frozenset({"cancel", "timeout", "suspend"})
"""Stops whose cause stands even when the pre-run ended well just then: the job was
cancelled, timed out or suspended, and must not go back to the queue."""

_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|\bMemoryError\b|std::bad_alloc|Cannot allocate memory"
)


def log_tail(path: Path, size: int = 16384) -> str:
    fd = open_regular(path)  # a regular file only, never through a link
    if fd is None:
        return ""
    try:
        with os.fdopen(fd, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - size))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


DETERMINISTIC = ("cannot start ", "cannot use ")
"""How a launcher's record begins when the job never ran because of something a retry
would meet again (a missing program, an output file or working directory refused to
the job's user): such a failure is final at once."""


def never_started(record: ExitRecord) -> bool:
    """Whether the attempt failed before the job's program ran, for a reason that a
    retry would meet again."""
    return record.exit_code == NOT_STARTED and (record.detail or "").startswith(DETERMINISTIC)


def classify(stop: str | None, record: ExitRecord, phase: str, log: Path) -> tuple[Cause, str]:
    """The cause of an attempt's end and a line for people."""
    code, sig = record.exit_code, record.signal
    how = f"exit code {code}" if code is not None else f"signal {sig}" if sig else "no record"
    if record.detail and code != NOT_STARTED and not record.lost:
        how += f"; {record.detail}"  # e.g. processes the job left running, killed at its end
    if code == 0 and stop in ("cancel", "timeout"):
        # as Slurm's: a job cancelled or past its time limit is so, even when its
        # program ends well in the grace after the SIGTERM
        return STOPS[stop], f"stopped by the scheduler ({stop}; it exited 0 in its grace)"
    if code == 0 and stop != "hung":
        if phase == "prerun":  # it ignored the pre-run and did all its work on one GPU
            return Cause.SUCCEEDED, "ran to its end in its 1-GPU pre-run (no corral.train)"
        return Cause.SUCCEEDED, how if stop is None else f"finished while being stopped ({stop})"
    if code == PRERUN_EXIT and phase == "prerun" and stop not in FINAL_STOPS:
        return Cause.PRERUN_OK, how
    if stop in STOPS:
        return STOPS[stop], f"stopped by the scheduler ({stop}; {how})"
    if record.lost:
        return Cause.NODE_FAILURE, record.detail or "the process vanished"
    if code == STOPPED_EXIT:
        return Cause.PREEMPTED, "the job checkpointed and stopped itself (it will be requeued)"
    if code == NOT_STARTED:
        return Cause.USER_ERROR, record.detail or "the program could not be started"
    if _OOM.search(log_tail(log)) or OOM_NOTE in (record.detail or ""):
        return Cause.OOM, f"out of memory ({how})"
    if sig:
        return Cause.KILLED, f"killed by {how}"
    return Cause.USER_ERROR, f"the program failed ({how})"
