"""Gavel's ``.trace`` format and its two relatives: tab-separated, no header.

Five layouts, told apart by their number of fields:

* **gavel** (10): job_type, command, working_dir, num_steps_arg,
  needs_data_dir, total_steps, scale_factor, priority_weight, SLO,
  arrival_time.
* **gavel-msr** (7): Gavel's older per-virtual-cluster traces derived from
  Philly (``traces/msr/``): job_type, command, num_steps_arg,
  needs_data_dir, total_steps, arrival_time, scale_factor. Rows with scale
  factor 0 are skipped, as Gavel skips them.
* **gavel-6** (6): Gavel's older traces: job_type, command, num_steps_arg,
  total_steps, arrival_time, scale_factor.
* **gavel-5** (5): the oldest, before multi-GPU jobs: the same without
  scale_factor (every job on 1 GPU).
* **shockwave** (12): Shockwave's dynamic traces: job_type, command,
  working_dir, num_steps_arg, needs_data_dir, total_steps, scale_factor,
  mode, priority_weight, SLO, duration, arrival_time. ``mode`` is the
  job's batch-size schedule (``static``, ``gns``, ``accordion``): it is
  carried in the job table's ``batch_mode`` and reported; corral's
  performance models run every job at its trace batch size for now.

A job's reference duration is its steps at its measured V100 throughput
(Gavel's reference GPU) at its scale factor; scale factors Gavel did not
measure (the MSR traces have 12, 16, 32, ...) scale linearly from the largest
measured one below, as the speed model does everywhere. Shockwave's traces
carry a duration of their own (seconds at the job's scale factor): it is read
as the job's duration, as Shockwave's simulator reads it, unless
``durations="throughput"`` asks for the steps-at-throughput figure instead
(on Shockwave's 120-job trace the two differ about twofold in GPU-hours; the
load report gives both totals).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from corral.errors import InputError
from corral.model.jobs import JobTable
from corral.perf.speeds import SpeedModel
from corral.traces.rows import (
    LoadReport,
    RowChecker,
    flag_misshapen,
    misshapen_rows,
    read_text_frame,
)

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
MSR_FIELDS = [
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "arrival_time",
    "scale_factor",
]
SHOCKWAVE_FIELDS = [
    "job_type",
    "command",
    "working_dir",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "mode",
    "priority_weight",
    "SLO",
    "duration",
    "arrival_time",
]
OLD_FIELDS = ["job_type", "command", "num_steps_arg", "total_steps", "arrival_time", "scale_factor"]
LAYOUTS = {
    "gavel": GAVEL_FIELDS,
    "gavel-msr": MSR_FIELDS,
    "gavel-6": OLD_FIELDS,
    "gavel-5": OLD_FIELDS[:5],
    "shockwave": SHOCKWAVE_FIELDS,
}
"""Each layout by name, with its fields in order."""
BATCH_MODES = ("static", "gns", "accordion")
"""Shockwave's batch-size schedules."""


def layout_of(first_line: str) -> str | None:
    """The layout whose field count the line has (None: none of them)."""
    fields = first_line.count("\t") + 1
    return next((name for name, cols in LAYOUTS.items() if len(cols) == fields), None)


DURATIONS = ("trace", "throughput")
"""Where a job's duration comes from: the trace's own column where it has one
(Shockwave's), or its steps at Gavel's measured V100 throughput."""


