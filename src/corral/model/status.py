"""Job life-cycle states (a light module: the CLI reads them without pandas)."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """Life-cycle states, shared by the simulator and the live service."""

    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.TIMEOUT}

_P, _S, _R, _H = JobStatus.PENDING, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUSPENDED
_FAILED, _CANCELLED = JobStatus.FAILED, JobStatus.CANCELLED

TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    # waiting: started, held, cancelled, or ended unrunnable (set aside, refused
    # by the policy, a dependency that failed); a job left RUNNING at a restart
    # whose attempt is adopted shows RUNNING again; a parked job (PENDING while its
    # paused process lives on) whose process finished as it was being parked
    _P: frozenset({_S, _R, _H, _CANCELLED, _FAILED, JobStatus.SUCCEEDED}),
    # placed, its process not launched yet: launched, preempted or requeued first
    _S: frozenset({_R, _P, _H, _CANCELLED, _FAILED}),
    # running: back to the queue (preempted, a retry), held, or ended any way
    _R: frozenset({_P, _S, _H, *_TERMINAL}),
    # held: released, cancelled, set aside; adopted again at a restart while its
    # stop is still in progress
    _H: frozenset({_P, _R, _CANCELLED, _FAILED}),
    **{end: frozenset() for end in _TERMINAL},
}
"""Which status a job may go to from each: a job ends once, and an ended job
never changes again. The deterministic simulation tests check every status
the live service writes against this table."""


SLURM_STATES: dict[str, JobStatus] = {
    "PD": JobStatus.PENDING,
    "CF": JobStatus.STARTING,
    "CONFIGURING": JobStatus.STARTING,
    "R": JobStatus.RUNNING,
    "S": JobStatus.SUSPENDED,
    "CD": JobStatus.SUCCEEDED,
    "COMPLETED": JobStatus.SUCCEEDED,
    "F": JobStatus.FAILED,
    "CA": JobStatus.CANCELLED,
    "TO": JobStatus.TIMEOUT,
}
"""squeue's and sacct's state names (short and long) that differ from corral's."""


def parse_states(text: str) -> list[JobStatus]:
    """States from a comma-separated list, in corral's names or Slurm's (``PD,R``,
    ``COMPLETED``), any case; ValueError naming the first unknown one."""
    out: list[JobStatus] = []
    for word in (w.strip().upper() for w in text.split(",") if w.strip()):
        if word in JobStatus.__members__:
            out.append(JobStatus[word])
        elif word in SLURM_STATES:
            out.append(SLURM_STATES[word])
        else:
            known = ", ".join([*JobStatus.__members__, *SLURM_STATES])
            raise ValueError(f"unknown state {word} (states: {known})")
    return out
