"""Liquid's resource-requirement estimation: random forests trained online.

Liquid estimates what a job will need from features users give (job type, key
parameters such as the batch size, worker counts) with a random forest, trained
on jobs that ran before (deep-learning jobs are run again and again). corral
trains two online on the jobs that finished: one predicts a job's *run time* on
the GPUs it asked for (what pre-scheduling, which running job ends next, and
fine-grained sharing, which jobs are small dev/test runs, need); the other its
peak *GPU memory* per GPU (whether two small jobs fit one GPU together).

Features: the job type, the batch size read from it (``ResNet-50 (batch size
64)``), the GPUs asked for, the virtual cluster, and recent history, which is
what predicts in practice (teams run the same job again and again): the mean
log of the target over the owner's last ``recent`` finished jobs and the
last one's, the same over the VC's, and the VC's last finished job of the same
size. On the Philly trace (no owners, job types drawn at random) these took
the forest's online R² of log run time from -0.23 (owner's all-time mean, type
and size) to the figure on the Liquid validation page. The forest is refitted
every ``refit_every`` finished jobs on the last ``window`` of them; until it
has ``min_samples`` it answers the owner's recent mean, else the VC's, else
the overall median (the run-time estimator) or nothing (the memory estimator).
"""

from __future__ import annotations

import math
import re
from collections import deque
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
        recent: int = 50,
    ) -> None:
        self.min_samples = min_samples
        self.refit_every = refit_every
        self.window = window
        self.trees = trees
        self.seed = seed
        self.recent = recent
        self._types: dict[str, int] = {}
        self._vcs: dict[str, int] = {}
        self._history: dict[tuple[str, str], deque[float]] = {}
        """("user" | "vc", name) -> log values of its last ``recent`` finished jobs."""
        self._last_of_size: dict[tuple[str, int], float] = {}
        """(VC, GPUs) -> log value of its last finished job of that size."""
        self._x: list[list[float]] = []
        self._y: list[float] = []
        self._since_fit = 0
        self.model: Any = None
        self.fits = 0

    def _recent(self, kind: str, name: str) -> tuple[float, float]:
        """(mean, last) of the recent log values of an owner or VC (NaN: none yet,
        or no name: a trace without owners has no owner's history)."""
        seen = self._history.get((kind, name)) if name else None
        if not seen:
            return math.nan, math.nan
        return sum(seen) / len(seen), seen[-1]

    def features(self, state: SchedulerState, i: int) -> list[float]:
        job_type = state.job_type[i]
        code = self._types.setdefault(job_type, len(self._types))
        vc = self._vcs.setdefault(state.vc[i], len(self._vcs))
        match = _BATCH.search(job_type)
        user_mean, user_last = self._recent("user", state.user[i])
        vc_mean, vc_last = self._recent("vc", state.vc[i])
        same_size = self._last_of_size.get((state.vc[i], int(state.gpus[i])), math.nan)
        return [
            float(code),
            float(match[1]) if match else 0.0,
            float(state.gpus[i]),
            user_mean,
            user_last,
            float(vc),
            vc_mean,
            vc_last,
            same_size,
        ]

    def observe(self, state: SchedulerState, i: int, value: float) -> None:
        """Learn from a job that finished, having needed ``value``."""
        if not value > 0:
            return
        self._x.append(self.features(state, i))
        logged = math.log(value)
        self._y.append(logged)
        for key in (("user", state.user[i]), ("vc", state.vc[i])):
            if key[1]:
                self._history.setdefault(key, deque(maxlen=self.recent)).append(logged)
        self._last_of_size[(state.vc[i], int(state.gpus[i]))] = logged
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
        fitted: the owner's recent mean, else the VC's, else what the job's owner
        stated (``stated``, live only: a trace's durations are the truth), else the
        median seen so far (:attr:`unknown` before any)."""
        if not idx:
            return np.zeros(0)
        raw = np.asarray([self.features(state, i) for i in idx], dtype=np.float64)
        if self.model is not None:
            return np.exp(self.model.predict(np.nan_to_num(raw, nan=-1.0)))
        fallback = np.full(
            len(idx), math.exp(float(np.median(self._y))) if self._y else self.unknown
        )
        if stated is not None:
            fallback = np.where(np.isfinite(stated) & (stated > 0), stated, fallback)
        recent = np.where(np.isfinite(raw[:, 3]), raw[:, 3], raw[:, 6])  # owner's, else VC's
        return np.where(np.isfinite(recent), np.exp(np.clip(recent, -50, 50)), fallback)


class RunTimeEstimator(ForestEstimator):
    """Run time in seconds on the GPUs asked for (an hour before anything is learned)."""


class MemoryEstimator(ForestEstimator):
    """Peak GPU memory per GPU, GB, as measured (live: heartbeats; simulated:
    the job type's footprint); unknown (NaN) until some job's was seen."""

    unknown = math.nan
