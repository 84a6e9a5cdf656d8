"""Oracle baselines that know every job's duration: SJF and preemptive SRTF."""

from __future__ import annotations

import numpy as np

from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.policies.base import Policy
from corral.policies.priority import priority_pass, tie_resolution


class Sjf(Policy):
    name = "sjf"
    description = "shortest job first by known duration, no preemption, skips jobs that do not fit"
    oracle = True
    reads_durations = True

    def schedule(self, state: SchedulerState) -> Plan:
        def key(idx: np.ndarray) -> np.ndarray:
            return tie_resolution(state.remaining_time(idx))

        return priority_pass(state, self.placement, key).build()


class Srtf(Policy):
    name = "srtf"
    description = "shortest remaining time first by known duration, preemptive"
    oracle = True
    reads_durations = True

    def schedule(self, state: SchedulerState) -> Plan:
        def key(idx: np.ndarray) -> np.ndarray:
            return tie_resolution(state.remaining_time(idx))

        return priority_pass(state, self.placement, key, running_key=key).build()
