"""One definition of every metric, used by every report.

JCT = finish - submit; queueing delay = first start - submit; weighted JCT =
sum of weight x JCT (Hare's objective); makespan = last finish - first submit;
GPU utilisation = busy GPU-seconds / (GPUs x makespan); offered load =
GPU-seconds demanded / (GPUs x submission span).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from corral.model.state import DONE, FAILED, STATUS_NAMES
from corral.sim.fairness import finish_time_fairness, jain_index
from corral.sim.result import SimResult
from corral.sim.step_function import step_integral


def jobs_frame(result: SimResult) -> pd.DataFrame:
    """One row per job, in submit order."""
    s = result.state
    return pd.DataFrame(
        {
            "job_id": s.job_ids,
            "submit": s.submit,
            "first_start": s.first_start,
            "finish": s.finish_time,
            "jct": s.finish_time - s.submit,
            "queueing": s.first_start - s.submit,
            "gpus": s.gpus,
            "duration": s.duration,
            "preemptions": s.preemptions,
            "failed_attempts": s.failures,
            "status": [STATUS_NAMES[k] for k in s.status],
            "attained_service": s.attained_base,
            "switch_overhead": s.overhead,
            "vc": result.jobs.df["vc"].to_numpy(),
            "user": result.jobs.df["user"].to_numpy(),  # (per-user fairness needs no join)
            "batch_mode": result.jobs.df["batch_mode"].to_numpy(),
        }
    )


def _fairness(result: SimResult) -> dict[str, float | None]:
    """Finish-time fairness (Themis' rho): the worst, the median, Jain's index."""
    rho = finish_time_fairness(result)
    rho = rho[np.isfinite(rho)]
    if not len(rho):
        return {"max_ftf_rho": None, "median_ftf_rho": None, "jain_ftf": None}
    return {
        "max_ftf_rho": float(rho.max()),
        "median_ftf_rho": float(np.median(rho)),
        "jain_ftf": jain_index(rho),
    }


def summarise(result: SimResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    s = result.state
    done = s.status == DONE
    jct = (s.finish_time - s.submit)[done]
    queueing = (s.first_start - s.submit)[done]
    makespan = float(np.max(s.finish_time[done]) - s.submit.min()) if done.any() else 0.0
    gpus = result.cluster.total_gpus

    def stat(values: np.ndarray, fn: Any) -> float | None:
        return float(fn(values)) if len(values) else None

    summary: dict[str, Any] = {
        "policy": result.policy.label,
        "oracle": result.policy.oracle,
        "placement": result.policy.placement.name,
        "cluster": result.cluster.name,
        "total_gpus": gpus,
        "jobs": len(s.submit),
        "jobs_finished": int(done.sum()),
        "jobs_rejected": len(result.rejected),
        "avg_jct_s": stat(jct, np.mean),
        "median_jct_s": stat(jct, np.median),
        "p95_jct_s": stat(jct, lambda v: np.percentile(v, 95)),
        "p99_jct_s": stat(jct, lambda v: np.percentile(v, 99)),
        "weighted_jct_s": float(np.sum(s.weight[done] * jct)),
        "makespan_s": makespan,
        "avg_queueing_s": stat(queueing, np.mean),
        "median_queueing_s": stat(queueing, np.median),
        "gpu_utilization": result.busy_gpu_seconds / (gpus * makespan) if makespan > 0 else 0.0,
        "offered_load": result.jobs.offered_load(gpus),
        "preemptions": int(s.preemptions.sum()),
        **_fairness(result),
        "failed_attempts": int(s.failures.sum()),
        "jobs_failed": int((s.status == FAILED).sum()),
        "switch_overhead_gpu_s": float(np.sum(s.overhead * s.gpus)),
        "events": result.events,
        "passes": result.passes,
        "wall_s": result.wall_s,
    }
    modes = result.jobs.df["batch_mode"].value_counts()
    if set(modes.index) != {"static"}:  # Shockwave's dynamic batch sizes: carried, not modelled
        summary["batch_size_modes"] = {str(k): int(v) for k, v in modes.items()}
    if extra:
        summary.update(extra)
    return summary


def timeline_frame(result: SimResult, bins: int = 500) -> pd.DataFrame:
    """Time-weighted averages of busy GPUs, queue length and running jobs per time bin."""
    tl = result.timeline
    if not tl.time:
        return pd.DataFrame(columns=["time", "gpu_utilization", "pending", "running"])
    t = np.asarray(tl.time)
    end = max(result.end_time, float(t[-1]))
    edges = np.linspace(float(t[0]), end if end > t[0] else t[0] + 1.0, bins + 1)
    out = {"time": (edges[:-1] + edges[1:]) / 2}
    for name, values, scale in (
        ("gpu_utilization", tl.busy_gpus, result.cluster.total_gpus),
        ("pending", tl.pending, 1),
        ("running", tl.running, 1),
    ):
        out[name] = _bin_average(t, np.asarray(values, dtype=float), edges) / scale
    return pd.DataFrame(out)


def _bin_average(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Average over each bin of the step function that takes value v[k] from t[k]."""
    return np.diff(step_integral(t, v, edges)) / np.diff(edges)
