"""What the simulator is given besides jobs and policy (:class:`SimConfig`) and
what it hands back (:class:`SimResult`, with its :class:`Timeline`).

They live apart from the engine so that the invariant checker, the metrics and
the reports can read a result without importing the engine that made it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from corral.errors import CorralError
from corral.model.cluster import Cluster
from corral.model.jobs import JobTable
from corral.model.state import SchedulerState
from corral.perf.speeds import SpeedModel
from corral.perf.switching import switch_cost_seconds
from corral.policies.base import Policy


@dataclass
class SimConfig:
    switch_cost: float = field(default_factory=lambda: switch_cost_seconds(None))
    """Seconds of GPU time lost each time a preempted job starts again."""
    speeds: SpeedModel = field(default_factory=SpeedModel)
    """Steps/s of a job on its GPUs: GPU types, gang size, locality."""
    check_invariants: bool = False
    """Check the bookkeeping after every pass (slow; tests switch it on)."""
    max_time: float = math.inf
    """Stop the simulation at this simulated time (jobs left unfinished)."""
    failure_rate: float = 0.0
    """Chance that one attempt of a job fails (at a uniformly drawn point of it)."""
    max_retries: int = 3
    """Failed attempts retried per job; after that the job ends as FAILED."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.failure_rate < 1.0:
            raise CorralError(f"failure rate must be in [0, 1), got {self.failure_rate}")
        if self.max_retries < 0:
            raise CorralError(f"max retries must be >= 0, got {self.max_retries}")


@dataclass
class Timeline:
    """Samples taken after each scheduling pass."""

    time: list[float] = field(default_factory=list)
    busy_gpus: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)


@dataclass
class SimResult:
    state: SchedulerState
    policy: Policy
    cluster: Cluster
    jobs: JobTable
    config: SimConfig
    events: int
    passes: int
    wall_s: float
    end_time: float
    busy_gpu_seconds: float
    rejected: list[int]
    timeline: Timeline
