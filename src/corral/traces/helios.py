"""SenseTime's Helios traces (SC'21): ``cluster_log.csv`` of Earth, Saturn, Uranus, Venus.

Columns: ``job_id, user, vc, [jobname,] gpu_num, cpu_num, node_num, state,
submit_time, start_time, end_time, duration, queue``; times are
``YYYY-MM-DD HH:MM:SS``, ``duration`` the run time in seconds. The trace holds
every Slurm job, CPU-only ones too: corral keeps the GPU jobs that ran (as
the Helios paper's own scheduling study does), and says how many it left out.
A job replays its recorded run time whatever its final ``state`` (a failed or
cancelled job held its GPUs for that long too); the states are counted in the
load report. The files run to millions of rows, so they are read a chunk at a
time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from corral.model.jobs import JobTable
from corral.traces.rows import (
    LoadReport,
    RowChecker,
    load_chunked,
    read_text_chunks,
    refuse_repeats,
)

HELIOS_COLUMNS = ["job_id", "user", "vc", "gpu_num", "state", "submit_time", "duration"]
"""The columns corral reads (``jobname`` and the CPU columns are optional)."""
HELIOS_TIME = "%Y-%m-%d %H:%M:%S"


def is_helios_header(header: list[str]) -> bool:
    return all(c in header for c in HELIOS_COLUMNS) and "node_num" in header


def load_helios(path: str, skip_bad: bool = False, report: LoadReport | None = None) -> JobTable:
    report = report or LoadReport(path)

    def convert(check: RowChecker) -> pd.DataFrame:
        gpus = check.number("gpu_num", integer=True, minimum=0)
        # Jobs cancelled before they started have no run time: not bad rows.
        duration = check.number("duration", minimum=0, required=False)
        return pd.DataFrame(
            {
                "job_id": check.text("job_id"),
                "stamp": check.timestamp("submit_time", HELIOS_TIME),
                "num_gpus": gpus,
                "duration": duration,
                "vc": check.text("vc", required=False),
                "user": check.text("user", required=False),
                "state": check.text("state", required=False),
                "line": check.raw["__row"] + check.first_line,
            }
        )

    chunks = read_text_chunks(path, usecols=HELIOS_COLUMNS, require=HELIOS_COLUMNS)
    df = load_chunked(chunks, path, convert, skip_bad, report)
    refuse_repeats(path, df, "job_id")
    cpu_only = (df["num_gpus"] == 0).to_numpy()
    never_ran = ~cpu_only & ~(df["duration"] > 0).to_numpy()
    if cpu_only.any():
        report.notes.append(f"{int(cpu_only.sum())} CPU-only job(s) left out")
    if never_ran.any():
        report.notes.append(
            f"{int(never_ran.sum())} GPU job(s) that never ran (no or zero run time) left out"
        )
    df = df.loc[~cpu_only & ~never_ran]
    states = df["state"].value_counts()
    if len(states):
        report.notes.append(
            "final states of the jobs kept (each replays its recorded run time): "
            + ", ".join(f"{k} {v}" for k, v in states.items())
        )
    df = df.sort_values("stamp", kind="stable")
    epoch = df["stamp"].iloc[0] if len(df) else pd.Timestamp(0)
    df = df.assign(
        submit_time=(df["stamp"] - epoch).dt.total_seconds(),
        num_gpus=df["num_gpus"].astype(np.int64),
        total_steps=df["duration"],
    ).drop(columns=["stamp", "state", "line"])
    table = JobTable(df, source=path)
    report.kept = len(table)
    return table
