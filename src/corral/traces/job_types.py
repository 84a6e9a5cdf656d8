"""Giving generic jobs measured job types, so type-aware policies have something to read.

Philly and Tiresias traces know only durations. Gavel's evaluation draws each
job's type uniformly from the types it measured; ``--job-types gavel`` does
the same (seeded) for jobs whose type is ``generic``, choosing among the types
measured at the job's GPU count when there are any (and that run there on
every measured GPU type). As in Gavel, the trace's
duration is read as the job's run time on the reference GPU (V100): its work
becomes duration x that type's measured V100 steps/s, so on a K80 it runs
as much slower as the measurements say.
"""

from __future__ import annotations

import numpy as np

from corral.errors import CorralError
from corral.model.jobs import GENERIC_JOB_TYPE, JobTable, steps_from_duration
from corral.perf.throughputs import gavel_throughputs

JOB_TYPE_SOURCES = ("gavel",)


def assign_job_types(table: JobTable, source: str, seed: int = 0) -> JobTable:
    if source not in JOB_TYPE_SOURCES:
        raise CorralError(
            f"unknown --job-types '{source}' (choose from {', '.join(JOB_TYPE_SOURCES)})"
        )
    measured = gavel_throughputs()
    scales = sorted({s for _, s in measured.alone[("V100", True)]})
    by_scale = {s: measured.runnable_types(s) for s in scales}
    every = measured.runnable_types(1)
    rng = np.random.default_rng(seed)
    df = table.df.copy()
    generic = (df["job_type"] == GENERIC_JOB_TYPE).to_numpy()
    gpus = df["num_gpus"].to_numpy()
    types = df["job_type"].to_numpy(dtype=object)
    for k in np.flatnonzero(generic):
        choices = by_scale.get(int(gpus[k]), every)
        types[k] = choices[int(rng.integers(len(choices)))]
    df["job_type"] = types
    df["total_steps"] = np.where(generic, steps_from_duration(df), df["total_steps"])
    out = JobTable(df, table.source)
    out.derived_steps = table.derived_steps
    return out
