"""Tiresias' trace CSV: ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``.

``duration`` is the job's run time in seconds; ``model_name`` is kept as the
job's model (Tiresias consolidates only placement-sensitive models).
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
    check.unique(job_id, "job_id")
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
