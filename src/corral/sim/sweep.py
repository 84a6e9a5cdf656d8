"""A grid of simulations (policies x loads x seeds x cluster sizes) and its results.

``corral sweep`` builds a :class:`Grid` from its options or a YAML file, runs
every point through :mod:`corral.sim.parallel`, and writes one folder: a run
folder per point, ``results.csv`` (one row per run, every summary key, the
grid's columns first) and a report whose figures are means over seeds with
their spread (one standard deviation, and the seeds' count).

A load rescales the trace's arrival gaps so that its offered load on the
point's cluster is that figure (:meth:`JobTable.at_load`); without loads the
trace runs as it is. A seed is the trace's (synthetic workloads, seeded job
types) and the run's (failures, random placement).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from corral.errors import CorralError, InputError
from corral.sim.report_charts import CHART_STYLE, HOVER_SCRIPT, line_chart
from corral.sim.variants import Variant, parse_variants, split_entries
from corral.yamlio import load_yaml, validation_error

GRID_COLUMNS = ["policy", "load", "seed", "cluster_scale", "run"]
METRICS = [
    ("avg_jct_s", "avg JCT (h)", 3600.0),
    ("p99_jct_s", "p99 JCT (h)", 3600.0),
    ("avg_queueing_s", "avg queueing (h)", 3600.0),
    ("makespan_s", "makespan (d)", 86400.0),
    ("gpu_utilization", "GPU util", 1.0),
    ("preemptions", "preemptions", 1.0),
]
"""What the report averages over seeds: summary key, heading, unit in seconds."""


@dataclass(frozen=True)
class GridPoint:
    policy: str
    """The policy as results name it (a variant's label)."""
    load: float | None
    """Target offered load (None: the trace's own arrivals)."""
    seed: int
    cluster_scale: float
    variant: Variant | None = None
    """The ``--policies`` entry it runs (None: the policy named, as it is)."""

    @property
    def name(self) -> str:
        """Its run folder, relative to the sweep's."""
        load = "trace" if self.load is None else f"{self.load:g}"
        from corral.policies import folder_name

        where = self.variant.folder if self.variant is not None else folder_name(self.policy)
        return f"{where}/load-{load}_seed-{self.seed}_scale-{self.cluster_scale:g}"


def parse_seeds(text: str) -> list[int]:
    """``0..4`` (inclusive), ``1,3,5`` or a mix (``0..2,7``)."""
    seeds: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split("..", 1))
                if hi < lo:
                    raise ValueError
                seeds.extend(range(lo, hi + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise CorralError(
                f"seeds: '{part}' is not a seed or a range like 0..4 (both ends included)"
            ) from None
    if not seeds:
        raise CorralError("seeds: no seed given")
    return list(dict.fromkeys(seeds))


def parse_numbers(text: str, what: str) -> list[float]:
    """A comma-separated list of positive numbers (``0.7,0.9,1.1``)."""
    values: list[float] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise CorralError(f"{what}: '{part}' is not a number") from None
        if not (value > 0 and math.isfinite(value)):
            raise CorralError(f"{what}: {part} must be a positive number")
        values.append(value)
    if not values:
        raise CorralError(f"{what}: no value given")
    return list(dict.fromkeys(values))


def _listed(value: Any) -> str:
    """A YAML list or a comma-separated string, as the command line's text."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class GridFile(BaseModel):
    """A sweep's grid in YAML; each key as on the command line (lists or strings)."""

    model_config = ConfigDict(extra="forbid")

    policies: list[str] | str | None = None
    loads: list[float] | str | None = None
    seeds: list[int] | str | None = None
    cluster_scales: list[float] | str | None = None

    @field_validator("policies", "loads", "seeds", "cluster_scales")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("an empty list: leave the key out instead")
        return value


@dataclass
class Grid:
    policies: list[str]
    """The policies as results name them (variants by their labels)."""
    loads: list[float | None]
    seeds: list[int]
    cluster_scales: list[float]
    variants: list[Variant] = field(default_factory=list)
    """The ``--policies`` entries, one per name in ``policies``."""

    @classmethod
    def build(
        cls,
        policies: str | None,
        loads: str | None,
        seeds: str | None,
        cluster_scales: str | None,
        grid_file: Path | None = None,
        default_seed: int = 0,
        default_scale: float = 1.0,
    ) -> Grid:
        """The grid from a YAML file, with any axis the command line gives replacing its own."""
        given = {"policies": policies, "loads": loads, "seeds": seeds, "scales": cluster_scales}
        if grid_file is not None:
            doc = load_yaml(grid_file)
            if not isinstance(doc, dict):
                raise InputError(str(grid_file), 1, None, "a grid file is a mapping of axes")
            try:
                spec = GridFile.model_validate(doc)
            except ValidationError as exc:
                raise validation_error(str(grid_file), doc, exc) from None
            from_file = {
                "policies": spec.policies,
                "loads": spec.loads,
                "seeds": spec.seeds,
                "scales": spec.cluster_scales,
            }
            for key, value in from_file.items():
                if given[key] is None and value is not None:
                    given[key] = _listed(value)
        entries = list(dict.fromkeys(split_entries(given["policies"] or "")))
        if not entries:
            raise CorralError("a sweep needs policies (--policies or the grid file's 'policies')")
        variants = parse_variants(",".join(entries))
        return cls(
            policies=[v.label for v in variants],
            variants=variants,
            loads=list(parse_numbers(given["loads"], "loads")) if given["loads"] else [None],
            seeds=parse_seeds(given["seeds"]) if given["seeds"] else [default_seed],
            cluster_scales=(
                parse_numbers(given["scales"], "cluster scales")
                if given["scales"]
                else [default_scale]
            ),
        )

    def points(self) -> list[GridPoint]:
        variants = self.variants or [Variant(p, p) for p in self.policies]
        return [
            GridPoint(variant.label, load, seed, scale, variant)
            for scale in self.cluster_scales
            for load in self.loads
            for seed in self.seeds
            for variant in variants
        ]

    def __len__(self) -> int:
        return len(self.policies) * len(self.loads) * len(self.seeds) * len(self.cluster_scales)


def _flat(summary: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested summary keys as dotted columns; lists as JSON text."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def results_frame(points: list[GridPoint], summaries: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: the grid's columns, then every summary key."""
    rows = []
    for point, summary in zip(points, summaries, strict=True):
        row: dict[str, Any] = {
            "policy": point.policy,
            "load": point.load,
            "seed": point.seed,
            "cluster_scale": point.cluster_scale,
            "run": point.name,
        }
        for key, value in _flat(summary).items():
            if key not in row and not key.startswith("provenance."):
                row[key] = value
        rows.append(row)
    return pd.DataFrame(rows)


def over_seeds(results: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard deviation and count over seeds of each reported metric,
    per policy, load and cluster scale (sample deviation; 0 for one seed)."""
    keys = ["cluster_scale", "load", "policy"]
    frame = results.assign(load=results["load"].fillna(-1.0))
    metrics = [m for m, _, _ in METRICS if m in frame.columns]
    grouped = frame.groupby(keys, sort=False)[metrics]
    mean, std = grouped.mean(), grouped.std(ddof=1).fillna(0.0)
    out = mean.add_suffix("_mean").join(std.add_suffix("_std"))
    out["seeds"] = grouped.size()
    out = out.reset_index()
    out["load"] = out["load"].where(out["load"] >= 0)  # NaN: the trace's own arrivals
    return out


def ended_runs(results: pd.DataFrame) -> pd.DataFrame:
    """The runs that ended (a failed run's row stays in results.csv, out of the means)."""
    return results[results["error"].isna()] if "error" in results.columns else results


def write_sweep(
    out: Path, points: list[GridPoint], summaries: list[dict[str, Any]], context: dict[str, Any]
) -> Path:
    """``results.csv``, ``by_point.csv``, ``report.md`` and ``report.html``; the HTML's path."""
    results = results_frame(points, summaries)
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / "results.csv", index=False)
    table = over_seeds(ended_runs(results))
    table.to_csv(out / "by_point.csv", index=False)
    (out / "report.md").write_text(_markdown(table, context), encoding="utf-8")
    path = out / "report.html"
    path.write_text(_html(table, context), encoding="utf-8")
    return path


def _cell(row: pd.Series, metric: str, unit: float) -> str:
    mean, std = row.get(f"{metric}_mean"), row.get(f"{metric}_std", 0.0)
    if mean is None or pd.isna(mean):
        return "-"
    digits = 3 if unit == 1.0 and metric == "gpu_utilization" else (0 if unit == 1.0 else 2)
    text = f"{mean / unit:,.{digits}f}"
    if int(row["seeds"]) > 1:
        text += f" ± {float(std or 0.0) / unit:,.{digits}f}"
    return text


def _rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    metrics = [(m, title, unit) for m, title, unit in METRICS if f"{m}_mean" in table.columns]
    head = ["cluster scale", "load", "policy", "seeds"] + [title for _, title, _ in metrics]
    body = []
    for _, row in table.iterrows():
        load = "trace" if row["load"] is None or pd.isna(row["load"]) else f"{row['load']:g}"
        body.append(
            [f"{row['cluster_scale']:g}", load, str(row["policy"]), str(int(row["seeds"]))]
            + [_cell(row, m, unit) for m, _, unit in metrics]
        )
    return head, body


def _markdown(table: pd.DataFrame, context: dict[str, Any]) -> str:
    head, body = _rows(table)
    lines = ["# Sweep", ""]
    lines += [f"- {key}: {value}" for key, value in context.items()]
    lines += ["", "Means over seeds ± one standard deviation.", ""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" if k < 3 else "---:" for k in range(len(head))) + "|")
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


SWEEP_CHARTS = [
    ("avg_jct_s", "Average JCT", "average JCT (h)"),
    ("gpu_utilization", "GPU utilisation", "busy share of GPUs"),
    ("preemptions", "Preemptions", "preemptions in the run"),
]
"""What the sweep's charts show against offered load: metric, title, axis (the unit
is the table's, from :data:`METRICS`)."""


def _charts(table: pd.DataFrame) -> str:
    """Each metric against offered load, a line per policy with one standard deviation
    over seeds as error bars, a chart per cluster scale (none for a single load)."""
    loads = table["load"].dropna().unique()
    if len(loads) < 2:
        return ""
    figures = []
    units = {metric: unit for metric, _, unit in METRICS}
    for metric, title, axis in SWEEP_CHARTS:
        if f"{metric}_mean" not in table.columns:
            continue
        unit = units[metric]
        for scale in sorted(table["cluster_scale"].unique()):
            part = table[table["cluster_scale"] == scale].dropna(subset=["load"])
            series, errors = {}, {}
            for policy, rows in part.groupby("policy", sort=False):
                rows = rows.sort_values("load")
                name = str(policy)
                series[name] = (
                    rows["load"].to_numpy(dtype=float),
                    rows[f"{metric}_mean"].to_numpy(dtype=float) / unit,
                )
                errors[name] = rows[f"{metric}_std"].fillna(0.0).to_numpy(dtype=float) / unit
            chart_id = f"{metric}-x{scale:g}".replace(".", "_")
            figures.append(
                line_chart(
                    chart_id,
                    f"{title}, cluster x {scale:g}",
                    series,
                    "offered load",
                    axis,
                    errors=errors,
                    x_ticks=sorted(float(x) for x in part["load"].unique()),
                )
            )
    return "".join(figures)


def _html(table: pd.DataFrame, context: dict[str, Any]) -> str:
    head, body = _rows(table)
    figure = _charts(table)
    settings = "".join(
        f"<tr><th scope='row'>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in context.items()
    )
    thead = "".join(f"<th scope='col'>{html.escape(h)}</th>" for h in head)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>" for cells in body
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>corral sweep</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem; color: #1b1b1b; }}
.scroll {{ overflow-x: auto; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: .3rem .6rem; text-align: right; white-space: nowrap; }}
th[scope=row], td:nth-child(-n+3) {{ text-align: left; }}
table.settings td {{ white-space: normal; overflow-wrap: anywhere; text-align: left; }}
{CHART_STYLE}
</style></head><body>
<h1>Sweep</h1>
<table class="settings">{settings}</table>
<p>Means over seeds ± one standard deviation.</p>
{figure}
<div class="scroll"><table><thead><tr>{thead}</tr></thead><tbody>{rows}</tbody></table></div>
<p>Every run's summary is in <code>results.csv</code>; its files in its own folder.</p>
<script>{HOVER_SCRIPT}</script>
</body></html>
"""
