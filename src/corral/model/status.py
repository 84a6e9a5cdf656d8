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
