"""FIFO as in YARN's capacity scheduler (YARN-CS): the usual baseline.

Strict arrival order, gang allocation, no preemption: when the job at the head
of the queue does not fit, nothing behind it starts (head-of-line blocking).
User priorities (live service) form tiers: a higher tier is served first,
arrival order within a tier.
"""

from __future__ import annotations

from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.policies.base import PlanBuilder, Policy


class Fifo(Policy):
    name = "fifo"
    description = "YARN-CS: strict arrival order, gang allocation, no preemption"

    def schedule(self, state: SchedulerState) -> Plan:
        builder = PlanBuilder(state)
        if state.free.total:
            order = state.pending_order
            if state.tiered:
                order = sorted(order, key=lambda i: -state.priority[i])
            for i in order:
                if not builder.place(i, self.placement):
                    break
        return builder.build()
