"""Finish-time fairness of a finished run (Themis, NSDI'20), per job.

rho = the job's JCT in the shared cluster / its finish time in an independent
cluster of 1/N of the GPUs, N being the jobs contending while it was in the
system. Alone on its 1/N share a job runs at its speed averaged over the
cluster's GPU types (a share holds some of every type), slowed in proportion
when its gang is wider than the share (``G / N < gpus``). N here is the
time-average number of jobs present (waiting or running) over the job's own
lifetime, read from the run's timeline; Themis' policy uses the number present
at each decision, which the run's timeline samples at every pass.

rho below 1: the job did better than its fair share would have given it; the
largest rho over the jobs is Themis' headline metric, and Jain's index over
the rhos (1 when all are equal) its second.
"""

from __future__ import annotations

import numpy as np

from corral.model.state import DONE
from corral.sim.result import SimResult
from corral.sim.step_function import step_integral


def finish_time_fairness(result: SimResult) -> np.ndarray:
    """rho of every finished job (NaN for jobs that did not finish)."""
    s = result.state
    done = s.status == DONE
    rho = np.full(len(s.submit), np.nan)
    if not done.any():
        return rho
    t = np.asarray(result.timeline.time, dtype=np.float64)
    present = np.asarray(result.timeline.pending, dtype=np.float64) + np.asarray(
        result.timeline.running, dtype=np.float64
    )
    idx = np.flatnonzero(done)
    start, end = s.submit[idx], s.finish_time[idx]
    contending = _time_average(t, present, start, end)
    capacity = result.cluster.type_gpus.astype(np.float64)
    mean_speed = s.type_speed[idx] @ (capacity / capacity.sum())
    total = float(capacity.sum())
    share = np.minimum(1.0, total / np.maximum(contending, 1.0) / s.gpus[idx])
    isolated = s.total_steps[idx] / np.maximum(mean_speed * share, 1e-12)
    rho[idx] = (end - start) / np.maximum(isolated, 1e-12)
    return rho


def _time_average(
    t: np.ndarray, value: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """Average of the step function ``value`` (holding from each ``t`` to the next)
    over each interval ``[start, end]``, at least 1 (the job itself was there)."""
    if len(t) == 0:
        return np.ones(len(start))
    span = end - start
    mean = (step_integral(t, value, end) - step_integral(t, value, start)) / np.where(
        span > 0, span, 1.0
    )
    return np.where(span > 0, np.maximum(mean, 1.0), 1.0)


def jain_index(values: np.ndarray) -> float:
    """Jain's fairness index: 1 when all values are equal, 1/n at worst."""
    v = values[np.isfinite(values)]
    if not len(v) or not (v**2).sum():
        return 1.0
    return float(v.sum() ** 2 / (len(v) * (v**2).sum()))
