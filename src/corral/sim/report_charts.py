"""Interactive charts for the self-contained reports: inline SVG, no library.

Each chart is an ``<svg>`` with its series drawn as polylines and the same
points embedded as JSON; a few lines of inline script (:data:`HOVER_SCRIPT`,
once per page) show every series' value under the pointer (or the keyboard:
charts are focusable and arrow keys move the cursor). The page needs nothing
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
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 48
PALETTE = ["#1a5fb4", "#c01c28", "#26a269", "#e66100", "#613583", "#865e3c", "#3d3846", "#0e7c86"]
"""Series colours (distinct, dark enough to read on white)."""

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
        return [10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
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


def line_chart(
    chart_id: str,
    title: str,
    series: Series,
    xlabel: str,
    ylabel: str,
    log_x: bool = False,
    y_range: tuple[float, float] | None = None,
    errors: dict[str, np.ndarray] | None = None,
) -> str:
    """A ``<figure>`` with an interactive line chart of the series; with ``errors``
    (a half-width per point, by series), each point gets a marker and an error bar."""
    if not series:
        return f"<figure><figcaption>{html.escape(title)}: no data</figcaption></figure>"
    errors = {k: np.nan_to_num(np.asarray(v, dtype=np.float64)) for k, v in (errors or {}).items()}
    floor = 1e-3 if log_x else -math.inf
    xs_all = np.concatenate([np.maximum(x, floor) for x, _ in series.values()])
    ys_all = np.concatenate(
        [y for _, y in series.values()]
        + [y + sign * errors[k] for k, (_, y) in series.items() if k in errors for sign in (-1, 1)]
    )
    x0, x1 = float(xs_all.min()), float(xs_all.max())
    y0, y1 = y_range if y_range is not None else (float(ys_all.min()), float(ys_all.max()))
    if x1 <= x0:
        x1 = x0 * 10 if log_x else x0 + 1
    if y1 <= y0:
        y1 = y0 + 1
    fx = (lambda x: math.log10(x)) if log_x else (lambda x: x)
    a, b = fx(x0), fx(x1)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (fx(max(x, floor)) - a) / (b - a) * pw

    def sy(y: float) -> float:
        return TOP + ph - (y - y0) / (y1 - y0) * ph

    parts = [f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>']
    for t in _ticks(x0, x1, log_x):
        if x0 <= t <= x1:
            x = sx(t)
            parts.append(
                f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + ph}" class="grid"/>'
            )
            parts.append(
                f'<text x="{x:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{_label(t)}</text>'
            )
    for t in _ticks(y0, y1, False):
        y = sy(t)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(t)}</text>')
    data = []
    for k, (name, (xs, ys)) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        pts = " ".join(
            f"{sx(float(u)):.1f},{sy(float(v)):.1f}" for u, v in zip(xs, ys, strict=True)
        )
        parts.append(
            f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6">'
            f"<title>{html.escape(name)}</title></polyline>"
        )
        for u, v, e in zip(xs, ys, errors.get(name, ()), strict=False):
            cx, lo, hi = sx(float(u)), sy(float(v - e)), sy(float(v + e))
            parts.append(
                f'<line x1="{cx:.1f}" y1="{lo:.1f}" x2="{cx:.1f}" y2="{hi:.1f}" '
                f'stroke="{colour}"/><circle cx="{cx:.1f}" cy="{sy(float(v)):.1f}" r="3" '
                f'fill="{colour}"/>'
            )
        ly = TOP + 14 + 16 * k
        parts.append(f'<rect x="{LEFT + 8}" y="{ly - 9}" width="12" height="4" fill="{colour}"/>')
        parts.append(f'<text x="{LEFT + 24}" y="{ly - 4}">{html.escape(name)}</text>')
        data.append(
            {
                "name": name,
                "colour": colour,
                "x": [round(float(u), 6) for u in xs],
                "y": [round(float(v), 6) for v in ys],
            }
        )
    xtitle = html.escape(xlabel)
    parts.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 8}" text-anchor="middle">{xtitle}</text>')
    parts.append(
        f'<text transform="translate(14 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">'
        f"{html.escape(ylabel)}</text>"
    )
    parts.append(
        f'<line class="cursor" x1="0" x2="0" y1="{TOP}" y2="{TOP + ph}" visibility="hidden"/>'
    )
    frame = {"left": LEFT, "width": pw, "x0": x0, "x1": x1, "log": log_x}
    payload = html.escape(json.dumps({"frame": frame, "series": data}), quote=True)
    return (
        f'<figure class="chart"><figcaption>{html.escape(title)}</figcaption>'
        f'<svg id="{chart_id}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" tabindex="0" '
        f'aria-label="{html.escape(title)}: {html.escape(ylabel)} against {html.escape(xlabel)}" '
        f'data-chart="{payload}">{"".join(parts)}</svg>'
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
  const show = () => {
    const x = inv(at);
    const parts = chart.series.map((s) => {
      let lo = 0, hi = s.x.length - 1;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (s.x[mid] < x) lo = mid + 1; else hi = mid; }
      return `${s.name}: ${Number(s.y[lo]).toPrecision(3)}`;
    });
    out.textContent = `at ${Number(x).toPrecision(3)} - ${parts.join("; ")}`;
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
}
"""
