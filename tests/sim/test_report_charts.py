"""The reports' chart data: what the lines say, not how they look."""

from __future__ import annotations

import numpy as np
import pandas as pd

from corral.sim.report import preemption_series
from corral.sim.report_charts import line_chart


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
    assert page.count("<circle") == 2 and page.count('stroke="#1a5fb4"/>') == 2
    # the lowest whisker (2.0 - 1.5 = 0.5) is inside the axis: a tick at 0.5 exists
    assert ">0.5</text>" in page