def load_gavel(
    path: str,
    skip_bad: bool = False,
    report: LoadReport | None = None,
    layout: str = "gavel",
    durations: str = "trace",
) -> JobTable:
    report = report or LoadReport(path)
    raw, first = read_text_frame(path, sep="\t", header=False, names=LAYOUTS[layout])
    check = RowChecker(path, raw, first, skip_bad)
    # (a row that lost a field would be read shifted, its error named on the wrong field)
    bad_rows = misshapen_rows(path, LAYOUTS[layout], sep="\t", header=False)
    flag_misshapen(check, bad_rows, LAYOUTS[layout], sep="\t")
    job_type = check.text("job_type")
    steps = check.number("total_steps", positive=True)
    if layout == "gavel-msr":
        scale = check.number("scale_factor", integer=True, minimum=0)
        idle = (scale == 0).to_numpy()
        if idle.any():
            report.notes.append(f"{int(idle.sum())} row(s) with scale factor 0 skipped (as Gavel)")
        weight = pd.Series(1.0, index=raw.index)
    else:
        if "scale_factor" in raw:
            scale = check.number("scale_factor", integer=True, minimum=1)
        else:
            scale = pd.Series(1.0, index=raw.index)
        idle = np.zeros(len(raw), dtype=bool)
        if "priority_weight" in raw:
            weight = check.number("priority_weight", positive=True)
        else:
            weight = pd.Series(1.0, index=raw.index)
    arrival = check.number("arrival_time", minimum=0)
    mode = pd.Series("static", index=raw.index)
    if layout == "shockwave":
        mode = check.text("mode").str.lower()
        unknown = ~mode.isin(BATCH_MODES).to_numpy()
        check.flag(unknown, "mode", f"batch-size mode '{{value}}' is not one of {BATCH_MODES}")
    if durations not in DURATIONS:
        raise InputError(path, None, "durations", f"'{durations}' is not one of {DURATIONS}")
    rate = _reference_rates(path, raw, first, check, job_type, scale, idle, skip_bad)
    from_steps = steps / rate
    duration = from_steps
    if layout == "shockwave" and durations == "trace":
        duration = check.number("duration", positive=True)
    df = pd.DataFrame(
        {
            "job_id": "gavel-" + raw["__row"].astype(str),
            "submit_time": arrival,
            "num_gpus": scale,
            "total_steps": steps,
            "duration": duration,
            "job_type": job_type,
            "weight": weight,
            "batch_mode": mode,
        }
    )
    good = check.keep(df.assign(_idle=idle, _from_steps=from_steps), report)
    kept = good.loc[~good["_idle"]]
    if layout == "shockwave":
        hours = {
            "trace": float((kept["duration"] * kept["num_gpus"]).sum()) / 3600,
            "throughput": float((kept["_from_steps"] * kept["num_gpus"]).sum()) / 3600,
        }
        other = "throughput" if durations == "trace" else "trace"
        source = {
            "trace": "the trace's duration column",
            "throughput": "steps at Gavel's V100 throughput",
        }[durations]
        report.notes.append(
            f"durations from {source}: {hours[durations]:,.1f} GPU-hours "
            f"({hours[other]:,.1f} with --durations {other})"
        )
    out = JobTable(kept.drop(columns=["_idle", "_from_steps"]), source=path)
    report.kept = len(out)
    modes = out.df["batch_mode"].value_counts()
    if set(modes.index) - {"static"}:
        counts = ", ".join(f"{k} {v}" for k, v in modes.items())
        report.notes.append(
            f"batch-size modes ({counts}) carried and reported; every job runs at its trace "
            "batch size (no batch-size model yet)"
        )
    return out


def _reference_rates(
    path: str,
    raw: pd.DataFrame,
    first: int,
    check: RowChecker,
    job_type: pd.Series,
    scale: pd.Series,
    idle: np.ndarray,
    skip_bad: bool,
) -> np.ndarray:
    """Steps/s of each row's job on V100s at its scale factor (NaN where unknown)."""
    speeds = SpeedModel()
    rate = np.full(len(raw), np.nan)
    for row, (name, sf) in enumerate(zip(job_type, scale, strict=True)):
        if check.bad[row] or idle[row] or pd.isna(sf):
            continue
        value = speeds.reference_speed(name, int(sf))
        if value is None or value <= 0:
            line = int(raw["__row"].iloc[row]) + first
            problem = f"no measured throughput for '{name}'"
            if not skip_bad:
                raise InputError(path, line, "job_type", problem)
            check.bad[row] = True
            continue
        rate[row] = value
    return rate
