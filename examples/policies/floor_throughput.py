"""Most total throughput with a floor for every job: a complete LP policy in one file.

Gavel's policies are linear programs over an allocation ``X`` (jobs x GPU
types: the share of time each job spends on each type); corral's
:class:`~corral.policies.gavel.GavelPolicy` turns any such ``X`` into rounds
of starts and stops (Gavel's priorities and rounds), live and in the
simulator. A new LP policy only says what ``X`` is: it overrides
``allocate(state, jobs)`` and returns one row per job of ``jobs``, one column
per GPU type of ``state.cluster``.

This one gives each job at least ``floor`` of the normalised throughput it
would have on an equal share of the cluster, and spends what is left on the
most total normalised throughput (steps/s over the job's isolated steps/s),
solved with SciPy's HiGHS:

    corral compare --trace gavel-synthetic:jobs=60,rate=20 --cluster gavel:4:4:4 \\
        --policies gavel-max-min-fairness,examples/policies/floor_throughput.py:FloorThroughput \\
        --policy-opt floor=0.5 --out runs/floor

``docs/writing-a-policy.md`` walks through it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from scipy.optimize import linprog

from corral.model.state import SchedulerState
from corral.placement.strategies import PlacementStrategy
from corral.policies.gavel import GavelPolicy
from corral.policies.options import Option


class FloorThroughput(GavelPolicy):
    name = "floor-throughput"
    description = "most total throughput, each job kept to a floor of its fair share's (LP)"
    options: ClassVar[dict[str, Option]] = {
        **GavelPolicy.options,
        "floor": Option("share of its equal-share throughput each job is given", low=0, high=1),
    }

    def __init__(
        self, placement: PlacementStrategy | None = None, floor: float = 0.5, **params: Any
    ) -> None:
        super().__init__(placement, **params)
        self.floor = float(floor)

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        problem = self._problem(state, jobs)  # throughputs, gang sizes, GPUs per type
        n, k = problem.n, problem.k
        fits = problem.fits()
        isolated = problem.isolated_throughput()  # 0 for a gang no one type can hold
        runs = isolated > 0
        speed = np.zeros((n, k))
        speed[runs] = problem.throughput[runs] * fits[runs] / isolated[runs, None]
        # variables: X flattened row by row (job j on type t at j * k + t)
        rows, bounds = [], []
        for j in range(n):  # each job runs at most all of the time
            row = np.zeros(n * k)
            row[j * k : (j + 1) * k] = 1.0
            rows.append(row)
            bounds.append(1.0)
        for t in range(k):  # each type's GPUs: the gangs placed there fit
            row = np.zeros(n * k)
            row[t::k] = problem.gpus
            rows.append(row)
            bounds.append(float(problem.capacity[t]))
        for j in np.flatnonzero(runs):  # the floor: speed.X >= floor, as -speed.X <= -floor
            row = np.zeros(n * k)
            row[j * k : (j + 1) * k] = -speed[j]
            rows.append(row)
            bounds.append(-self.floor)
        limits = [(0.0, 1.0 if fits.flat[v] else 0.0) for v in range(n * k)]
        answer = linprog(
            -speed.ravel(), A_ub=np.array(rows), b_ub=np.array(bounds), bounds=limits,
            method="highs",
        )  # fmt: skip
        if answer.status != 0:  # the floor cannot be met for everyone: Gavel's max-min instead
            return super().allocate(state, jobs)
        return np.asarray(answer.x).reshape(n, k)
