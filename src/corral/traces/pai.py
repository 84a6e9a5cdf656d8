"""Alibaba PAI's GPU cluster trace of 2020 (``cluster-trace-gpu-v2020``).

Two files make the jobs: ``pai_job_table.csv`` (job_name, inst_id, user,
status, start_time, end_time) and ``pai_task_table.csv`` (job_name,
task_name, inst_num, status, start_time, end_time, plan_cpu, plan_mem,
plan_gpu, gpu_type), as released: no header line (one is accepted), times in
seconds. ``--trace`` names the folder holding both, or either file (the
other is found beside it).

A job asks for the sum over its tasks of ``inst_num x plan_gpu / 100`` GPUs
(``plan_gpu`` is a percentage of one GPU); PAI shares GPUs between jobs and
corral allocates whole ones, so a fractional request is rounded up and the
report counts them. The job is submitted at its job-table ``start_time`` and
runs from its first task's start to its last task's end. The GPU type of its
largest task is carried in ``gpu_type`` (reported; policies place jobs by
their own rules). Jobs without GPUs, and jobs that had not finished when the
trace ended (no end time in the job table, as its Running and Waiting jobs,
or a task without one), are left out and counted. The task table has over a million
rows: both files are read a chunk at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from corral.errors import CorralError, InputError
from corral.model.jobs import JobTable
from corral.traces.rows import (
    LoadReport,
    RowChecker,
    flag_misshapen,
    load_chunked,
    misshapen_rows,
    read_text_chunks,
    refuse_repeats,
)

JOB_FIELDS = ["job_name", "inst_id", "user", "status", "start_time", "end_time"]
TASK_FIELDS = [
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
]
JOB_FILE = "pai_job_table.csv"
TASK_FILE = "pai_task_table.csv"


def pai_files(path: str) -> tuple[str, str] | None:
    """The job and task tables named by ``path`` (a folder or either file), or None."""
    where = Path(path)
    folder = where if where.is_dir() else where.parent
    if where.is_file() and where.name not in (JOB_FILE, TASK_FILE):
        return None
    jobs, tasks = folder / JOB_FILE, folder / TASK_FILE
    if not jobs.is_file() and not tasks.is_file():
        return None
    for needed in (jobs, tasks):
        if not needed.is_file():
            raise CorralError(f"PAI trace '{path}': {needed.name} is missing beside it")
    return str(jobs), str(tasks)


def load_pai(path: str, skip_bad: bool = False, report: LoadReport | None = None) -> JobTable:
    files = pai_files(path)
    if files is None:
        raise CorralError(f"PAI trace '{path}': give the folder holding {JOB_FILE} and {TASK_FILE}")
    job_path, task_path = files
    report = report or LoadReport(job_path)
    jobs = _jobs(job_path, skip_bad, report)
    task_report = LoadReport(task_path)
    tasks = _tasks_per_job(task_path, skip_bad, task_report)
    report.rows += task_report.rows
    report.skipped += task_report.skipped
    report.first_problem = report.first_problem or task_report.first_problem
    df = jobs.join(tasks, on="job_name", how="inner")
    no_tasks = len(jobs) - len(df)
    gpus = df["gpus"].to_numpy()
    cpu_only = gpus <= 0
    # unfinished: the job table gives it no end (Running, Waiting), or a task of it
    # has none; either way its run time is unknown, so it is left out
    ended = (
        np.isfinite(df["job_end"]) & np.isfinite(df["first_start"]) & np.isfinite(df["last_end"])
    )
    unfinished = ~cpu_only & ~ended.to_numpy()
    duration = (df["last_end"] - df["first_start"]).to_numpy()
    never_ran = ~cpu_only & ~unfinished & ~(duration > 0)
    keep = ~cpu_only & ~unfinished & ~never_ran
    for count, what in (
        (no_tasks, "job(s) with no task rows"),
        (int(cpu_only.sum()), "job(s) without GPUs"),
        (int(unfinished.sum()), "GPU job(s) unfinished when the trace ends"),
        (int(never_ran.sum()), "GPU job(s) that ran for no time"),
    ):
        if count:
            report.notes.append(f"{count} {what} left out")
    df = df.loc[keep]
    fractional = int((df["gpus"] % 1 > 1e-9).sum())
    if fractional:
        report.notes.append(
            f"{fractional} job(s) asked for a fraction of a GPU (PAI shares GPUs): "
            "rounded up to whole GPUs"
        )
    out = pd.DataFrame(
        {
            "job_id": df["job_name"].to_numpy(),
            "submit_time": df["submit"].to_numpy(),
            "num_gpus": np.ceil(df["gpus"].to_numpy() - 1e-9).astype(np.int64),
            "duration": (df["last_end"] - df["first_start"]).to_numpy(),
            "user": df["user"].to_numpy(),
            "gpu_type": df["gpu_type"].to_numpy(),
        }
    )
    out["total_steps"] = out["duration"]
    table = JobTable(out, source=job_path)
    report.kept = len(table)
    return table


def _chunks(path: str, fields: list[str], usecols: list[str]) -> Iterator[tuple[pd.DataFrame, int]]:
    """The table's chunks, with or without its header line (PAI released none)."""
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().strip().split(",")[0] == fields[0]
    return read_text_chunks(
        path, header=header, names=None if header else fields, usecols=usecols, require=usecols
    )


