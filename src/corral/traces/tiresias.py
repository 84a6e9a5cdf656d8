"""Tiresias' trace CSVs: ``job_id, num_gpu, submit_time, duration`` and more.

Two layouts circulate: the 60-job trace's ``job_id, num_gpu, submit_time,
iterations, model_name, duration, interval`` and the simulator's sample
``tf_job.csv`` (``job_id, num_gpu, submit_time, start_time, duration,
model_size, aggr_interval, model_name, model_scale``); other columns are
ignored. ``duration`` is the job's run time in seconds; ``model_name`` is
kept as the job's model (Tiresias consolidates only placement-sensitive
models). Tiresias' simulator numbers jobs by their row, so a repeated
``job_id`` is another job: corral keeps it, as ``<id>#2``, ``<id>#3`` ...,
and the load report counts them.
"""

from __future__ import annotations

import pandas as pd

from corral.model.jobs import JobTable
from corral.traces.rows import LoadReport, RowChecker, read_text_frame, require_columns

TIRESIAS_COLUMNS = ["job_id", "num_gpu", "submit_time", "duration"]


def load_tiresias(path: str, skip_bad: bool = False, report: LoadReport | None = None) -> JobTable:
    report = report or LoadReport(path)
    raw, first = read_text_frame(path)
    require_columns(path, raw, TIRESIAS_COLUMNS)
    check = RowChecker(path, raw, first, skip_bad)
    job_id = check.text("job_id")
    repeat = job_id.groupby(job_id).cumcount()
    if (repeat > 0).any():
        job_id = job_id.where(repeat == 0, job_id + "#" + (repeat + 1).astype(str))
        report.notes.append(
            f"{int((repeat > 0).sum())} row(s) repeat an earlier job id: each is its own job "
            "(as Tiresias' simulator reads them), named <id>#2, <id>#3, ..."
        )
    gpus = check.number("num_gpu", integer=True, minimum=1)
    submit = check.number("submit_time", minimum=0)
    duration = check.number("duration", positive=True)
    model = check.text("model_name", required=False) if "model_name" in raw else ""
    df = pd.DataFrame(
        {
            "job_id": job_id,
            "submit_time": submit,
            "num_gpus": gpus,
            "duration": duration,
            "total_steps": duration,
            "model": model,
        }
    )
    table = JobTable(check.keep(df, report), source=path)
    report.kept = len(table)
    return table
