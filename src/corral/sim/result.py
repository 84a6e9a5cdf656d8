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
    charge_first_start: bool = False
    """Charge ``switch_cost`` at a job's first start too (Pollux's artifact charges
    every allocation; corral's default charges only restarts: a first start restores
    nothing)."""
    decide_every: float = 0.0
    """Seconds between the policy's passes, on a fixed grid from time 0 (0: a pass at
    every event). With a grid, arrivals wait and GPUs a job frees stay idle until the
    next tick, as in simulators that step time in intervals (Pollux's artifact: 60 s)."""
    speeds: SpeedModel = field(default_factory=SpeedModel)
    """Steps/s of a job on its GPUs: GPU types, gang size, locality."""
    check_invariants: bool = False
    """Check the bookkeeping after every pass (slow; tests switch it on)."""
    max_time: float = math.inf
    """Stop the simulation at this simulated time (jobs left unfinished)."""
    failure_rate: float = 0.0
    """Chance that one attempt of a job fails (at a uniformly drawn point of it)."""
    failure_rates: tuple[tuple[int, int, float], ...] = ()
    """Chances by gang size, ``(min GPUs, max GPUs, chance)``, overriding
    ``failure_rate`` for the sizes they cover (see :func:`parse_failure_rates`;
    a Philly job log's own rates come from ``corral trace-stats``)."""
    max_retries: int = 3
    """Failed attempts retried per job; after that the job ends as FAILED."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.decide_every >= 0.0 and math.isfinite(self.decide_every)):
            raise CorralError(
                f"decide_every must be 0 or a number of seconds, not {self.decide_every}"
            )
        if not 0.0 <= self.failure_rate < 1.0:
            raise CorralError(f"failure rate must be in [0, 1), got {self.failure_rate}")
        if self.max_retries < 0:
            raise CorralError(f"max retries must be >= 0, got {self.max_retries}")
        for _, _, rate in self.failure_rates:
            if not 0.0 <= rate < 1.0:
                raise CorralError(f"failure rates must be in [0, 1), got {rate}")

    @property
    def injects_failures(self) -> bool:
        return self.failure_rate > 0 or any(rate > 0 for _, _, rate in self.failure_rates)

    def attempt_failure_rate(self, gpus: int) -> float:
        """The chance that an attempt of a ``gpus``-GPU job fails."""
        for lo, hi, rate in self.failure_rates:
            if lo <= gpus <= hi:
                return rate
        return self.failure_rate


def parse_failure_rates(text: str) -> tuple[tuple[int, int, float], ...]:
    """``1:0.05,2-4:0.1,5-8:0.2,9-:0.3`` -> ((1, 1, .05), (2, 4, .1), (5, 8, .2), (9, inf, .3)):
    a chance per attempt for each range of gang sizes (``9-``: 9 GPUs or more)."""
    out: list[tuple[int, int, float]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        sizes, sep, value = part.partition(":")
        lo_text, dash, hi_text = sizes.strip().partition("-")
        try:
            if not sep:
                raise ValueError
            lo = int(lo_text)
            hi = (int(hi_text) if hi_text.strip() else 1 << 30) if dash else lo
            rate = float(value)
        except ValueError:
            raise CorralError(
                f"--failure-rates: '{part}' is not SIZES:CHANCE (e.g. 1:0.05, 2-4:0.1, 9-:0.3)"
            ) from None
        if lo < 1 or hi < lo:
            raise CorralError(f"--failure-rates: '{sizes}' is not a range of GPU counts")
        if not 0.0 <= rate < 1.0:
            raise CorralError(f"--failure-rates: the chance in '{part}' must be in [0, 1)")
        if any(a <= hi and lo <= b for a, b, _ in out):
            raise CorralError(f"--failure-rates: '{sizes}' overlaps an earlier range")
        out.append((lo, hi, rate))
    return tuple(out)


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
