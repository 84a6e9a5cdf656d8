"""Liquid's resource-requirement estimation: random forests trained online.

Liquid estimates what a job will need from features users give (job type, key
parameters such as the batch size, worker counts) with a random forest, trained
on jobs that ran before (deep-learning jobs are run again and again). corral
trains two online on the jobs that finished: one predicts a job's *run time* on
the GPUs it asked for (what pre-scheduling, which running job ends next, and
fine-grained sharing, which jobs are small dev/test runs, need); the other its
peak *GPU memory* per GPU (whether two small jobs fit one GPU together).

Features: the job type, the batch size read from it (``ResNet-50 (batch size
64)``), the GPUs asked for, and the owner's history (the mean log of the
target over their finished jobs, and how many there were). The forest is
refitted every ``refit_every`` finished jobs on the last ``window`` of them;
until it has ``min_samples`` it answers the owner's mean, else the overall
median (the run-time estimator) or nothing (the memory estimator).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from corral.model.state import SchedulerState

_BATCH = re.compile(r"\(batch size (\d+)\)")


class ForestEstimator:
    """A positive quantity per job, learned as its log by a random forest."""

    unknown: float = 3600.0
    """The answer before anything was learned (NaN: say it is unknown)."""

    def __init__(
        self,
        min_samples: int = 50,
        refit_every: int = 2000,
        window: int = 4000,
        trees: int = 20,
        seed: int = 0,
    ) -> None:
        self.min_samples = min_samples
        self.refit_every = refit_every
        self.window = window
        self.trees = trees
        self.seed = seed
        self._types: dict[str, int] = {}
        self._users: dict[str, list[float]] = {}
        """Owner -> [sum of log values, count]."""
        self._x: list[list[float]] = []
        self._y: list[float] = []
        self._since_fit = 0
        self.model: Any = None
        self.fits = 0

    def features(self, state: SchedulerState, i: int) -> list[float]:
        job_type = state.job_type[i]
        code = self._types.setdefault(job_type, len(self._types))
        match = _BATCH.search(job_type)
        user = self._users.get(state.user[i])
        mean = user[0] / user[1] if user else math.nan
        count = user[1] if user else 0.0
        return [float(code), float(match[1]) if match else 0.0, float(state.gpus[i]), mean, count]

    def observe(self, state: SchedulerState, i: int, value: float) -> None:
        """Learn from a job that finished, having needed ``value``."""
        if not value > 0:
            return
        self._x.append(self.features(state, i))
        self._y.append(math.log(value))
        total = self._users.setdefault(state.user[i], [0.0, 0.0])
        total[0] += math.log(value)
        total[1] += 1.0
        self._since_fit += 1
        if len(self._y) >= self.min_samples and (
            self.model is None or self._since_fit >= self.refit_every
        ):
            self._fit()

    def _fit(self) -> None:
        from sklearn.ensemble import RandomForestRegressor

        x = np.nan_to_num(np.asarray(self._x[-self.window :]), nan=-1.0)
        y = np.asarray(self._y[-self.window :])
        model = RandomForestRegressor(
            n_estimators=self.trees, max_depth=12, min_samples_leaf=3, random_state=self.seed
        )
        model.fit(x, y)
        self.model = model
        self._since_fit = 0
        self.fits += 1
        del self._x[: -self.window], self._y[: -self.window]

    def predict(
        self, state: SchedulerState, idx: list[int], stated: np.ndarray | None = None
    ) -> np.ndarray:
        """The expected value for each job of ``idx``. Before the forest is
        fitted: the owner's mean, else what the job's owner stated (``stated``, live
        only: a trace's durations are the truth), else the median seen so far
        (:attr:`unknown` before any)."""
        if not idx:
            return np.zeros(0)
        rows = np.nan_to_num(np.asarray([self.features(state, i) for i in idx]), nan=-1.0)
        if self.model is not None:
            return np.exp(self.model.predict(rows))
        fallback = np.full(
            len(idx), math.exp(float(np.median(self._y))) if self._y else self.unknown
        )
        if stated is not None:
            fallback = np.where(np.isfinite(stated) & (stated > 0), stated, fallback)
        means, seen = rows[:, 3], rows[:, 4]
        return np.where(seen > 0, np.exp(np.clip(means, -50, 50)), fallback)


class RunTimeEstimator(ForestEstimator):
    """Run time in seconds on the GPUs asked for (an hour before anything is learned)."""


class MemoryEstimator(ForestEstimator):
    """Peak GPU memory per GPU, GB, as measured (live: heartbeats; simulated:
    the job type's footprint); unknown (NaN) until some job's was seen."""

    unknown = math.nan
