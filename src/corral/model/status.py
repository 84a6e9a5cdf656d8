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
