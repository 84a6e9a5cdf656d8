"""Figures for papers: a result folder's charts drawn with Matplotlib.

``corral plot RESULT`` (and :meth:`corral.Experiment`'s ``Results.plot``)
reads what ``sim``, ``compare`` or ``sweep`` wrote and draws each chart as
PDF, SVG and PNG, sized for a paper's column (3.5 in) or its full width
(7.16 in). What makes them fit for print:

- a policy is drawn alike in every figure and in the HTML reports: its colour
  and line pattern come from its name (:func:`corral.sim.report_charts.series_styles`),
  and each line also gets a marker, so no two lines of a figure look the same
  in grey;
- an axis whose data span decades is logarithmic (said in its label);
- a sweep's points carry error bars of the 95% interval over seeds (Student's t),
  and the axes are set to hold every bar whole;
- the sweep's every load is a tick with its label;
- files are the same bytes for the same result (no dates in them).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from corral.errors import CorralError
from corral.sim.provenance import FIGURES
from corral.sim.report_charts import series_styles, wants_log
from corral.sim.sweep import METRICS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTHS = {"single": 3.5, "double": 7.16}
"""Figure widths in inches: one column, and the page (two-column papers)."""
HEIGHT_RATIO = {"single": 0.75, "double": 0.42}
FORMATS = ("pdf", "svg", "png")
PNG_DPI = 300
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
"""Markers, one per line of a figure (with the line pattern: readable in grey)."""
CONFIDENCE = 0.95
PLOT_HINT = "pip install 'corral[plot]' (or matplotlib)"


def figure_styles(names: list[str]) -> dict[str, dict[str, Any]]:
    """Matplotlib's keywords for each series: the reports' colour and line pattern
    (from the name), and a marker from the name, the next free one where a series
    before it in the figure has it."""
    base = series_styles(names)
    taken: set[int] = set()
    styles: dict[str, dict[str, Any]] = {}
    for name in names:
        colour, dashes = base[name]
        k = zlib.crc32(name.encode()) // 7 % len(MARKERS)
        while k in taken and len(taken) < len(MARKERS):
            k = (k + 1) % len(MARKERS)
        taken.add(k)
        pattern = [float(x) for x in dashes.split()] if dashes else []
        styles[name] = {
            "color": colour,
            "linestyle": (0, tuple(pattern)) if pattern else "-",
            "marker": MARKERS[k],
        }
    return styles


def interval(std: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Half-widths of the 95% confidence interval of means over ``count`` seeds (0
    for a single seed: no interval can be drawn from one)."""
    from scipy import stats

    n = np.asarray(count, dtype=float)
    t = np.where(n > 1, stats.t.ppf(0.5 + CONFIDENCE / 2, np.maximum(n - 1, 1)), 0.0)
    return np.asarray(t * np.asarray(std, dtype=float) / np.sqrt(np.maximum(n, 1)))


SCALES = ("auto", "linear", "log")
"""A figure's value axis: logarithmic where the values span decades (auto), or as asked."""


@dataclass(frozen=True)
class Drawing:
    """What to draw of a result: which policies (None: all, in the result's order),
    which metrics (None: all; see :func:`metric_names`), the value axis' scale, and a
    baseline policy each policy's metric is divided by (None: the metric itself)."""

    policies: list[str] | None = None
    metrics: list[str] | None = None
    scale: str = "auto"
    normalise: str | None = None


