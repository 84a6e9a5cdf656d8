"""Workloads drawn from a real trace by the seed, so that an interval over seeds
covers the workload too, not only what else a seed draws (failures, job types,
a random placement). Replaying a trace as it is, every seed sees the same jobs,
and a 95% interval says nothing of how another week of the same cluster would
have come out; a reviewer means the latter.

Two ways, each a :class:`~corral.model.jobs.JobTable` like the trace's:

- ``window``: ``N`` consecutive jobs of the trace (``max_jobs``) from an offset
  the seed draws, uniformly over the trace, so each seed replays another stretch
  of the same cluster's history, its arrivals as they came;
- ``bootstrap``: ``N`` jobs (``max_jobs``, else as many as the trace has) drawn
  with replacement from the trace, arriving after gaps drawn with replacement
  from the trace's own gaps between submissions: the trace's mix of sizes and
  run times and its arrival rate, without its order (Efron's resampling; bursts
  longer than one gap are not kept).

The draws use a stream of their own (the seed with :data:`STREAM`), so failures
and job types drawn from the same seed are the same as without sampling.
"""

from __future__ import annotations

import numpy as np

from corral.errors import CorralError
from corral.model.jobs import JobTable

SAMPLES = ("window", "bootstrap")
STREAM = 0x5A4D
"""The draw's stream beside the seed (numpy's SeedSequence takes both)."""


def sample_workload(table: JobTable, how: str, jobs: int | None, seed: int) -> JobTable:
    """The jobs of ``table`` that seed ``seed`` draws ``how`` (see the module's text)."""
    how = how.strip().lower()
    if how not in SAMPLES:
        raise CorralError(f"--workload-sample: '{how}' is not one of {', '.join(SAMPLES)}")
    if len(table) == 0:
        return table
    rng = np.random.default_rng([seed, STREAM])
    if how == "window":
        if jobs is None:
            raise CorralError(
                "--workload-sample window: give --max-jobs, the window's length (a window "
                "of the whole trace is the trace)"
            )
        count = min(jobs, len(table))
        start = int(rng.integers(0, len(table) - count + 1))
        return table._replace(table.df.iloc[start : start + count].copy())
    count = jobs if jobs is not None else len(table)
    picked = rng.integers(0, len(table), size=count)
    df = table.df.iloc[picked].copy()
    submit = table.df["submit_time"].to_numpy(dtype=float)
    gaps = np.diff(submit)
    drawn = rng.choice(gaps, size=count - 1, replace=True) if len(gaps) else np.zeros(count - 1)
    df["submit_time"] = submit[0] + np.concatenate([[0.0], np.cumsum(drawn)])
    # a job drawn twice is two jobs: ids stay unique, saying which job each repeats
    df["job_id"] = [f"{job}~{k}" for k, job in enumerate(df["job_id"].astype(str))]
    return table._replace(df.reset_index(drop=True))
