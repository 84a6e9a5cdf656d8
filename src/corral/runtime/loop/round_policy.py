"""Round planners (hare, sched-allox, sched-homo) driving the live service.

In ``corral serve`` a job given as a task runs as rounds (see
:mod:`corral.train.rounds`): the service makes each round's tasks into
one-GPU jobs of their own (:mod:`corral.runtime.loop.round_jobs`), and this policy
decides where and when each runs. At every pass it asks the same planner
``corral sim`` runs (:mod:`corral.policies.rounds.planners`) for a plan of every
unfinished job's remaining rounds, from now, on the GPUs as they are: a GPU
running a task is free when that task is expected to end. The tasks the
plan starts *now* (their GPU is free and their round may start) are
started; the rest wait for the next pass, which a task's end or the plan's
next planned start brings. So a round's tasks may run on GPUs of different
types and at different times, as Hare plans them.

A task's expected time on a GPU type is its job's estimate per task (the
owner's duration over the rounds and tasks for the first round; afterwards
the mean a round's tasks took) over the type's relative speed for its job
type, as every live policy reads speeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from corral.model.plan import Plan
from corral.model.state import PENDING, RUNNING, SchedulerState
from corral.policies.base import PlanBuilder, Policy
from corral.policies.rounds.listsched import PlanView
from corral.policies.rounds.planners import ROUND_PLANNERS, RoundPlanner
from corral.policies.rounds.workload import RoundWorkload
from corral.runtime.jobspec.specs import RoundOf

SOON = 1e-3
"""Seconds: a planned start this close to now is now."""
KEEPER_AFFINITY = SOON
"""The switching time the plan charges with round keepers: a tie-break (see
:attr:`LiveRounds.switch_s`)."""


def plans_rounds(policy: str) -> bool:
    """True when the service's policy (as its config names it) runs jobs as rounds."""
    return policy.strip().lower() in ROUND_PLANNERS