def _jobs(path: str, skip_bad: bool, report: LoadReport) -> pd.DataFrame:
    bad_rows = misshapen_rows(path, JOB_FIELDS)

    def convert(check: RowChecker) -> pd.DataFrame:
        flag_misshapen(check, bad_rows, JOB_FIELDS)
        return pd.DataFrame(
            {
                "job_name": check.text("job_name"),
                "user": check.text("user", required=False),
                "submit": check.number("start_time", minimum=0),
                "job_end": check.number("end_time", minimum=0, required=False),
                "line": check.raw["__row"] + check.first_line,
            }
        )

    df = load_chunked(
        _chunks(path, JOB_FIELDS, ["job_name", "user", "start_time", "end_time"]),
        path,
        convert,
        skip_bad,
        report,
    )
    refuse_repeats(path, df, "job_name")
    return df.drop(columns="line")


def _tasks_per_job(path: str, skip_bad: bool, report: LoadReport) -> pd.DataFrame:
    """Each job's GPUs, first task start, last task end and main GPU type, summed a
    chunk at a time (memory grows with jobs, not task rows)."""
    parts: list[pd.DataFrame] = []
    bad_rows = misshapen_rows(path, TASK_FIELDS)

    def convert(check: RowChecker) -> pd.DataFrame:
        flag_misshapen(check, bad_rows, TASK_FIELDS)
        instances = check.number("inst_num", minimum=0, required=False).fillna(1)
        share = check.number("plan_gpu", minimum=0, required=False).fillna(0)
        start = check.number("start_time", minimum=0, required=False)
        end = check.number("end_time", minimum=0, required=False)
        return pd.DataFrame(
            {
                "job_name": check.text("job_name"),
                "gpus": instances * share / 100.0,
                "first_start": start,
                "last_end": end,
                "gpu_type": check.text("gpu_type", required=False),
            }
        )

    for raw, first in _chunks(
        path,
        TASK_FIELDS,
        ["job_name", "inst_num", "start_time", "end_time", "plan_gpu", "gpu_type"],
    ):
        part = load_chunked(iter([(raw, first)]), path, convert, skip_bad, report)
        parts.append(_per_job(part))
    if not parts:
        raise InputError(path, 1, None, "the file has no rows")
    whole = pd.concat(parts, ignore_index=True)
    # A job's tasks may straddle chunks: combine the partial sums once more.
    return _per_job(whole).set_index("job_name")


def _per_job(tasks: pd.DataFrame) -> pd.DataFrame:
    # A task not yet ended leaves its job unfinished: max() skips NaN, so the
    # unfinished jobs are marked afterwards.
    ordered = tasks.sort_values("gpus", ascending=False, kind="stable")
    grouped = ordered.groupby("job_name", sort=False)
    out = grouped.agg(
        gpus=("gpus", "sum"),
        first_start=("first_start", "min"),
        last_end=("last_end", "max"),
        gpu_type=("gpu_type", "first"),
    )
    pending = ordered["last_end"].isna().groupby(ordered["job_name"], sort=False).any()
    out.loc[pending.reindex(out.index).to_numpy(), "last_end"] = np.nan
    return out.reset_index()
