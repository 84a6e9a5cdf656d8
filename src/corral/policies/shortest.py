"""Oracle baselines that know every job's duration: SJF and preemptive SRTF.

Both rank by the time a job has left, or (``by=gpu-time``) by the GPU-time it
has left, its time times its GPUs: Tiresias' ``shortest-gpu`` baseline, under
which a wide job waits behind narrow ones of the same length.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import Policy
from corral.policies.options import Option
from corral.policies.priority import priority_pass, tie_resolution

BY = ("time", "gpu-time")


class _Shortest(Policy):
    """What both rank by (see the module's docstring)."""

    oracle = True
    reads_durations = True
    options: ClassVar[dict[str, Option]] = {
        "by": Option(
            "rank by the time left, or by the GPU-time left (time x GPUs: Tiresias' shortest-gpu)",
            "choice",
            choices=BY,
        ),
    }

    def __init__(
        self, placement: PlacementStrategy | None = None, by: str = "time", **params: Any
    ) -> None:
        super().__init__(placement, **params)
        if by not in BY:
            raise ValueError(f"by must be one of {', '.join(BY)}, got '{by}'")
        self.by = by

    def key(self, state: SchedulerState, idx: np.ndarray) -> np.ndarray:
        left = state.remaining_time(idx)
        if self.by == "gpu-time":
            left = left * state.gpus[idx]
        return tie_resolution(left)


class Sjf(_Shortest):
    name = "sjf"
    description = "shortest job first by known duration, no preemption, skips jobs that do not fit"

    def schedule(self, state: SchedulerState) -> Plan:
        return priority_pass(state, self.placement, lambda idx: self.key(state, idx)).build()


class Srtf(_Shortest):
    name = "srtf"
    description = "shortest remaining time first by known duration, preemptive"

    def schedule(self, state: SchedulerState) -> Plan:
        def key(idx: np.ndarray) -> np.ndarray:
            return self.key(state, idx)

        return priority_pass(state, self.placement, key, running_key=key).build()
