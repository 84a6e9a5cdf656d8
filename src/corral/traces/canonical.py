"""corral's own trace CSV: the job table's columns, written and read back as is.

Required: ``submit_time``, ``num_gpus`` and ``duration`` or ``total_steps``;
optional: ``job_id, job_type, model, vc, user, weight, priority, batch_size,
batch_mode`` (see :data:`corral.model.jobs.COLUMNS`).
"""

from __future__ import annotations

import pandas as pd

from corral.errors import InputError
from corral.model.jobs import COLUMNS, JobTable
from corral.traces.rows import LoadReport, RowChecker, read_text_frame, require_columns


def load_canonical(path: str, skip_bad: bool = False, report: LoadReport | None = None) -> JobTable:
    report = report or LoadReport(path)
    raw, first = read_text_frame(path)
    unknown = [c for c in raw.columns if c != "__row" and c not in COLUMNS]
    if unknown:
        raise InputError(path, 1, unknown[0], f"unknown column (known: {', '.join(COLUMNS)})")
    require_columns(path, raw, ["submit_time", "num_gpus"])
    if "duration" not in raw and "total_steps" not in raw:
        raise InputError(path, 1, "duration", "the header needs 'duration' or 'total_steps'")
    check = RowChecker(path, raw, first, skip_bad)
    data: dict[str, object] = {
        "submit_time": check.number("submit_time", minimum=0),
        "num_gpus": check.number("num_gpus", integer=True, minimum=1),
    }
    if "duration" in raw:
        data["duration"] = check.number(
            "duration", positive=True, required="total_steps" not in raw
        )
    if "total_steps" in raw:
        data["total_steps"] = check.number("total_steps", positive=True)
    if "weight" in raw:
        data["weight"] = check.number("weight", positive=True)
    if "priority" in raw:
        data["priority"] = check.number("priority", integer=True, required=False)
    if "batch_size" in raw:
        data["batch_size"] = check.number("batch_size", integer=True, minimum=0, required=False)
    if "job_id" in raw:
        data["job_id"] = check.text("job_id")
        check.unique(data["job_id"], "job_id")  # type: ignore[arg-type]
    for column in ("job_type", "model", "vc", "user", "batch_mode", "gpu_type"):
        if column in raw:
            data[column] = check.text(column, required=False)
    df = check.keep(pd.DataFrame(data), report)
    if "job_type" in df:
        df.loc[df["job_type"] == "", "job_type"] = "generic"
    if "batch_mode" in df:
        df.loc[df["batch_mode"] == "", "batch_mode"] = "static"
    out = JobTable(df, source=path)
    report.kept = len(out)
    return out


def write_canonical(table: JobTable, path: str) -> None:
    table.df.to_csv(path, index=False)