def plot_result(
    result: Path,
    folder: Path | None = None,
    formats: tuple[str, ...] = FORMATS,
    width: str = "single",
    policies: list[str] | None = None,
    drawing: Drawing | None = None,
) -> list[Path]:
    """Draw a result folder's figures into ``folder`` (default ``RESULT/figures``),
    of the ``policies`` named (None: all of the result's, in its order), as
    ``drawing`` says (its policies, when given, take the place of ``policies``); the
    files written."""
    drawing = drawing or Drawing(policies=policies)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise CorralError(f"--format: {', '.join(unknown) or 'none'}: choose from {FORMATS}")
    if width not in WIDTHS:
        raise CorralError(f"--width: '{width}' is not one of {', '.join(WIDTHS)}")
    if drawing.scale not in SCALES:
        raise CorralError(f"--scale: '{drawing.scale}' is not one of {', '.join(SCALES)}")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise CorralError(f"figures need Matplotlib: {PLOT_HINT}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = folder or result / FIGURES
    target.mkdir(parents=True, exist_ok=True)
    written = []
    with plt.rc_context(PAPER):  # type: ignore[arg-type]
        for name, figure in result_figures(result, width, drawing).items():
            for fmt in formats:
                path = target / f"{name}.{fmt}"
                figure.savefig(path, **_save_options(fmt))
                written.append(path)
            plt.close(figure)
    return written


def chosen(have: list[str], wanted: list[str] | None, option: str = "--policies") -> list[str]:
    """The policies of a result to draw: ``wanted`` in its order, each one the result
    has (an error names the others), or all of them."""
    if not wanted:
        return have
    bare = {h.removesuffix(" (oracle)"): h for h in have}  # (srtf names 'srtf (oracle)')
    wanted = [w if w in have else bare.get(w, w) for w in wanted]
    missing = [p for p in wanted if p not in have]
    if missing:
        raise CorralError(
            f"{option}: {', '.join(missing)} not in this result (it has {', '.join(have)})"
        )
    return list(dict.fromkeys(wanted))


SWEEP_METRICS = {m.removesuffix("_s"): (m, title, unit) for m, title, unit in METRICS}
"""A sweep's metrics by the names ``--metric`` takes (avg_jct, makespan, ...)."""
COMPARISON_METRICS = ("jct", "queueing", "avg_jct")
"""A comparison's figures by the names ``--metric`` takes: the JCT and queueing-delay
CDFs and the average JCT per policy."""


def metric_names(wanted: list[str] | None, have: list[str]) -> list[str]:
    """The metrics to draw: ``wanted`` (each one this result has: an error names the
    others), or all it has."""
    if not wanted:
        return have
    missing = [m for m in wanted if m not in have]
    if missing:
        raise CorralError(
            f"--metric: {', '.join(missing)} not drawn for this result (it has {', '.join(have)})"
        )
    return list(dict.fromkeys(wanted))


def result_figures(
    result: Path, width: str = "single", drawing: Drawing | list[str] | None = None
) -> dict[str, Figure]:
    """The figures of a result folder, by name (a comparison's or one run's
    distributions; a sweep's metrics against load), as ``drawing`` says (a list:
    the policies alone)."""
    if not isinstance(drawing, Drawing):
        drawing = Drawing(policies=drawing)
    if (result / "by_point.csv").exists():
        points = pd.read_csv(result / "by_point.csv")
        keep = chosen(list(dict.fromkeys(map(str, points["policy"]))), drawing.policies)
        have = [n for n, (m, _, _) in SWEEP_METRICS.items() if f"{m}_mean" in points.columns]
        metrics = metric_names(drawing.metrics, have)
        if drawing.normalise is not None:
            names = list(dict.fromkeys(map(str, points["policy"])))
            points = normalised_points(
                result / "results.csv", chosen(names, [drawing.normalise], "--normalise")[0]
            )
        points = points[points["policy"].astype(str).isin(keep)]
        return sweep_figures(points, width, metrics, drawing.scale, drawing.normalise)
    if (result / "comparison.csv").exists():
        import json

        order = [str(p) for p in pd.read_csv(result / "comparison.csv")["policy"]]
        found = {}
        for summary in sorted(result.glob("*/summary.json")):
            policy = str(json.loads(summary.read_text(encoding="utf-8"))["policy"])
            found[policy] = pd.read_csv(summary.parent / "jobs.csv")
        runs = {p: found[p] for p in order if p in found}  # (a failed run has no summary)
        base_name: str | None = None
        if drawing.normalise is not None:
            base_name = chosen(list(runs), [drawing.normalise], "--normalise")[0]
        runs_kept = {p: runs[p] for p in chosen(list(runs), drawing.policies)}
        metrics = metric_names(drawing.metrics, list(COMPARISON_METRICS))
        base = runs[base_name] if base_name is not None else None
        return distribution_figures(runs_kept, width, metrics, drawing.scale, (base_name, base))
    if (result / "jobs.csv").exists():
        import json

        summary = json.loads((result / "summary.json").read_text(encoding="utf-8"))
        if drawing.normalise is not None:
            raise CorralError("--normalise: one run has no other policy to divide by")
        metrics = metric_names(drawing.metrics, list(COMPARISON_METRICS))
        return distribution_figures(
            {str(summary["policy"]): pd.read_csv(result / "jobs.csv")},
            width,
            metrics,
            drawing.scale,
        )
    raise CorralError(f"{result}: not a result of corral sim, compare or sweep (no CSV to plot)")


def normalised_points(results_csv: Path, baseline: str) -> pd.DataFrame:
    """A sweep's points with each metric divided by ``baseline``'s in the same run of
    the grid (same cluster size, load and seed), then averaged over seeds: the mean
    ratio and its spread, as ``by_point.csv`` holds the metrics themselves (a seed
    where the baseline's value is 0 or missing is left out of that point)."""
    from corral.sim.sweep import ended_runs, over_seeds

    runs = ended_runs(pd.read_csv(results_csv))
    keys = ["cluster_scale", "load", "seed"]
    frame = runs.assign(load=runs["load"].fillna(-1.0))
    metrics = [m for m, _, _ in METRICS if m in frame.columns]
    base = frame[frame["policy"].astype(str) == baseline].set_index(keys)[metrics]
    base = base.where(base != 0).add_suffix("__base")
    joined = frame.join(base, on=keys)
    for m in metrics:
        joined[m] = joined[m] / joined[f"{m}__base"]
    ratios = joined[["policy", *keys, *metrics]].dropna(subset=metrics, how="all")
    ratios = ratios.assign(load=ratios["load"].where(ratios["load"] >= 0))
    return over_seeds(ratios)


def distribution_figures(
    runs: dict[str, pd.DataFrame],
    width: str = "single",
    metrics: list[str] | None = None,
    scale: str = "auto",
    baseline: tuple[str | None, pd.DataFrame | None] = (None, None),
) -> dict[str, Figure]:
    """The JCT and queueing-delay CDFs of each run, and the average JCT per policy (over
    the ``baseline`` run's when one is given), of the ``metrics`` named (None: all);
    CDFs whose curves coincide say so in their legend."""
    if not runs:
        raise CorralError("no run of this result ended (nothing to plot)")
    metrics = list(COMPARISON_METRICS) if metrics is None else metrics
    styles = figure_styles(list(runs))
    out = {}
    for column, label in (("jct", "JCT (h)"), ("queueing", "queueing delay (h)")):
        if column not in metrics:
            continue
        figure, axes = _figure(width)
        values = {p: j[column].to_numpy(dtype=float) / 3600.0 for p, j in runs.items()}
        floor = 1.0 / 3600.0  # (a delay of 0 cannot sit on a log axis: drawn at 1 s)
        spread = np.concatenate([v[np.isfinite(v)] for v in values.values()])
        log = scale == "log" or (
            scale == "auto" and (wants_log(np.maximum(spread, floor)) if len(spread) else False)
        )
        curves = {p: np.sort(v[np.isfinite(v)]) for p, v in values.items()}
        labels = same_as({p: c for p, c in curves.items() if len(c)})
        for policy, v in curves.items():
            if not len(v):
                continue
            x = np.maximum(v, floor) if log else v
            y = np.arange(1, len(v) + 1) / len(v)
            axes.plot(x, y, label=labels[policy], markevery=max(1, len(v) // 6),
                      markersize=3.5, linewidth=1.2, **styles[policy])  # fmt: skip
        if log:
            axes.set_xscale("log")
            label += "; log scale" + ("; under 1 s at 1 s" if column == "queueing" else "")
        axes.set_xlabel(label)
        axes.set_ylabel("fraction of jobs")
        axes.set_ylim(0.0, 1.02)
        _legend(axes, len(runs))
        out[f"{column}-cdf"] = figure
    if "avg_jct" not in metrics:
        return out
    figure, axes = _figure(width)
    names = list(runs)
    means = [float(runs[p]["jct"].mean()) / 3600.0 for p in names]
    ylabel = "average JCT (h)"
    name_of_base, base = baseline
    if base is not None:
        below = float(base["jct"].mean()) / 3600.0
        if not below > 0:
            raise CorralError(f"--normalise: {name_of_base}'s average JCT is 0")
        means = [m / below for m in means]
        ylabel = f"average JCT / {name_of_base}'s"
    bars = axes.bar(range(len(names)), means, color=[styles[p]["color"] for p in names])
    hatches = ["", "//", "..", "xx", "\\\\", "oo", "--", "++"]
    for bar, name in zip(bars, names, strict=True):  # (told apart in grey by hatching)
        bar.set_hatch(hatches[MARKERS.index(styles[name]["marker"]) % len(hatches)])
        bar.set_edgecolor("black")
        bar.set_linewidth(0.6)
    axes.set_xticks(range(len(names)), names, rotation=30 if len(names) > 3 else 0, ha="right"
                    if len(names) > 3 else "center")  # fmt: skip
    if base is not None:
        axes.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    if scale == "log" and min(means) > 0:
        axes.set_yscale("log")
        ylabel += "; log scale"
    axes.set_ylabel(ylabel)
    out["avg-jct"] = figure
    return out


def same_as(curves: dict[str, np.ndarray]) -> dict[str, str]:
    """Each series' legend label: its name, with ``= NAME`` where its values are those
    of a series before it (a line drawn exactly over another would hide it)."""
    labels: dict[str, str] = {}
    seen: list[tuple[str, np.ndarray]] = []
    for name, values in curves.items():
        twin = next(
            (
                first
                for first, other in seen
                if other.shape == values.shape and np.allclose(other, values, rtol=1e-9, atol=0)
            ),
            None,
        )
        labels[name] = name if twin is None else f"{name} (= {twin})"
        if twin is None:
            seen.append((name, values))
    return labels


def sweep_figures(
    by_point: pd.DataFrame,
    width: str = "single",
    metrics: list[str] | None = None,
    scale: str = "auto",
    normalise: str | None = None,
) -> dict[str, Figure]:
    """Each metric against offered load (or cluster size where the load is the
    trace's own), a line per policy, 95% intervals over seeds as error bars; a
    figure per metric and cluster size. ``metrics`` names those drawn (None: all);
    ``normalise`` says the values are ratios to that policy's (see
    :func:`normalised_points`); lines that coincide are set apart a little along x
    and say so in their legend."""
    table = by_point.copy()
    loads = table["load"].dropna().unique()
    if len(loads) >= 2:
        x_column, x_label, groups = "load", "offered load", "cluster_scale"
    elif table["cluster_scale"].nunique() >= 2:
        x_column, x_label, groups = "cluster_scale", "cluster size (scale)", "load"
    else:
        x_column, x_label, groups = "", "", ""
    out: dict[str, Figure] = {}
    names = [str(p) for p in dict.fromkeys(table["policy"])]
    styles = figure_styles(names)
    for short, (metric, label, unit) in SWEEP_METRICS.items():  # (the report's, its units)
        if f"{metric}_mean" not in table.columns or (metrics is not None and short not in metrics):
            continue
        if normalise is not None:
            label, unit = f"{label.split(' (')[0]} / {normalise}'s", 1.0
        parts = [("", table)] if not groups else list(table.groupby(groups, dropna=False))
        for key, part in parts:
            figure, axes = _figure(width)
            if x_column:
                _metric_lines(axes, part, x_column, metric, unit, styles, scale)
                axes.set_xlabel(x_label)
                ticks = sorted(part[x_column].dropna().unique())
                axes.set_xticks(ticks, [f"{t:g}" for t in ticks])
            else:
                _metric_bars(axes, part, metric, unit, styles)
            if normalise is not None:
                axes.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
            axes.set_ylabel(label + ("; log scale" if axes.get_yscale() == "log" else ""))
            suffix = "" if not groups or len(parts) == 1 else f"-{groups}-{_key(key)}"
            out[f"{short}{suffix}"] = figure
    return out


DODGE = 0.012
"""Of the x axis' span, how far a line that coincides with one before it is moved."""


def _metric_lines(
    axes: Axes,
    part: pd.DataFrame,
    x_column: str,
    metric: str,
    unit: float,
    styles: dict[str, dict[str, Any]],
    scale: str = "auto",
) -> None:
    low, high = np.inf, -np.inf
    series = {}
    for policy, rows in part.groupby("policy", sort=False):
        rows = rows.sort_values(x_column)
        x = rows[x_column].to_numpy(dtype=float)
        y = rows[f"{metric}_mean"].to_numpy(dtype=float) / unit
        half = interval(rows[f"{metric}_std"].fillna(0.0).to_numpy(), rows["seeds"].to_numpy())
        series[str(policy)] = (x, y, half / unit)
    labels = same_as({p: np.concatenate([x, y]) for p, (x, y, _) in series.items()})
    xs = np.concatenate([x for x, _, _ in series.values()]) if series else np.array([0.0])
    step = DODGE * ((float(np.max(xs)) - float(np.min(xs))) or 1.0)
    twins = 0
    for policy, (x, y, half) in series.items():
        if labels[policy] != policy:  # (drawn over another: set apart, and said)
            twins += 1
            x = x + step * twins
        axes.errorbar(x, y, yerr=half, label=labels[policy], capsize=2.5, markersize=3.5,
                      linewidth=1.2, elinewidth=0.8, **styles[policy])  # fmt: skip
        low, high = min(low, float(np.min(y - half))), max(high, float(np.max(y + half)))
    points = np.concatenate([y for _, y, _ in series.values()]) if series else np.array([])
    least = float(np.min(points[points > 0])) if np.any(points > 0) else 0.0
    _hold(axes, low, high, scale=scale, least=least)
    _legend(axes, part["policy"].nunique())


def _metric_bars(
    axes: Axes, part: pd.DataFrame, metric: str, unit: float, styles: dict[str, dict[str, Any]]
) -> None:
    names = [str(p) for p in part["policy"]]
    y = part[f"{metric}_mean"].to_numpy(dtype=float) / unit
    half = interval(part[f"{metric}_std"].fillna(0.0).to_numpy(), part["seeds"].to_numpy()) / unit
    colours = [styles[n]["color"] for n in names]
    axes.bar(range(len(names)), y, yerr=half, capsize=3, color=colours, edgecolor="black",
             linewidth=0.6)  # fmt: skip
    axes.set_xticks(range(len(names)), names)
    _hold(axes, float(np.min(y - half)), float(np.max(y + half)), bars=True)


def _hold(
    axes: Axes,
    low: float,
    high: float,
    bars: bool = False,
    scale: str = "auto",
    least: float = 0.0,
) -> None:
    """Axes that hold every point and error bar whole, with a margin; log where the
    values span decades (``scale`` auto), or as ``scale`` says (on a log axis asked
    for, error bars reaching 0 are cut below ``least``, the lowest point)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return
    spans_decades = low > 0 and high / low > 10
    if scale == "log" and not low > 0:  # an interval reaching 0: cut at the lowest point
        if not least > 0:
            raise CorralError("--scale log: some values are not above 0")
        low = least / 1.5
    if not bars and (scale == "log" or (scale == "auto" and spans_decades)):
        from matplotlib.ticker import FuncFormatter, LogLocator

        axes.set_yscale("log")
        axes.set_ylim(low / 1.25, high * 1.25)
        # 1, 2 and 5 of each decade: at least three labelled ticks on any range over
        # 10x (powers of ten alone left one, "100", on a range of 50 to 700)
        axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        plain = FuncFormatter(lambda value, _: f"{value:g}")  # (200, not 2 x 10^2)
        axes.yaxis.set_major_formatter(plain)
        axes.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        return
    span = (high - low) or abs(high) or 1.0
    floor = 0.0 if bars and low >= 0 else low - 0.08 * span
    axes.set_ylim(floor, high + 0.08 * span)


def _figure(width: str) -> tuple[Figure, Axes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inches = WIDTHS[width]
    figure, axes = plt.subplots(figsize=(inches, inches * HEIGHT_RATIO[width]))
    figure.set_layout_engine("constrained")
    axes.grid(True, linewidth=0.4, alpha=0.4)
    return figure, axes


PAPER: dict[str, Any] = {
    "font.size": 7.5,
    "axes.labelsize": 7.5,
    "legend.fontsize": 6.5,
    "xtick.labelsize": 6.5,
    "ytick.labelsize": 6.5,
    "axes.linewidth": 0.6,
    "pdf.fonttype": 42,  # (fonts a publisher's checks accept: TrueType, embedded)
    "svg.hashsalt": "corral",
}
"""Type sizes for a figure printed at its size (a paper's 8-9 pt text)."""


def _legend(axes: Axes, count: int) -> None:
    axes.legend(frameon=False, ncols=1 if count <= 4 else 2, handlelength=2.6)


def _key(value: Any) -> str:
    if isinstance(value, tuple):
        value = value[0]
    return "trace" if value is None or pd.isna(value) else f"{float(value):g}"


def _save_options(fmt: str) -> dict[str, Any]:
    """Options that keep a figure's bytes the same from one drawing to the next."""
    if fmt == "png":
        return {"dpi": PNG_DPI, "metadata": {"Software": None}}
    if fmt == "pdf":
        return {"metadata": {"CreationDate": None, "Producer": None, "Creator": None}}
    return {"metadata": {"Date": None, "Creator": None}}
