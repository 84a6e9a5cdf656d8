"""A round-model run as the common output of :mod:`corral.sim.output`.

Its ``jobs.csv``, ``timeline.csv`` and ``summary.json`` carry the same
columns and keys as a gang-engine run's, so ``corral compare`` can put Hare
and its baselines in one report beside the gang-engine policies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from corral.sim.output import RunOutput, write_outputs
from corral.sim.rounds.simulator import RoundResult


def round_jobs_frame(result: RoundResult) -> pd.DataFrame:
    w = result.work
    status = np.where(
        result.rejected, "REJECTED", np.where(np.isnan(result.finish), "PENDING", "DONE")
    )
    switches = np.zeros(w.n)
    for t in result.tasks:
        switches[t.job] += t.switch
    return pd.DataFrame(
        {
            "job_id": w.job_ids,
            "submit": w.submit,
            "first_start": result.first_start,
            "finish": result.finish,
            "jct": result.jct,
            "queueing": result.first_start - w.submit,
            "gpus": w.tasks,
            "rounds": w.rounds,
            "weight": w.weight,
            "duration": w.reference_time,
            "status": status,
            "switch_overhead": switches,
        }
    )


def round_timeline(result: RoundResult, bins: int = 500) -> pd.DataFrame:
    """Busy share of the GPUs, and waiting / running jobs, per time bin."""
    w = result.work
    start = float(w.submit.min()) if w.n else 0.0
    end = float(np.nanmax(result.finish)) if np.isfinite(result.finish).any() else start + 1.0
    edges = np.linspace(start, max(end, start + 1.0), bins + 1)
    busy = np.zeros(bins)
    width = np.diff(edges)
    for t in result.tasks:
        lo, hi = np.searchsorted(edges, [t.start, t.end], side="right") - 1
        for b in range(max(lo, 0), min(hi, bins - 1) + 1):
            busy[b] += max(0.0, min(t.end, edges[b + 1]) - max(t.start, edges[b]))
    mid = (edges[:-1] + edges[1:]) / 2
    started = np.where(np.isnan(result.first_start), np.inf, result.first_start)
    finished = np.where(np.isnan(result.finish), np.inf, result.finish)
    arrived = w.submit[None, :] <= mid[:, None]
    pending = (arrived & (started[None, :] > mid[:, None])).sum(axis=1)
    running = ((started[None, :] <= mid[:, None]) & (finished[None, :] > mid[:, None])).sum(axis=1)
    return pd.DataFrame(
        {
            "time": mid,
            "gpu_utilization": busy / (width * len(w.gpu_type)),
            "pending": pending,
            "running": running,
        }
    )


def summarise_rounds(result: RoundResult, offered_load: float) -> dict[str, Any]:
    summary: dict[str, Any] = dict(result.summary())
    jct = result.jct[~result.rejected & np.isfinite(result.finish)]
    queue = (result.first_start - result.work.submit)[~result.rejected]
    summary |= {
        "oracle": False,
        "placement": "per task",
        "median_jct_s": float(np.median(jct)) if len(jct) else None,
        "p95_jct_s": float(np.percentile(jct, 95)) if len(jct) else None,
        "p99_jct_s": float(np.percentile(jct, 99)) if len(jct) else None,
        "avg_queueing_s": float(np.nanmean(queue)) if len(queue) else None,
        "preemptions": 0,
        "offered_load": offered_load,
        "switch_overhead_gpu_s": float(sum(t.switch for t in result.tasks)),
        "switch_seconds": result.switch_s,
    }
    return summary


def round_output(
    result: RoundResult, offered_load: float, extra: dict[str, Any] | None = None
) -> RunOutput:
    summary = summarise_rounds(result, offered_load) | (extra or {})
    return RunOutput(round_jobs_frame(result), round_timeline(result), summary)


def write_round_run(
    result: RoundResult,
    out_dir: str | Path,
    offered_load: float,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return write_outputs(round_output(result, offered_load, extra), out_dir)
