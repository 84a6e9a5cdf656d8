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


def plot_result(
    result: Path,
    folder: Path | None = None,
    formats: tuple[str, ...] = FORMATS,
    width: str = "single",
    policies: list[str] | None = None,
) -> list[Path]:
    """Draw a result folder's figures into ``folder`` (default ``RESULT/figures``),
    of the ``policies`` named (None: all of the result's, in its order); the files
    written."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise CorralError(f"--format: {', '.join(unknown) or 'none'}: choose from {FORMATS}")
    if width not in WIDTHS:
        raise CorralError(f"--width: '{width}' is not one of {', '.join(WIDTHS)}")
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
        for name, figure in result_figures(result, width, policies).items():
            for fmt in formats:
                path = target / f"{name}.{fmt}"
                figure.savefig(path, **_save_options(fmt))
                written.append(path)
            plt.close(figure)
    return written


def chosen(have: list[str], wanted: list[str] | None) -> list[str]:
    """The policies of a result to draw: ``wanted`` in its order, each one the result
    has (an error names the others), or all of them."""
    if not wanted:
        return have
    bare = {h.removesuffix(" (oracle)"): h for h in have}  # (srtf names 'srtf (oracle)')
    wanted = [w if w in have else bare.get(w, w) for w in wanted]
    missing = [p for p in wanted if p not in have]
    if missing:
        raise CorralError(
            f"--policies: {', '.join(missing)} not in this result (it has {', '.join(have)})"
        )
    return list(dict.fromkeys(wanted))


def result_figures(
    result: Path, width: str = "single", policies: list[str] | None = None
) -> dict[str, Figure]:
    """The figures of a result folder, by name (a comparison's or one run's
    distributions; a sweep's metrics against load), of ``policies`` (None: all)."""
    if (result / "by_point.csv").exists():
        points = pd.read_csv(result / "by_point.csv")
        keep = chosen(list(dict.fromkeys(map(str, points["policy"]))), policies)
        points = points[points["policy"].astype(str).isin(keep)]
        return sweep_figures(points, width)
    if (result / "comparison.csv").exists():
        import json

        order = [str(p) for p in pd.read_csv(result / "comparison.csv")["policy"]]
        found = {}
        for summary in sorted(result.glob("*/summary.json")):
            policy = str(json.loads(summary.read_text(encoding="utf-8"))["policy"])
            found[policy] = pd.read_csv(summary.parent / "jobs.csv")
        runs = {p: found[p] for p in order if p in found}  # (a failed run has no summary)
        runs = {p: runs[p] for p in chosen(list(runs), policies)}
        return distribution_figures(runs, width)
    if (result / "jobs.csv").exists():
        import json

        summary = json.loads((result / "summary.json").read_text(encoding="utf-8"))
        return distribution_figures(
            {str(summary["policy"]): pd.read_csv(result / "jobs.csv")}, width
        )
    raise CorralError(f"{result}: not a result of corral sim, compare or sweep (no CSV to plot)")


def distribution_figures(runs: dict[str, pd.DataFrame], width: str = "single") -> dict[str, Figure]:
    """The JCT and queueing-delay CDFs of each run, and the average JCT per policy."""
    if not runs:
        raise CorralError("no run of this result ended (nothing to plot)")
    styles = figure_styles(list(runs))
    out = {}
    for column, label in (("jct", "JCT (h)"), ("queueing", "queueing delay (h)")):
        figure, axes = _figure(width)
        values = {p: j[column].to_numpy(dtype=float) / 3600.0 for p, j in runs.items()}
        floor = 1.0 / 3600.0  # (a delay of 0 cannot sit on a log axis: drawn at 1 s)
        spread = np.concatenate([v[np.isfinite(v)] for v in values.values()])
        log = wants_log(np.maximum(spread, floor)) if len(spread) else False
        for policy, v in values.items():
            v = np.sort(v[np.isfinite(v)])
            if not len(v):
                continue
            x = np.maximum(v, floor) if log else v
            y = np.arange(1, len(v) + 1) / len(v)
            axes.plot(x, y, label=policy, markevery=max(1, len(v) // 6), markersize=3.5,
                      linewidth=1.2, **styles[policy])  # fmt: skip
        if log:
            axes.set_xscale("log")
            label += "; log scale" + ("; under 1 s at 1 s" if column == "queueing" else "")
        axes.set_xlabel(label)
        axes.set_ylabel("fraction of jobs")
        axes.set_ylim(0.0, 1.02)
        _legend(axes, len(runs))
        out[f"{column}-cdf"] = figure
    figure, axes = _figure(width)
    names = list(runs)
    means = [float(runs[p]["jct"].mean()) / 3600.0 for p in names]
    bars = axes.bar(range(len(names)), means, color=[styles[p]["color"] for p in names])
    hatches = ["", "//", "..", "xx", "\\\\", "oo", "--", "++"]
    for bar, name in zip(bars, names, strict=True):  # (told apart in grey by hatching)
        bar.set_hatch(hatches[MARKERS.index(styles[name]["marker"]) % len(hatches)])
        bar.set_edgecolor("black")
        bar.set_linewidth(0.6)
    axes.set_xticks(range(len(names)), names, rotation=30 if len(names) > 3 else 0, ha="right"
                    if len(names) > 3 else "center")  # fmt: skip
    axes.set_ylabel("average JCT (h)")
    out["avg-jct"] = figure
    return out


def sweep_figures(by_point: pd.DataFrame, width: str = "single") -> dict[str, Figure]:
    """Each metric against offered load (or cluster size where the load is the
    trace's own), a line per policy, 95% intervals over seeds as error bars; a
    figure per metric and cluster size."""
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
    for metric, label, unit in METRICS:  # (the sweep report's own, with its units)
        if f"{metric}_mean" not in table.columns:
            continue
        parts = [("", table)] if not groups else list(table.groupby(groups, dropna=False))
        for key, part in parts:
            figure, axes = _figure(width)
            if x_column:
                _metric_lines(axes, part, x_column, metric, unit, styles)
                axes.set_xlabel(x_label)
                ticks = sorted(part[x_column].dropna().unique())
                axes.set_xticks(ticks, [f"{t:g}" for t in ticks])
            else:
                _metric_bars(axes, part, metric, unit, styles)
            axes.set_ylabel(label + ("; log scale" if axes.get_yscale() == "log" else ""))
            suffix = "" if not groups or len(parts) == 1 else f"-{groups}-{_key(key)}"
            out[f"{metric.removesuffix('_s')}{suffix}"] = figure
    return out


def _metric_lines(
    axes: Axes,
    part: pd.DataFrame,
    x_column: str,
    metric: str,
    unit: float,
    styles: dict[str, dict[str, Any]],
) -> None:
    low, high = np.inf, -np.inf
    for policy, rows in part.groupby("policy", sort=False):
        rows = rows.sort_values(x_column)
        x = rows[x_column].to_numpy(dtype=float)
        y = rows[f"{metric}_mean"].to_numpy(dtype=float) / unit
        half = interval(rows[f"{metric}_std"].fillna(0.0).to_numpy(), rows["seeds"].to_numpy())
        half = half / unit
        axes.errorbar(x, y, yerr=half, label=str(policy), capsize=2.5, markersize=3.5,
                      linewidth=1.2, elinewidth=0.8, **styles[str(policy)])  # fmt: skip
        low, high = min(low, float(np.min(y - half))), max(high, float(np.max(y + half)))
    _hold(axes, low, high)
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


def _hold(axes: Axes, low: float, high: float, bars: bool = False) -> None:
    """Axes that hold every point and error bar whole, with a margin; log where the
    values span decades."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return
    if not bars and low > 0 and high / low > 10:
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
