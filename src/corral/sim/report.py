"""The comparison report: ``comparison.csv`` and a self-contained ``report.html``.

The HTML embeds its PNG plots (JCT CDF, queueing-delay CDF, queue length and
GPU utilisation over time) as data URIs, so the file can be mailed or opened
anywhere without its folder.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

COMPARISON_COLUMNS = [
    "policy",
    "jobs_finished",
    "avg_jct_s",
    "median_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queueing_s",
    "makespan_s",
    "gpu_utilization",
    "preemptions",
    "offered_load",
    "wall_s",
]


def comparison_frame(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{c: s.get(c) for c in COMPARISON_COLUMNS} for s in summaries])


def png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _cdf_plot(runs: dict[str, pd.DataFrame], column: str, title: str, xlabel: str) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, jobs in runs.items():
        values = np.sort(jobs[column].dropna().to_numpy())
        if not len(values):
            continue
        values = np.maximum(values, 1.0)
        ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=name)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return png(fig)


def _time_plot(timelines: dict[str, pd.DataFrame], column: str, title: str, ylabel: str) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, tl in timelines.items():
        ax.plot(tl["time"] / 86400.0, tl[column], label=name, linewidth=1)
    ax.set_xlabel("time (days)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return png(fig)


def write_report(out_dir: Path, summaries: list[dict[str, Any]], context: dict[str, Any]) -> Path:
    """Write ``comparison.csv`` and ``report.html`` from the runs in ``out_dir/<policy>/``."""
    table = comparison_frame(summaries)
    table.to_csv(out_dir / "comparison.csv", index=False, float_format="%.3f")
    runs: dict[str, pd.DataFrame] = {}
    timelines: dict[str, pd.DataFrame] = {}
    for s in summaries:
        run_dir = out_dir / s["run_dir"]
        runs[s["policy"]] = pd.read_csv(run_dir / "jobs.csv")
        timelines[s["policy"]] = pd.read_csv(run_dir / "timeline.csv")
    plots = [
        ("JCT CDF", _cdf_plot(runs, "jct", "Job completion time", "JCT (s, log scale)")),
        (
            "Queueing delay CDF",
            _cdf_plot(runs, "queueing", "Queueing delay", "delay (s, log scale)"),
        ),
        ("Queue length", _time_plot(timelines, "pending", "Jobs waiting", "pending jobs")),
        (
            "GPU utilisation",
            _time_plot(timelines, "gpu_utilization", "GPU utilisation", "busy share"),
        ),
    ]
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in table.itertuples(index=False)
    )
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    facts = "".join(
        f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in context.items()
    )
    figures = "".join(
        f'<figure><img alt="{html.escape(t)}" src="data:image/png;base64,{b64}">'
        f"<figcaption>{html.escape(t)}</figcaption></figure>"
        for t, b64 in plots
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>corral comparison</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
th {{ background: #f0f0f0; }} figure {{ display: inline-block; margin: 1em; }}
</style></head><body>
<h1>corral policy comparison</h1>
<ul>{facts}</ul>
<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>
<p>JCT = finish - submit; queueing = first start - submit; utilisation = busy GPU-seconds /
(GPUs x makespan); offered load = GPU-seconds demanded / (GPUs x submission span).
Policies marked (oracle) know job durations.</p>
{figures}
</body></html>
"""
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.0f}"
    return str(value)