class LiveRounds(Policy):
    """A round planner as a live policy over the tasks of rounds (one-GPU jobs)."""

    name: ClassVar[str] = "rounds"

    def __init__(self, planner: RoundPlanner, **params: Any) -> None:
        super().__init__(None, **params)
        self.planner = planner
        self.round_of: Callable[[int], RoundOf | None] = lambda i: None
        """State row -> which job and round the task there belongs to (set by the service)."""
        self.last_on: dict[int, int] = {}
        """GPU -> the job whose task it ran last (no switch to run that job again)."""
        self.round_gpus: dict[int, tuple[RoundOf, list[int]]] = {}
        """Job -> the task that last started and the GPUs its round's tasks started on. As
        in the simulator's view, a round's planning looks first at the GPUs of the tasks
        of the round already started, else at those the last round ran on."""
        self.switch_s = 0.0
        """What the plan charges a task on a GPU that last ran another job (Hare's
        switching time). With round keepers the service sets it to a tie-break's
        worth (:data:`KEEPER_AFFINITY`): of GPUs that finish a task equally soon,
        the one whose keeper holds the job wins; the plan is otherwise unchanged."""

    @classmethod
    def named(cls, name: str, **options: Any) -> LiveRounds:
        from corral.policies import checked_options

        planner_cls = ROUND_PLANNERS[name.strip().lower()]
        try:
            planner = planner_cls(**checked_options(name, options))
        except TypeError as exc:
            raise TypeError(f"policy '{name}': {exc}") from None
        policy = cls(planner)
        policy.name = planner_cls.name  # type: ignore[misc]
        return policy

    def schedule(self, state: SchedulerState) -> Plan:
        builder = PlanBuilder(state)
        jobs: dict[int, dict[str, Any]] = {}
        for i in [*state.running, *state.pending]:
            ref = self.round_of(int(i))
            if ref is None:
                continue
            job = jobs.setdefault(
                ref.job, {"ref": ref, "pending": [], "running": [], "row": int(i)}
            )
            job["running" if state.status[i] == RUNNING else "pending"].append(int(i))
        self._forget_ended(set(jobs))
        if not any(j["pending"] for j in jobs.values()):
            return builder.build()
        return self._plan(state, builder, list(jobs.values()))

    def _plan(self, state: SchedulerState, builder: PlanBuilder, jobs: list[dict]) -> Plan:
        now = float(state.now)
        cluster = state.cluster
        n_gpus = cluster.total_gpus
        rows = np.array([j["row"] for j in jobs], dtype=np.int64)
        speed = state.type_speed[rows]
        per_task = state.total_steps[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            tau = np.where(speed > 0, per_task[:, None] / speed, np.inf)
        tau = np.where(np.isfinite(tau), np.maximum(tau, SOON), np.inf)
        req = state.type_req[rows]
        for p, t in enumerate(req.tolist()):
            if t >= 0:  # pinned to one GPU type
                keep = tau[p, t]
                tau[p] = np.inf
                tau[p, t] = keep
        refs: list[RoundOf] = [j["ref"] for j in jobs]
        work = RoundWorkload(
            job_ids=[str(r.job) for r in refs],
            submit=np.array([float(state.submit[r]) for r in rows]),
            weight=state.weight[rows].astype(float),
            tasks=np.array([r.parts for r in refs], dtype=np.int64),
            rounds=np.array([r.rounds for r in refs], dtype=np.int64),
            tau=tau,
            gpu_type=cluster.gpu_type_id,
            type_names=cluster.gpu_type_names,
            reference_time=per_task * np.array([r.rounds for r in refs]),
        )
        free_now = np.zeros(n_gpus, dtype=bool)
        free_now[builder.free.free_ids()] = True
        gpu_free = np.where(free_now, now, np.inf)
        partial = np.full(len(jobs), -np.inf)
        prev: list[list[int]] = []
        placed = np.zeros(len(jobs), dtype=np.int64)
        for p, j in enumerate(jobs):
            used = []
            done = j["ref"].parts - len(j["pending"]) - len(j["running"])
            placed[p] = done + len(j["running"])
            started = self.round_gpus.get(j["ref"].job)
            if started is not None:
                used.extend(started[1])
            for i in j["running"]:
                for gpu in state.alloc[i] or ():
                    t = int(cluster.gpu_type_id[gpu])
                    end = float(state.seg_start[i]) + float(tau[p, t])
                    gpu_free[gpu] = max(end, now + SOON)
                    partial[p] = max(partial[p], gpu_free[gpu])
                    used.append(int(gpu))
            prev.append(sorted(set(used)))
        last = np.full(n_gpus, -1, dtype=np.int64)
        position = {r.job: p for p, r in enumerate(refs)}
        for gpu, job in self.last_on.items():
            if job in position and gpu < n_gpus:
                last[gpu] = position[job]
        view = PlanView(
            now=now,
            jobs=np.arange(len(jobs), dtype=np.int64),
            next_round=np.array([r.round for r in refs], dtype=np.int64),
            placed_in_round=placed,
            ready=np.full(len(jobs), now),
            partial_end=partial,
            prev_gpus=prev,
            gpu_free=gpu_free,
            gpu_last=last,
            switch_s=self.switch_s,
        )
        tasks = self.planner.plan(work, view)
        waiting = [list(j["pending"]) for j in jobs]
        soonest: float | None = None
        for task in tasks:
            if task.round != refs[task.job].round or not waiting[task.job]:
                continue
            if task.start > now + SOON or not free_now[task.gpu]:
                if np.isfinite(task.start):
                    soonest = task.start if soonest is None else min(soonest, task.start)
                continue
            i = waiting[task.job].pop(0)
            builder.start(i, (task.gpu,))
            free_now[task.gpu] = False
            self._started(refs[task.job], task.gpu)
        return builder.build(None if soonest is None else max(soonest, now + SOON))

    def _started(self, ref: RoundOf, gpu: int) -> None:
        self.last_on[gpu] = ref.job
        started = self.round_gpus.get(ref.job)
        gpus = started[1] if started is not None and started[0].round == ref.round else []
        self.round_gpus[ref.job] = (ref, [*gpus, gpu])

    def _forget_ended(self, present: set[int]) -> None:
        """Jobs whose last round started and that have no task left have ended."""
        for job, (ref, _) in list(self.round_gpus.items()):
            if job not in present and ref.round + 1 == ref.rounds:
                del self.round_gpus[job]

    def waiting_reasons(self, state: SchedulerState) -> dict[int, str]:
        """A task waits for the GPU the plan chose, or for its round's turn."""
        return {int(i): "Rounds" for i in state.pending if self.round_of(int(i)) is not None}

    def view(self, state: SchedulerState, job: int) -> dict[str, str]:
        ref = self.round_of(job)
        if ref is None:
            return {}
        out = {
            "round": f"{ref.round + 1} of {ref.rounds}",
            "task": f"{ref.part + 1} of {ref.parts}",
        }
        if state.status[job] == PENDING:
            out["planner"] = self.planner.name
        return out
