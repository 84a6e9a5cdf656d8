"""The comparison report: ``comparison.csv`` and a self-contained ``report.html``
(and ``report.md`` for pasting into papers and issues).

The CSV keeps seconds (for programs); the report shows hours and days, where
people think in them. The HTML draws its charts (JCT and queueing CDFs,
queue length and GPU utilisation over time) as inline SVG
(:mod:`corral.sim.report_charts`), so the file can be mailed or opened
anywhere without its folder, and its table scrolls within the page at any
width.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from corral.sim.report_charts import (
    CHART_STYLE,
    HOVER_SCRIPT,
    MAX_POINTS,
    Series,
    bar_table,
    cdf_series,
    line_chart,
    thin,
)

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


REPORT_COLUMNS = [
    ("policy", "policy", None),
    ("jobs_finished", "finished", "count"),
    ("avg_jct_s", "avg JCT (h)", 3600.0),
    ("median_jct_s", "median JCT (h)", 3600.0),
    ("p95_jct_s", "p95 JCT (h)", 3600.0),
    ("p99_jct_s", "p99 JCT (h)", 3600.0),
    ("avg_queueing_s", "avg queueing (h)", 3600.0),
    ("makespan_s", "makespan (d)", 86400.0),
    ("gpu_utilization", "GPU util", "share"),
    ("preemptions", "preemptions", "count"),
    ("offered_load", "offered load", "share"),
    ("wall_s", "sim wall (s)", 1.0),
]
"""The report's table: summary key, heading, and the unit shown (seconds per unit)."""
FORMATS = ("html", "md", "both")


FAILURE_COLUMNS = ["status", "error", "raised_at", "log"]
"""Columns a comparison gains when a policy's run failed (its error row)."""


