"""Gavel's ``.trace`` format: tab-separated, no header, one job per line.

Fields: job_type, command, working_dir, num_steps_arg, needs_data_dir,
total_steps, scale_factor, priority_weight, SLO, arrival_time. The job's
reference duration is its steps at its measured V100 throughput (Gavel's
reference GPU) with its scale factor, from the bundled Gavel table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from corral.errors import CorralError, InputError
from corral.model.jobs import JobTable
from corral.perf.throughputs import gavel_throughputs
from corral.traces.rows import LoadReport, RowChecker, read_text_frame

GAVEL_FIELDS = [
    "job_type",
    "command",
    "working_dir",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
]
REFERENCE_GPU = "V100"


def load_gavel(path: str, skip_bad: bool = False, report: LoadReport | None = None) -> JobTable:
    report = report or LoadReport(path)
    raw, first = read_text_frame(path, sep="\t", header=False, names=GAVEL_FIELDS)
    check = RowChecker(path, raw, first, skip_bad)
    job_type = check.text("job_type")
    steps = check.number("total_steps", positive=True)
    scale = check.number("scale_factor", integer=True, minimum=1)
    weight = check.number("priority_weight", positive=True)
    arrival = check.number("arrival_time", minimum=0)
    table = gavel_throughputs()
    rate = np.full(len(raw), np.nan)
    for row, (name, sf) in enumerate(zip(job_type, scale, strict=True)):
        if check.bad[row] or pd.isna(sf):
            continue
        try:
            rate[row] = table.steps_per_second(name, REFERENCE_GPU, int(sf))
        except CorralError:
            line = int(raw["__row"].iloc[row]) + first
            problem = f"no measured throughput for '{name}' at scale factor {int(sf)}"
            if not skip_bad:
                raise InputError(path, line, "job_type", problem) from None
            check.bad[row] = True
    df = pd.DataFrame(
        {
            "job_id": "gavel-" + raw["__row"].astype(str),
            "submit_time": arrival,
            "num_gpus": scale,
            "total_steps": steps,
            "duration": steps / rate,
            "job_type": job_type,
            "weight": weight,
        }
    )
    out = JobTable(check.keep(df, report), source=path)
    report.kept = len(out)
    return out
