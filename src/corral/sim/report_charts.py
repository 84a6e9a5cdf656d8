"""Interactive charts for the self-contained reports: inline SVG, no library.

Each chart is an ``<svg>`` with its series drawn as polylines and the same
points embedded as JSON; a few lines of inline script (:data:`HOVER_SCRIPT`,
once per page) show every series' value, with its unit, under the pointer (or
the keyboard: charts are focusable and arrow keys move the cursor). The
legend sits below the plot, never on the lines, and each entry is a button
that hides or shows its series. A y axis whose values span more than a
decade is drawn on a log scale (said in its title). The page needs nothing
from elsewhere, so it opens offline. Series are thinned to at most
:data:`MAX_POINTS` points (quantiles for distributions), which keeps an
82,000-job comparison to a few hundred kilobytes.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

MAX_POINTS = 400
WIDTH, HEIGHT = 640, 360
RIGHT, TOP, BOTTOM = 16, 16, 48
CHAR_PX = 7.2
"""Width of a tick label's character at the charts' 13px font (to keep the y title clear)."""
LOG_SPAN = 10.0
"""A positive y axis whose largest value is this many times its smallest goes log."""
PALETTE = ["#1a5fb4", "#c01c28", "#26a269", "#e66100", "#613583", "#865e3c", "#3d3846", "#0e7c86"]
"""Series colours (distinct, dark enough to read on white)."""
DASHES = ["", "6 3", "2 2", "8 3 2 3"]
"""Line patterns, so series can be told apart without colour (in print, in grey)."""


def series_styles(names: list[str]) -> dict[str, tuple[str, str]]:
    """A colour and a line pattern per series, from its name, so a policy is drawn
    alike from one report to the next whatever the others are. The pattern is the
    name's alone; the colour is the name's unless a series before it in the chart
    has it, then the next one free (series of one chart differ in colour, up to
    the palette's size)."""
    import zlib

    taken: set[int] = set()
    out = {}
    for name in names:
        code = zlib.crc32(name.encode())
        k = code % len(PALETTE)
        while k in taken and len(taken) < len(PALETTE):
            k = (k + 1) % len(PALETTE)
        taken.add(k)
        out[name] = (PALETTE[k], DASHES[code // len(PALETTE) % len(DASHES)])
    return out


Series = dict[str, tuple[np.ndarray, np.ndarray]]


def cdf_series(values: dict[str, np.ndarray], scale: float = 1.0) -> Series:
    """Distributions as CDFs: x = value / scale at MAX_POINTS quantiles, y = fraction."""
    out: Series = {}
    for name, raw in values.items():
        v = np.sort(np.asarray(raw, dtype=np.float64)[np.isfinite(raw)])
        if not len(v):
            continue
        q = np.linspace(0.0, 1.0, min(MAX_POINTS, len(v)))
        out[name] = (np.quantile(v, q) / scale, q)
    return out


def thin(x: ArrayLike, y: ArrayLike, points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """A time series averaged into at most ``points`` equal-width bins of x."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(xs) <= points:
        return xs, ys
    edges = np.linspace(xs[0], xs[-1], points + 1)
    which = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, points - 1)
    count = np.bincount(which, minlength=points)
    keep = count > 0
    mean = np.bincount(which, weights=ys, minlength=points)[keep] / count[keep]
    centre = ((edges[:-1] + edges[1:]) / 2)[keep]
    return centre, mean


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
        steps = (1, 2, 5) if len(decades) <= 4 else (1,)
        return [m * 10.0**k for k in decades for m in steps]
    span = hi - lo or 1.0
    step = 10 ** math.floor(math.log10(span / 5))
    for mult in (1, 2, 5, 10):
        if span / (step * mult) <= 6:
            step *= mult
            break
    first = math.ceil(lo / step) * step
    return [first + k * step for k in range(int((hi - first) / step) + 1)]


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if 1000 <= abs(value) < 1e6 and value == int(value):
        return f"{value:,.0f}"
    if abs(value) >= 1e6 or abs(value) < 0.01:
        return f"{value:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{value:g}"


def unit_of(label: str) -> str:
    """The unit an axis title gives in its last parentheses: 'JCT (h)' -> 'h'."""
    if label.endswith(")") and "(" in label:
        inner = label[label.rindex("(") + 1 : -1].split(";")[0].strip()
        return "" if " " in inner else inner
    return ""


def wants_log(values: np.ndarray) -> bool:
    """Whether values span enough decades that a linear axis would flatten the small ones."""
    finite = values[np.isfinite(values)]
    return bool(len(finite)) and finite.min() > 0 and finite.max() / finite.min() > LOG_SPAN


def line_chart(
    chart_id: str,
    title: str,
    series: Series,
    xlabel: str,
    ylabel: str,
    log_x: bool = False,
    y_range: tuple[float, float] | None = None,
    errors: dict[str, np.ndarray] | None = None,
    log_y: bool | None = None,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """A ``<figure>`` with an interactive line chart of the series; with ``errors``
    (a half-width per point, by series), each point gets a marker and an error bar.
    ``log_y=None`` picks a log y axis where the values span more than a decade;
    ``x_ticks`` puts a labelled tick at each of those x values (a sweep's loads)
    instead of round numbers."""
    if not series:
        return f"<figure><figcaption>{html.escape(title)}: no data</figcaption></figure>"
    errors = {k: np.nan_to_num(np.asarray(v, dtype=np.float64)) for k, v in (errors or {}).items()}
    floor = 1e-3 if log_x else -math.inf
    xs_all = np.concatenate([np.maximum(x, floor) for x, _ in series.values()])
    ys_all = np.concatenate(
        [y for _, y in series.values()]
        + [y + sign * errors[k] for k, (_, y) in series.items() if k in errors for sign in (-1, 1)]
    )
    means = np.concatenate([y for _, y in series.values()])
    if log_y is None:
        log_y = y_range is None and wants_log(means)
    if log_y:
        ys_all = ys_all[ys_all > 0]  # a whisker below zero is cut at the axis
        ylabel = f"{ylabel}, log scale"
    x0, x1 = float(xs_all.min()), float(xs_all.max())
    y0, y1 = y_range if y_range is not None else (float(ys_all.min()), float(ys_all.max()))
    if x1 <= x0:
        x1 = x0 * 10 if log_x else x0 + 1
    if y1 <= y0:
        y1 = y0 * 10 if log_y else y0 + 1
    fx = (lambda x: math.log10(x)) if log_x else (lambda x: x)
    fy = (lambda y: math.log10(max(y, y0))) if log_y else (lambda y: y)
    a, b = fx(x0), fx(x1)
    c, d = fy(y0), fy(y1)
    y_ticks = [t for t in _ticks(y0, y1, log_y) if y0 <= t <= y1 * (1 + 1e-9)]
    widest = max((len(_label(t)) for t in y_ticks), default=1)
    left = int(30 + widest * CHAR_PX)  # the y title, a gap, the widest tick label
    pw, ph = WIDTH - left - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return left + (fx(max(x, floor)) - a) / (b - a) * pw

    def sy(y: float) -> float:
        return TOP + ph - (fy(y) - c) / (d - c) * ph

    parts = [f'<rect x="{left}" y="{TOP}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>']
    for t in x_ticks if x_ticks is not None else _ticks(x0, x1, log_x):
        if x0 <= t <= x1:
            x = sx(t)
            parts.append(
                f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + ph}" class="grid"/>'
            )
            parts.append(
                f'<text x="{x:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{_label(t)}</text>'
            )
    for t in y_ticks:
        y = sy(t)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(t)}</text>')
    data = []
    legend = []
    styles = series_styles(list(series))
    for k, (name, (xs, ys)) in enumerate(series.items()):
        colour, dash = styles[name]
        pattern = f' stroke-dasharray="{dash}"' if dash else ""
        pts = " ".join(
            f"{sx(float(u)):.1f},{sy(float(v)):.1f}"
            for u, v in zip(xs, ys, strict=True)
            if not log_y or v > 0
        )
        marks = [
            f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"{pattern}>'
            f"<title>{html.escape(name)}</title></polyline>"
        ]
        for u, v, e in zip(xs, ys, errors.get(name, ()), strict=False):
            if log_y and v <= 0:
                continue
            cx = sx(float(u))
            lo, hi = sy(max(float(v - e), y0)), sy(min(float(v + e), y1))
            marks.append(
                f'<line x1="{cx:.1f}" y1="{lo:.1f}" x2="{cx:.1f}" y2="{hi:.1f}" '
                f'stroke="{colour}"/><circle cx="{cx:.1f}" cy="{sy(float(v)):.1f}" r="3" '
                f'fill="{colour}"/>'
            )
        parts.append(f'<g data-series="{k}">{"".join(marks)}</g>')
        legend.append(
            f'<button type="button" data-series="{k}" aria-pressed="true" '
            f'title="hide or show {html.escape(name)}">'
            f'<svg class="swatch" width="18" height="6" aria-hidden="true"><line x1="0" y1="3" '
            f'x2="18" y2="3" stroke="{colour}" stroke-width="2"{pattern}/></svg>'
            f"{html.escape(name)}</button>"
        )
        data.append(
            {
                "name": name,
                "colour": colour,
                "x": [round(float(u), 6) for u in xs],
                "y": [round(float(v), 6) for v in ys],
            }
        )
    xtitle = html.escape(xlabel)
    parts.append(f'<text x="{left + pw / 2}" y="{HEIGHT - 8}" text-anchor="middle">{xtitle}</text>')
    parts.append(
        f'<text transform="translate(14 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">'
        f"{html.escape(ylabel)}</text>"
    )
    parts.append(
        f'<line class="cursor" x1="0" x2="0" y1="{TOP}" y2="{TOP + ph}" visibility="hidden"/>'
    )
    frame = {
        "left": left,
        "width": pw,
        "x0": x0,
        "x1": x1,
        "log": log_x,
        "xunit": unit_of(xlabel),
        "yunit": unit_of(ylabel.removesuffix(", log scale")),
    }
    payload = html.escape(json.dumps({"frame": frame, "series": data}), quote=True)
    return (
        f'<figure class="chart"><figcaption>{html.escape(title)}</figcaption>'
        f'<svg id="{chart_id}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" tabindex="0" '
        f'aria-label="{html.escape(title)}: {html.escape(ylabel)} against {html.escape(xlabel)}" '
        f'data-chart="{payload}">{"".join(parts)}</svg>'
        f'<div class="legend" role="group" aria-label="series">{"".join(legend)}</div>'
        f'<output class="readout" for="{chart_id}" aria-live="polite"></output></figure>'
    )


def bar_table(
    title: str, rows: Sequence[str], columns: Sequence[str], cells: list[list[str]]
) -> str:
    """A small table (breakdowns), scrolling within the page when wide."""
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in [title, *columns])
    body = "".join(
        f'<tr><th scope="row">{html.escape(r)}</th>'
        + "".join(f"<td>{html.escape(c)}</td>" for c in row)
        + "</tr>"
        for r, row in zip(rows, cells, strict=True)
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


CHART_STYLE = """
figure.chart { display: inline-block; vertical-align: top; margin: 1rem 1rem 1rem 0;
               width: min(100%, 620px); }
figure.chart svg { width: 100%; height: auto; font: 13px system-ui, sans-serif; }
.scroll + .scroll { margin-top: 1rem; }
figure.chart svg:focus-visible { outline: 3px solid #1a5fb4; }
figure.chart .grid { stroke: #e4e4e4; }
figure.chart .cursor { stroke: #555; stroke-dasharray: 3 3; }
figure.chart figcaption { font-weight: 600; }
figure.chart .readout { display: block; min-height: 1.4em; font-size: .85rem; color: #333; }
figure.chart .legend { display: flex; flex-wrap: wrap; gap: .25rem .5rem; margin: .25rem 0; }
figure.chart .legend button { font: 13px system-ui, sans-serif; background: none; cursor: pointer;
                              border: 1px solid #ccc; border-radius: 4px; padding: 1px 6px; }
figure.chart .legend button[aria-pressed="false"] { opacity: .45; text-decoration: line-through; }
figure.chart .legend svg.swatch { display: inline-block; width: 18px; height: 6px;
                                  vertical-align: middle; margin: 0 4px 2px 0; }
"""

HOVER_SCRIPT = """
for (const svg of document.querySelectorAll("svg[data-chart]")) {
  const chart = JSON.parse(svg.dataset.chart), f = chart.frame;
  const out = svg.parentElement.querySelector(".readout");
  const cursor = svg.querySelector(".cursor");
  const tx = (x) => (f.log ? Math.log10(Math.max(x, 1e-3)) : x);
  const inv = (p) => {
    const a = tx(f.x0), b = tx(f.x1), v = a + p * (b - a);
    return f.log ? 10 ** v : v;
  };
  let at = 0.5;
  const hidden = new Set();
  const unit = (u) => (u ? ` ${u}` : "");
  const show = () => {
    const x = inv(at);
    const parts = chart.series.filter((s, k) => !hidden.has(k)).map((s) => {
      let lo = 0, hi = s.x.length - 1;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (s.x[mid] < x) lo = mid + 1; else hi = mid; }
      return `${s.name}: ${Number(s.y[lo]).toPrecision(3)}${unit(f.yunit)}`;
    });
    out.textContent = `at ${Number(x).toPrecision(3)}${unit(f.xunit)} - ${parts.join("; ")}`;
    cursor.setAttribute("x1", f.left + at * f.width);
    cursor.setAttribute("x2", f.left + at * f.width);
    cursor.setAttribute("visibility", "visible");
  };
  svg.addEventListener("mousemove", (e) => {
    const box = svg.getBoundingClientRect(), scale = box.width / svg.viewBox.baseVal.width;
    at = Math.min(1, Math.max(0, ((e.clientX - box.left) / scale - f.left) / f.width));
    show();
  });
  svg.addEventListener("keydown", (e) => {
    if (e.key === "ArrowRight") at = Math.min(1, at + 0.02);
    else if (e.key === "ArrowLeft") at = Math.max(0, at - 0.02);
    else return;
    e.preventDefault(); show();
  });
  svg.addEventListener("focus", show);
  for (const button of svg.parentElement.querySelectorAll(".legend button")) {
    button.addEventListener("click", () => {
      const k = Number(button.dataset.series), on = hidden.has(k);
      if (on) hidden.delete(k); else hidden.add(k);
      button.setAttribute("aria-pressed", String(on));
      svg.querySelector(`g[data-series="${k}"]`).style.display = on ? "" : "none";
      if (out.textContent) show();
    });
  }
}
"""
