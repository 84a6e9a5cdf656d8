"""Shortest-first with a starvation guard: a complete corral policy in one file.

Waiting jobs start shortest expected run time first, except that a job that
has waited longer than ``max_wait`` seconds goes ahead of every job that has
not (oldest first): short jobs finish fast, and a long job is never passed
over for ever. No preemption; gangs are placed by the policy's placement
strategy (consolidated by default).

Run it from this file, as it is:

    corral compare --trace philly --max-jobs 2000 --cluster philly --cluster-scale 0.17 \\
        --policies fifo,sjf,examples/policies/shortest_first.py:ShortestFirst \\
        --policy-opt max_wait=7200 --out runs/shortest-first

or in ``corral serve`` with ``policy: /path/to/shortest_first.py:ShortestFirst``
in the service's configuration. ``docs/writing-a-policy.md`` walks through it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy
from corral.policies.options import Option


class ShortestFirst(Policy):
    name = "shortest-first"
    description = "shortest expected run time first; jobs waiting over max_wait go first"
    reads_durations = True  # live, durations come from the job's 'duration' or estimates
    options: ClassVar[dict[str, Option]] = {
        "max_wait": Option("seconds a job may wait before it goes first", above=0),
    }

    def __init__(self, placement: PlacementStrategy | None = None, max_wait: float = 3600.0):
        super().__init__(placement)
        self.max_wait = float(max_wait)  # checked against its declaration before it arrives

    def schedule(self, state: SchedulerState) -> Plan:
        builder = PlanBuilder(state)
        waiting = state.pending.array()
        if not len(waiting) or not state.free.total:
            return builder.build()
        waited = state.now - state.queued_since[waiting]
        starved = waited >= self.max_wait
        # starved jobs first (longest waiting first), then the rest shortest first
        order = np.lexsort((state.remaining_time(waiting), -waited * starved, ~starved))
        for i in waiting[order].tolist():
            if builder.free.total == 0:
                break
            builder.place(i, self.placement)  # a job that does not fit now is skipped
        # wake up when the next waiting job becomes starved, so it is served on time
        left = self.max_wait - waited[~starved]
        wake = state.now + float(left.min()) if len(left) else None
        return builder.build(wake)
