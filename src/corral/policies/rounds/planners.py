"""Round planners: Hare and the two baselines Hare compares against.

* ``hare``: order jobs by Hare's relaxation (:mod:`corral.optimize.hare_lp`),
  then give each task the GPU where it finishes earliest, with intra-job
  parallelism (a round's tasks on any types, at any times).
* ``sched-allox``: heterogeneity-aware but without intra-job parallelism:
  AlloX's matching orders the jobs and picks a type; a round's tasks run
  together on GPUs of one type.
* ``sched-homo``: heterogeneity-oblivious: it sees every GPU as alike, orders
  by weighted shortest job first on the cluster's average speed (Smith's
  rule), and runs each round on the GPUs free earliest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from corral.optimize.hare_lp import relaxation
from corral.optimize.matching import min_total_completion
from corral.policies.options import Option
from corral.policies.rounds.listsched import PlanView, Task, list_schedule
from corral.policies.rounds.workload import RoundWorkload


class RoundPlanner(ABC):
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    options: ClassVar[dict[str, Option]] = {}
    mode: ClassVar[str] = "tasks"

    @abstractmethod
    def order(self, work: RoundWorkload, view: PlanView) -> np.ndarray:
        """The jobs of ``view.jobs`` in the order they are placed."""

    def plan(self, work: RoundWorkload, view: PlanView) -> list[Task]:
        if not len(view.jobs):
            return []
        return list_schedule(work, view, self.order(work, view), self.mode)


def remaining_rounds(work: RoundWorkload, view: PlanView) -> np.ndarray:
    """Rounds left per job (a partly placed round counts in proportion)."""
    j = view.jobs
    out: np.ndarray = work.rounds[j] - view.next_round - view.placed_in_round / work.tasks[j]
    return out


class HarePlanner(RoundPlanner):
    name = "hare"
    options: ClassVar[dict[str, Option]] = {
        "growth": Option(
            "ratio of successive intervals of the relaxation LP (coarser is faster)", above=1
        ),
    }
    description = (
        "Hare: relaxation LP orders the jobs; each task to the GPU where it finishes "
        "earliest (intra-job parallelism across GPU types)"
    )
    mode = "tasks"
    """``growth``: ratio of successive LP intervals (coarser is faster; the order
    barely changes)."""

    def __init__(self, growth: float = 2.0) -> None:
        self.growth = growth
        self.last_bound: float | None = None

    def order(self, work: RoundWorkload, view: PlanView) -> np.ndarray:
        j = view.jobs
        result = relaxation(
            release=np.maximum(view.ready, view.now),
            weight=work.weight[j],
            tasks=work.tasks[j],
            rounds=np.maximum(remaining_rounds(work, view), 1e-9),
            tau=work.tau[j],
            capacity=work.capacity(),
            growth=self.growth,
        )
        self.last_bound = result.bound
        out: np.ndarray = j[result.order()]
        return out


class SchedAlloxPlanner(RoundPlanner):
    name = "sched-allox"
    description = (
        "Hare's Sched_Allox: AlloX's matching orders jobs; a round's tasks run together "
        "on one GPU type (no intra-job parallelism)"
    )
    mode = "gang-type"

    def order(self, work: RoundWorkload, view: PlanView) -> np.ndarray:
        j = view.jobs
        capacity = work.capacity().astype(float)
        left = remaining_rounds(work, view)
        times = left[:, None] * work.tau[j] * work.tasks[j, None] / capacity[None, :]
        times = np.where(work.tasks[j, None] <= capacity[None, :], times, np.inf)
        # a job wider than every type runs across types: the whole cluster at its slowest pace
        slowest = np.where(np.isfinite(work.tau[j]), work.tau[j], 0.0).max(axis=1)
        across = left * slowest * work.tasks[j] / capacity.sum()
        wide = ~np.isfinite(times).any(axis=1)
        times[wide] = across[wide, None]
        starts: list[tuple[float, int]] = []
        for t, seq in enumerate(min_total_completion(times)):
            clock = 0.0
            for r in seq:
                starts.append((clock, int(j[r])))
                clock += float(times[r, t])
        starts.sort()
        return np.array([job for _, job in starts], dtype=np.int64)


class SchedHomoPlanner(RoundPlanner):
    name = "sched-homo"
    description = (
        "Hare's Sched_Homo: heterogeneity-oblivious weighted shortest job first; rounds "
        "on the GPUs free earliest"
    )
    mode = "gang-any"

    def order(self, work: RoundWorkload, view: PlanView) -> np.ndarray:
        j = view.jobs
        capacity = work.capacity().astype(float)
        tau = np.where(np.isfinite(work.tau[j]), work.tau[j], 0.0)
        blind = tau @ (capacity / capacity.sum())  # the average GPU's time: types unseen
        size = remaining_rounds(work, view) * blind * work.tasks[j]
        return j[np.lexsort((view.jobs, size / work.weight[j]))]


ROUND_PLANNERS: dict[str, type[RoundPlanner]] = {
    cls.name: cls for cls in (HarePlanner, SchedAlloxPlanner, SchedHomoPlanner)
}
