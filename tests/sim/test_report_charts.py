"""The reports' chart data: what the lines say, not how they look."""

from __future__ import annotations

import numpy as np
import pandas as pd

from corral.sim.report import preemption_series
from corral.sim.report_charts import line_chart, series_styles


def test_preemption_series_is_the_share_of_jobs_preempted_at_least_k_times() -> None:
    runs = {
        "las": pd.DataFrame({"preemptions": [0, 1, 1, 3]}),
        "fifo": pd.DataFrame({"preemptions": [0, 0, 0, 0]}),
        "hare": pd.DataFrame({"jct": [1.0]}),  # rounds of tasks: no preemption count
    }
    series = preemption_series(runs)
    assert set(series) == {"las", "fifo"}
    ks, share = series["las"]
    assert ks.tolist() == [1.0, 2.0, 3.0]
    assert share.tolist() == [0.75, 0.25, 0.25]
    assert series["fifo"][1].tolist() == [0.0, 0.0, 0.0]


def test_error_bars_widen_the_axis_and_mark_every_point() -> None:
    series = {"a": (np.array([0.5, 1.0]), np.array([2.0, 3.0]))}
    page = line_chart("c", "t", series, "x", "y", errors={"a": np.array([1.5, 0.5])})
    colour, _ = series_styles(["a"])["a"]
    assert page.count("<circle") == 2 and page.count(f'stroke="{colour}"/>') == 2
    # the lowest whisker (2.0 - 1.5 = 0.5) is inside the axis: a tick at 0.5 exists
    assert ">0.5</text>" in page


def test_legend_is_outside_the_plot_and_each_entry_toggles_its_series() -> None:
    series = {
        "las": (np.array([1.0, 2.0]), np.array([0.2, 0.4])),
        "fifo": (np.array([1.0, 2.0]), np.array([0.3, 0.5])),
    }
    page = line_chart("c", "t", series, "time (days)", "pending (jobs)")
    svg, after = page.split("</svg>", 1)  # (the legend draws its swatches in SVG too)
    assert ">las<" not in svg.replace("<title>las</title>", "")  # no legend text on the lines
    assert after.count("<button") == 2 and 'data-series="1" aria-pressed="true"' in after
    assert svg.count('<g data-series="') == 2
    # units come from the axis titles, for the readout
    assert (
        "&quot;xunit&quot;: &quot;days&quot;" in page
        and "&quot;yunit&quot;: &quot;jobs&quot;" in page
    )


def test_values_spanning_decades_get_a_log_axis_and_close_ones_do_not() -> None:
    wide = {
        "las": (np.array([0.5, 0.9]), np.array([2.0, 5000.0])),
        "tiresias-las": (np.array([0.5, 0.9]), np.array([1.5, 3.0])),
    }
    page = line_chart("c", "t", wide, "offered load", "average JCT (h)")
    assert "average JCT (h), log scale" in page and ">1,000</text>" in page
    narrow = {"a": (np.array([0.5, 0.9]), np.array([2.0, 5.0]))}
    assert "log scale" not in line_chart("c", "t", narrow, "offered load", "average JCT (h)")
    # an explicit range keeps the axis linear whatever the values
    assert "log scale" not in line_chart("c", "t", wide, "x", "y", y_range=(0.0, 6000.0))


def test_the_y_title_clears_the_widest_tick_label() -> None:
    import re

    series = {"a": (np.array([0.0, 1.0]), np.array([0.0, 1_500_000.0]))}
    page = line_chart("c", "t", series, "x", "y")
    left = float(re.search(r'<rect x="([0-9.]+)" y=', page).group(1))
    widest = max(len(t) for t in re.findall(r'text-anchor="end">([^<]+)<', page))
    assert left - 6 - widest * 7.2 >= 14 + 8  # the rotated title at x=14, half its height clear


def test_a_series_keeps_its_style_whatever_else_is_charted() -> None:
    """A policy is drawn alike in every report (its colour and line pattern come
    from its name, not its place in the list), series of one chart differ in
    colour, and patterns tell series apart without colour."""
    from corral.sim.report_charts import DASHES, PALETTE

    alone = series_styles(["tiresias-las"])
    among = series_styles(["fifo", "srtf", "tiresias-las", "gandiva"])
    assert among["tiresias-las"] == alone["tiresias-las"]
    eight = series_styles([f"policy-{k}" for k in range(len(PALETTE))])
    assert len({colour for colour, _ in eight.values()}) == len(PALETTE)
    many = series_styles([f"policy-{k}" for k in range(40)])
    assert {dash for _, dash in many.values()} == set(DASHES)
