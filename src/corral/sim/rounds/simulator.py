"""Online execution of round planners: re-plan at every arrival, run the plan.

Task times are known, so between arrivals the plan is carried out exactly:
at each arrival, the planned tasks that have started are committed (they run
to their end), the rest are dropped, and the planner plans every unfinished
job again with the newcomers. The committed task log is the schedule; it is
checked for double-booked GPUs, round barriers and completeness.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from corral.optimize.hare_lp import relaxation
from corral.policies.rounds.listsched import PlanView, Task
from corral.policies.rounds.planners import RoundPlanner
from corral.policies.rounds.workload import RoundWorkload
from corral.sim.invariants import InvariantViolation


@dataclass
class RoundResult:
    work: RoundWorkload
    planner: RoundPlanner
    tasks: list[Task]
    finish: np.ndarray
    first_start: np.ndarray
    rejected: np.ndarray
    """Jobs wider than the cluster (never run)."""
    switch_s: float
    plans: int
    wall_s: float
    plan_wall_s: list[float] = field(default_factory=list)

    @property
    def jct(self) -> np.ndarray:
        return self.finish - self.work.submit

    def lower_bound(self, growth: float = 1.5) -> float:
        """Hare's relaxation of the whole instance, offline with release times:
        a lower bound on the weighted JCT of any schedule (online or not)."""
        w = self.work
        keep = ~self.rejected
        result = relaxation(
            release=w.submit[keep],
            weight=w.weight[keep],
            tasks=w.tasks[keep],
            rounds=w.rounds[keep].astype(float),
            tau=w.tau[keep],
            capacity=w.capacity(),
            growth=growth,
        )
        return result.bound - float(np.sum(w.weight[keep] * w.submit[keep]))

    def summary(self, within: float = 25 * 60) -> dict[str, float | int | str]:
        keep = ~self.rejected
        jct = self.jct[keep]
        busy = sum(t.end - t.start for t in self.tasks)
        switching = sum(t.switch for t in self.tasks)
        makespan = float(self.finish[keep].max() - self.work.submit.min()) if keep.any() else 0.0
        gpus = len(self.work.gpu_type)
        return {
            "policy": self.planner.name,
            "jobs": int(self.work.n),
            "jobs_finished": int(keep.sum()),
            "jobs_rejected": int((~keep).sum()),
            "total_gpus": gpus,
            "avg_jct_s": float(jct.mean()) if len(jct) else 0.0,
            "weighted_jct_s": float(np.sum(self.work.weight[keep] * jct)),
            "makespan_s": makespan,
            "done_within_25min": float((jct <= within).mean()) if len(jct) else 0.0,
            "switches": int(sum(1 for t in self.tasks if t.switch > 0)),
            "switch_overhead_share": float(switching / busy) if busy else 0.0,
            "gpu_utilization": float(busy / (gpus * makespan)) if makespan else 0.0,
            "plans": self.plans,
            "wall_s": self.wall_s,
        }

    def check(self) -> None:
        """Raise InvariantViolation unless the schedule is a valid one."""
        w = self.work
        by_gpu: dict[int, list[Task]] = {}
        for t in self.tasks:
            by_gpu.setdefault(t.gpu, []).append(t)
        for gpu, ts in by_gpu.items():
            ts.sort(key=lambda t: t.start)
            for a, b in itertools.pairwise(ts):
                if b.start < a.end - 1e-6:
                    raise InvariantViolation(f"GPU {gpu} runs two tasks at once at {b.start}")
        count = np.zeros(w.n, dtype=np.int64)
        round_end: dict[tuple[int, int], float] = {}
        round_start: dict[tuple[int, int], float] = {}
        for t in self.tasks:
            count[t.job] += 1
            key = (t.job, t.round)
            round_end[key] = max(round_end.get(key, -np.inf), t.end)
            round_start[key] = min(round_start.get(key, np.inf), t.start)
            if t.start < w.submit[t.job] - 1e-6:
                raise InvariantViolation(f"job {w.job_ids[t.job]} ran before it was submitted")
            # a task holds its GPU for at least its own time (a synchronised gang
            # holds every GPU until its slowest task ends)
            least = w.tau[t.job, w.gpu_type[t.gpu]] + t.switch
            if (t.end - t.start) < least - 1e-6 * max(1.0, least):
                raise InvariantViolation(f"a task of job {w.job_ids[t.job]} ran too briefly")
        keep = ~self.rejected
        if (count[keep] != (w.rounds * w.tasks)[keep]).any():
            raise InvariantViolation("a job ran more or fewer tasks than its rounds x GPUs")
        for (j, r), start in round_start.items():
            if r and start < round_end[(j, r - 1)] - 1e-6:
                raise InvariantViolation(
                    f"job {w.job_ids[j]} started round {r} before {r - 1} ended"
                )
        if (self.jct[keep] < w.critical_path()[keep] - 1e-6).any():
            raise InvariantViolation("a job finished faster than its critical path")


class RoundSimulator:
    def __init__(self, work: RoundWorkload, planner: RoundPlanner, switch_s: float) -> None:
        self.work = work
        self.planner = planner
        self.switch_s = float(switch_s)

    def run(self) -> RoundResult:
        wall0 = time.perf_counter()
        w = self.work
        n, n_gpus = w.n, len(w.gpu_type)
        runnable = np.isfinite(w.tau).any(axis=1)
        rejected = (w.tasks > n_gpus) | ~runnable
        next_round = np.zeros(n, dtype=np.int64)
        placed = np.zeros(n, dtype=np.int64)
        ready = w.submit.copy()
        partial = np.full(n, -np.inf)
        prev: list[list[int]] = [[] for _ in range(n)]
        finish = np.full(n, np.nan)
        first = np.full(n, np.nan)
        gpu_free = np.zeros(n_gpus)
        gpu_last = np.full(n_gpus, -1, dtype=np.int64)
        log: list[Task] = []
        plan: list[Task] = []
        plan_walls: list[float] = []
        order = np.argsort(w.submit, kind="stable")
        arrivals = np.unique(w.submit[order])
        present: list[int] = []
        cursor = 0

        def commit(task: Task) -> None:
            j = task.job
            log.append(task)
            gpu_free[task.gpu] = task.end
            gpu_last[task.gpu] = j
            if np.isnan(first[j]):
                first[j] = task.start
            if placed[j] == 0:
                prev[j] = []
            prev[j].append(task.gpu)
            placed[j] += 1
            partial[j] = max(partial[j], task.end)
            if placed[j] == w.tasks[j]:
                ready[j] = partial[j]
                partial[j] = -np.inf
                placed[j] = 0
                next_round[j] += 1
                if next_round[j] == w.rounds[j]:
                    finish[j] = ready[j]

        for at in [*arrivals.tolist(), np.inf]:
            for task in plan:
                if task.start < at:
                    commit(task)
            if at == np.inf:
                break
            while cursor < n and w.submit[order[cursor]] <= at:
                j = int(order[cursor])
                cursor += 1
                if not rejected[j]:
                    present.append(j)
            present = [j for j in present if np.isnan(finish[j])]
            jobs = np.array(present, dtype=np.int64)
            view = PlanView(
                now=float(at),
                jobs=jobs,
                next_round=next_round[jobs],
                placed_in_round=placed[jobs],
                ready=ready[jobs],
                partial_end=partial[jobs],
                prev_gpus=[prev[j] for j in present],
                gpu_free=np.maximum(gpu_free, at),
                gpu_last=gpu_last,
                switch_s=self.switch_s,
            )
            t0 = time.perf_counter()
            plan = self.planner.plan(w, view)
            plan_walls.append(time.perf_counter() - t0)
        return RoundResult(
            work=w,
            planner=self.planner,
            tasks=log,
            finish=finish,
            first_start=first,
            rejected=rejected,
            switch_s=self.switch_s,
            plans=len(plan_walls),
            wall_s=time.perf_counter() - wall0,
            plan_wall_s=plan_walls,
        )
