"""The Philly trace (Microsoft, Sep-Dec 2017): bundled, filterable.

Columns: ``timestamp, duration, num_gpus, gpu_time, cluster``; ``cluster`` is
the virtual cluster (VC). Every job is a generic job (1 step/s), so its work
is its duration. Job ids are ``philly-<row>`` by the row in the file, so they
stay stable under filtering.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from corral.data import data_path
from corral.model.jobs import JobTable
from corral.traces.rows import LoadReport, RowChecker, read_text_frame

PHILLY_HEADER = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"]


@dataclass
class PhillyFilter:
    """Which part of the trace to use."""

    vcs: list[str] | None = None
    start: str | None = None
    """First submit date/time kept (inclusive), e.g. 2017-10-01."""
    end: str | None = None
    """Last submit date/time kept (exclusive)."""
    max_jobs: int | None = None


def bundled_philly_path() -> str:
    return str(data_path("philly", "jobs.csv.gz"))


def load_philly(
    path: str | None = None,
    filt: PhillyFilter | None = None,
    skip_bad: bool = False,
    report: LoadReport | None = None,
) -> JobTable:
    path = path or bundled_philly_path()
    filt = filt or PhillyFilter()
    report = report or LoadReport(path)
    raw, first_line = read_text_frame(path)
    check = RowChecker(path, raw, first_line, skip_bad)
    stamps = check.timestamp("timestamp")
    duration = check.number("duration", positive=True)
    gpus = check.number("num_gpus", integer=True, minimum=1)
    check.number("gpu_time", minimum=0, required=False)
    vc = check.text("cluster")  # (a row without one is an error naming its line)
    df = pd.DataFrame(
        {
            "job_id": "philly-" + raw["__row"].astype(str),
            "stamp": stamps,
            "duration": duration,
            "total_steps": duration,
            "num_gpus": gpus,
            "vc": vc,
        }
    )
    df = check.keep(df, report)
    df["num_gpus"] = df["num_gpus"].astype("int64")
    if filt.vcs:
        df = df[df["vc"].isin(filt.vcs)]
    if filt.start:
        df = df[df["stamp"] >= pd.Timestamp(filt.start)]
    if filt.end:
        df = df[df["stamp"] < pd.Timestamp(filt.end)]
    df = df.sort_values("stamp", kind="stable")
    if filt.max_jobs is not None:
        df = df.iloc[: filt.max_jobs]
    epoch = df["stamp"].iloc[0] if len(df) else pd.Timestamp(0)
    df["submit_time"] = (df["stamp"] - epoch).dt.total_seconds()
    table = JobTable(df.drop(columns=["stamp"]), source=path)
    report.kept = len(table)
    return table