def comparison_frame(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    columns = COMPARISON_COLUMNS
    if any(s.get("error") for s in summaries):
        columns = COMPARISON_COLUMNS + FAILURE_COLUMNS
    return pd.DataFrame([{c: s.get(c) for c in columns} for s in summaries])


def _failures(summaries: list[dict[str, Any]]) -> list[str]:
    """A line per run that failed: its policy, what it raised, where, its log."""
    return [
        f"{s['policy']}: {s['error']} (raised at {s.get('raised_at')}; traceback in {s['log']})"
        for s in summaries
        if s.get("error")
    ]


SIZE_BUCKETS = [(1, 1, "1 GPU"), (2, 4, "2-4 GPUs"), (5, 8, "5-8 GPUs"), (9, 1 << 30, "9+ GPUs")]
TOP_VCS = 8


def preemption_series(runs: dict[str, pd.DataFrame]) -> Series:
    """Per policy, the share of jobs preempted at least k times, k = 1, 2, ...: how
    widely and how often a policy interrupts jobs (zero everywhere when it never does).
    Policies that schedule rounds of tasks (Hare's family) count no preemptions."""
    counted = {p: j for p, j in runs.items() if "preemptions" in j.columns and len(j)}
    most = max((int(j["preemptions"].max()) for j in counted.values()), default=0)
    # k on a log scale: a few jobs are preempted thousands of times, most never
    ks = np.unique(np.round(np.logspace(0, np.log10(max(most, 1)), MAX_POINTS)))
    out: Series = {}
    for policy, jobs in counted.items():
        counts = np.sort(jobs["preemptions"].to_numpy(dtype=np.float64))
        out[policy] = (ks, 1.0 - np.searchsorted(counts, ks, side="left") / len(counts))
    return out


def _breakdowns(runs: dict[str, pd.DataFrame]) -> str:
    """Average JCT per policy by job size, and for the largest virtual clusters."""
    if not runs:  # (every run failed: their rows say why)
        return "<p>No run ended, so there is nothing to break down.</p>"
    policies = list(runs)
    sizes, size_cells = [], []
    for lo, hi, name in SIZE_BUCKETS:
        row = []
        for jobs in runs.values():
            part = jobs[(jobs["gpus"] >= lo) & (jobs["gpus"] <= hi)]["jct"].dropna()
            row.append(f"{part.mean() / 3600:,.2f} ({len(part):,})" if len(part) else "-")
        if any(c != "-" for c in row):
            sizes.append(name)
            size_cells.append(row)
    out = bar_table("job size", sizes, policies, size_cells)
    first = next(iter(runs.values()))
    if "vc" in first.columns and first["vc"].nunique() > 1:
        vcs = first["vc"].astype(str).value_counts().index[:TOP_VCS].tolist()
        vc_cells = []
        for vc in vcs:
            row = []
            for jobs in runs.values():
                part = jobs[jobs["vc"].astype(str) == vc]["jct"].dropna()
                row.append(f"{part.mean() / 3600:,.2f} ({len(part):,})" if len(part) else "-")
            vc_cells.append(row)
        out += bar_table(f"VC (largest {len(vcs)})", vcs, policies, vc_cells)
    return out + "<p>Cells: average JCT in hours (jobs).</p>"


def report_rows(summaries: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The report's table: headings and cells, in people's units."""
    head = [title for _, title, _ in REPORT_COLUMNS]
    body = []
    for s in summaries:
        cells = []
        for key, _, unit in REPORT_COLUMNS:
            value = s.get(key)
            if value is None or (isinstance(value, float) and not np.isfinite(value)):
                cells.append("-")
            elif unit is None:
                cells.append(str(value))
            elif unit == "count":
                cells.append(f"{int(value):,}")
            elif unit == "share":
                cells.append(f"{float(value):.3f}")
            else:
                cells.append(f"{float(value) / float(unit):,.2f}")
        body.append(cells)
    return head, body


def markdown_report(summaries: list[dict[str, Any]], context: dict[str, Any]) -> str:
    head, body = report_rows(summaries)
    lines = ["# corral policy comparison", ""]
    lines += [f"- {key}: {value}" for key, value in context.items()]
    lines += ["", "| " + " | ".join(head) + " |"]
    lines.append("|" + "|".join("---" if k == 0 else "---:" for k in range(len(head))) + "|")
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    failures = _failures(summaries)
    if failures:
        lines += ["", "Runs that failed (their rows are empty):", ""]
        lines += [f"- {line}" for line in failures]
    lines += ["", _DEFINITIONS]
    return "\n".join(lines) + "\n"


_DEFINITIONS = (
    "JCT = finish - submit; queueing = first start - submit; utilisation = busy "
    "GPU-seconds / (GPUs x makespan); offered load = GPU-seconds demanded / (GPUs x "
    "submission span). Policies marked (oracle) know job durations."
)


def write_report(
    out_dir: Path,
    summaries: list[dict[str, Any]],
    context: dict[str, Any],
    fmt: str = "html",
) -> Path:
    """Write ``comparison.csv`` and the report (``report.html``, ``report.md`` or
    both) from the runs in ``out_dir/<policy>/``; the report's path (the HTML's
    when both)."""
    if fmt not in FORMATS:
        raise ValueError(f"report format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    table = comparison_frame(summaries)
    table.to_csv(out_dir / "comparison.csv", index=False, float_format="%.3f")
    if fmt in ("md", "both"):
        md = out_dir / "report.md"
        md.write_text(markdown_report(summaries, context), encoding="utf-8")
        if fmt == "md":
            return md
    runs: dict[str, pd.DataFrame] = {}
    timelines: dict[str, pd.DataFrame] = {}
    for s in summaries:
        if s.get("error"):
            continue  # (its row says so; it has no jobs to chart)
        run_dir = out_dir / s["run_dir"]
        runs[s["policy"]] = pd.read_csv(run_dir / "jobs.csv")
        timelines[s["policy"]] = pd.read_csv(run_dir / "timeline.csv")
    distributions = [
        ("jct", "Job completion time", "JCT (h; log scale)"),
        ("queueing", "Queueing delay", "delay before the first start (h; log scale)"),
    ]
    charts = [
        line_chart(
            f"{column}-cdf",
            title,
            cdf_series({p: j[column].to_numpy() for p, j in runs.items()}, 3600.0),
            xlabel,
            "fraction of jobs",
            log_x=True,
            y_range=(0.0, 1.0),
        )
        for column, title, xlabel in distributions
    ] + [
        line_chart(
            "queue-length",
            "Jobs waiting",
            {p: thin(t["time"] / 86400.0, t["pending"]) for p, t in timelines.items()},
            "time (days)",
            "pending (jobs)",
        ),
        line_chart(
            "utilisation",
            "GPU utilisation",
            {p: thin(t["time"] / 86400.0, t["gpu_utilization"]) for p, t in timelines.items()},
            "time (days)",
            "busy share of GPUs",
            y_range=(0.0, 1.0),
        ),
        line_chart(
            "preemptions",
            "Preemptions",
            preemption_series(runs),
            "preemptions of a job (at least; log scale)",
            "share of jobs",
            log_x=True,
        ),
    ]
    breakdowns = _breakdowns(runs)
    titles, cells = report_rows(summaries)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells
    )
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in titles)
    facts = "".join(
        f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in context.items()
    )
    figures = "".join(charts)
    failures = _failures(summaries)
    failed = (
        '<h2>Runs that failed</h2><ul class="failed">'
        + "".join(f"<li>{html.escape(line)}</li>" for line in failures)
        + "</ul>"
        if failures
        else ""
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>corral comparison</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
li {{ overflow-wrap: anywhere; }}
.scroll {{ overflow-x: auto; max-width: 100%; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; white-space: nowrap; }}
td:first-child, th:first-child {{ text-align: left; }}
th {{ background: #f0f0f0; }} figure {{ display: inline-block; margin: 1em; max-width: 100%; }}
img {{ max-width: 100%; height: auto; }}
{CHART_STYLE}
</style></head><body>
<h1>corral policy comparison</h1>
<ul>{facts}</ul>
<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>
{failed}<p>{_DEFINITIONS}</p>
<p>Hover over a chart (or focus it and use the arrow keys) to read every policy's value.</p>
{figures}
<h2>Average JCT (hours) by job size and by virtual cluster</h2>
{breakdowns}
<script>{HOVER_SCRIPT}</script>
</body></html>
"""
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
