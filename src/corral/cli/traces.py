"""``corral trace-stats``: what a trace holds, before simulating it.

For any trace: jobs by gang size, their run times and GPU-hours, the span of
submissions. For Philly's original job log (``cluster_job_log``) also the
ATC'19 paper's tables (final statuses, failures by size, locality), and the
per-size failure chances to give ``corral sim --failure-rates``.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from corral.cli.app import JsonOpt, app, console, json_on_stdout, print_json, print_table
from corral.cli.sim import FormatOpt, SkipOpt
from corral.errors import CorralError

if TYPE_CHECKING:  # numpy and the trace readers (pandas) are imported by the verb alone
    import numpy as np


def _sizes(gpus: np.ndarray, hours: np.ndarray, run: np.ndarray) -> list[dict[str, Any]]:
    import numpy as np

    from corral.traces.philly_log import SIZE_BUCKETS

    rows = []
    for lo, hi, label in SIZE_BUCKETS:
        mask = (gpus >= lo) & (gpus <= hi)
        if mask.any():
            rows.append(
                {
                    "size": label,
                    "jobs": int(mask.sum()),
                    "median_run_minutes": float(np.median(run[mask]) / 60),
                    "gpu_hours": float(hours[mask].sum()),
                }
            )
    return rows


@app.command("trace-stats")
def trace_stats(
    trace: Annotated[str, typer.Argument(help="a trace file, or 'philly', 'tiresias-60', ...")],
    trace_format: FormatOpt = None,
    skip_bad: SkipOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Summarise a trace: jobs by size, run times, GPU-hours; for Philly's original job
    log also the ATC'19 tables and its failure rates by job size."""
    import numpy as np

    from corral.traces.loading import TraceOptions, detect_format, load_trace
    from corral.traces.philly_analysis import analyse
    from corral.traces.philly_log import philly_log_table, read_philly_log
    from corral.traces.rows import LoadReport

    report = LoadReport(trace)
    options = TraceOptions(fmt=trace_format, skip_bad=skip_bad)
    with json_on_stdout(as_json):
        try:
            fmt = (trace_format or (detect_format(trace) if Path(trace).is_file() else "")).lower()
            logged = read_philly_log(trace, skip_bad, report) if fmt == "philly-log" else None
            if logged is not None:
                table = philly_log_table(logged, trace, report)
            else:
                table = load_trace(trace, 0, options, report)
        except FileNotFoundError as exc:
            raise CorralError(f"{exc.filename}: {exc.strerror}") from None
        df = table.df
        gpus = df["num_gpus"].to_numpy()
        run = df["duration"].to_numpy(dtype=float)
        hours = run * gpus / 3600
        out: dict[str, Any] = {
            "trace": trace,
            "jobs": len(df),
            "submissions_span_days": float(df["submit_time"].max() / 86400) if len(df) else 0.0,
            "gpu_hours": float(np.nansum(hours)),
            "by_size": _sizes(gpus, hours, run),
            "notes": report.notes,
            "skipped_rows": report.skipped,
        }
        if logged is not None:
            analysis = analyse(logged)
            out["atc19"] = {
                "jobs_scheduled": analysis.jobs,
                "by_status": [asdict(r) for r in analysis.by_status],
                "by_size": [asdict(r) for r in analysis.by_size],
                "locality": [asdict(r) for r in analysis.locality],
                "failure_rates": analysis.failure_rates(),
            }
        if as_json:
            print_json(out)
            return
        _print(out)


def _print(out: dict[str, Any]) -> None:
    days = out["submissions_span_days"]
    span = f"{days:.1f} days" if days >= 1 else f"{24 * days:.1f} hours"
    console.print(
        f"{out['trace']}: {out['jobs']:,} jobs submitted over {span}, "
        f"{out['gpu_hours']:,.0f} GPU-hours",
        highlight=False,
    )
    for note in out["notes"]:
        console.print(f"  {note}", highlight=False)
    print_table(
        "jobs by size (GPUs)",
        ["size", "jobs", "median run (min)", "GPU-hours"],
        [
            [
                r["size"],
                f"{r['jobs']:,}",
                f"{r['median_run_minutes']:.1f}",
                f"{r['gpu_hours']:,.0f}",
            ]
            for r in out["by_size"]
        ],
    )
    atc = out.get("atc19")
    if atc is None:
        return
    scheduled = atc["jobs_scheduled"]
    console.print(
        f"The ATC'19 tables below count the {scheduled:,} jobs that were scheduled, as the "
        f"paper does; the simulator replays {out['jobs']:,} of them"
        + (
            f" (the other {scheduled - out['jobs']:,} are left out for the reasons above)."
            if scheduled != out["jobs"]
            else "."
        ),
        highlight=False,
    )
    print_table(
        "final status (ATC'19 Table: jobs and GPU time by status)",
        ["status", "jobs", "share of jobs", "GPU-hours", "share of GPU time"],
        [
            [
                r["status"],
                f"{r['jobs']:,}",
                f"{100 * r['job_share']:.1f}%",
                f"{r['gpu_hours']:,.0f}",
                f"{100 * r['gpu_share']:.1f}%",
            ]
            for r in atc["by_status"]
        ],
    )
    print_table(
        "failures by job size",
        ["size", "jobs", "unsuccessful", "attempts per job", "attempts failed"],
        [
            [
                r["size"],
                f"{r['jobs']:,}",
                f"{100 * r['unsuccessful_share']:.1f}%",
                f"{r['attempts_per_job']:.2f}",
                f"{100 * r['attempt_failure_rate']:.1f}%",
            ]
            for r in atc["by_size"]
        ],
    )
    print_table(
        "locality: servers a gang's first attempt spanned, and its wait",
        ["size", "servers", "jobs", "median queueing (min)"],
        [
            [r["size"], str(r["servers"]), f"{r['jobs']:,}", f"{r['median_queue_minutes']:.1f}"]
            for r in atc["locality"]
        ],
    )
    console.print(f"--failure-rates {atc['failure_rates']}", highlight=False)
