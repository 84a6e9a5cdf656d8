"""Pollux's workload CSV: ``name,time,application,num_replicas,batch_size``.

Pollux jobs train until a target metric; corral turns each into a fixed amount
of work: the steps the bundled training curve needs at the job's batch size,
at the measured step time of its GPU count on the fewest nodes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from corral.errors import CorralError, InputError
from corral.model.jobs import JobTable
from corral.perf.pollux_models import step_time, steps_to_target
from corral.traces.rows import LoadReport, RowChecker, read_text_frame, require_columns

POLLUX_COLUMNS = ["name", "time", "application", "num_replicas", "batch_size"]


def load_pollux(path: str, skip_bad: bool = False, report: LoadReport | None = None) -> JobTable:
    report = report or LoadReport(path)
    raw, first = read_text_frame(path)
    require_columns(path, raw, POLLUX_COLUMNS)
    check = RowChecker(path, raw, first, skip_bad)
    name = check.text("name")
    check.unique(name, "name")
    time = check.number("time", minimum=0)
    app = check.text("application")
    replicas = check.number("num_replicas", integer=True, minimum=1)
    batch = check.number("batch_size", integer=True, minimum=1)
    steps = np.full(len(raw), np.nan)
    seconds_per_step = np.full(len(raw), np.nan)
    for row in range(len(raw)):
        if check.bad[row]:
            continue
        try:
            steps[row] = steps_to_target(app.iloc[row], int(batch.iloc[row]))
            seconds_per_step[row] = step_time(
                app.iloc[row], int(replicas.iloc[row]), int(batch.iloc[row])
            )
        except CorralError as exc:
            line = int(raw["__row"].iloc[row]) + first
            if not skip_bad:
                raise InputError(path, line, "application", str(exc)) from None
            check.bad[row] = True
    df = pd.DataFrame(
        {
            "job_id": name,
            "submit_time": time,
            "num_gpus": replicas,
            "total_steps": steps,
            "duration": steps * seconds_per_step,
            "job_type": "pollux:" + app,
            "model": app,
            "batch_size": batch,
        }
    )
    out = JobTable(check.keep(df, report), source=path)
    report.kept = len(out)
    return out
