"""Every job ends: jobs that lose their work when preempted are not preempted for ever.

A job that never writes a checkpoint (a plain command, ``sleep 6`` or a
script without corral's training library) starts again from scratch after
each preemption. Under a policy with a quantum (LAS, Tiresias, Themis, Gavel's
rounds) such jobs can take the GPUs from each other for ever, each attempt cut
before it ends: eight 6-second jobs on 4 GPUs under LAS with a 3-second
quantum never finished.

The rule, the same in the simulator and the live service: a job whose
preemption would throw its work away is not preempted again before its
current run is at least **twice its longest lost run** (the run of an earlier
attempt that a preemption threw away). Its first run is the policy's to cut
(after the policy's own quantum); each later run is at least twice the one
before, so a job of length L is started at most about ``2 + log2(L / q)``
times for a first run of q, and always ends. Doubling rather than "as long as
the longest" is what makes it end: a run only as long as the last lost one
would be cut at the same point again.

The rule acts on a policy's plan after the policy made it
(:func:`keep_unsaved_work`): stops of protected jobs are dropped, with the
starts that needed their GPUs, and the plan asks for a pass when the first
protection ends. Policies need not know about it. Jobs that checkpoint (every
job of a trace unless it says otherwise, as the papers assume) are never
touched, and cost nothing: the function returns at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from corral.model.plan import Plan

if TYPE_CHECKING:
    from corral.model.state import SchedulerState

GROWTH = 2.0
"""A protected run lasts at least this many times the longest lost one."""


def protected_until(state: SchedulerState, i: int) -> float:
    """When running job ``i`` may be preempted again (``-inf``: now)."""
    if state.checkpoints[i] or state.lost_run[i] <= 0.0:
        return -np.inf
    return float(state.progress_start[i]) + GROWTH * float(state.lost_run[i])


def keep_unsaved_work(plan: Plan, state: SchedulerState) -> Plan:
    """``plan`` without the stops of jobs still protected by the rule above (and
    without the starts and packs that needed their GPUs); unchanged when no stop
    is held back."""
    if not plan.stops or state.all_checkpoint:
        return plan
    now = state.now
    held = [i for i in plan.stops if protected_until(state, i) > now]
    if not held:
        return plan
    kept = set(held)
    busy: set[int] = set()
    for i in held:
        busy.update(state.alloc[i] or ())
    starts = {
        i: gpus for i, gpus in plan.starts.items() if i not in kept and not busy.intersection(gpus)
    }
    dropped = set(plan.starts) - set(starts)
    wake = min(protected_until(state, i) for i in held)
    if plan.next_wakeup is not None:
        wake = min(wake, plan.next_wakeup)
    return Plan(
        starts=starts,
        stops=[i for i in plan.stops if i not in kept],
        next_wakeup=wake,
        packs={i: p for i, p in plan.packs.items() if i in starts},
        timeslices={i: q for i, q in plan.timeslices.items() if i not in dropped},
        respeeds=dict(plan.respeeds),
        factors={i: f for i, f in plan.factors.items() if i in starts},
        low_priority={i: f for i, f in plan.low_priority.items() if i in starts},
        batch_sizes={i: b for i, b in plan.batch_sizes.items() if i not in dropped},
        overheads={i: o for i, o in plan.overheads.items() if i in starts},
        prestage=list(plan.prestage),
        free_after=None,  # the plan's GPU records no longer hold: the engine redoes them
    )
