"""Metrics follow their one definition."""

from __future__ import annotations

import numpy as np
import pytest

from corral.sim.metrics import _bin_average, summarise, timeline_frame
from tests.conftest import run, uniform


def test_summary_on_a_hand_computed_run():
    # 1 GPU; j0 0-100, j1 arrives at 50 and runs 100-130 (FIFO)
    result = run([(0.0, 1, 100.0), (50.0, 1, 30.0)], uniform(1, 1), "fifo")
    s = summarise(result)
    assert s["jobs_finished"] == 2
    assert s["avg_jct_s"] == pytest.approx((100 + 80) / 2)
    assert s["avg_queueing_s"] == pytest.approx(25.0)
    assert s["makespan_s"] == 130.0
    assert s["gpu_utilization"] == pytest.approx(1.0)
    assert s["offered_load"] == pytest.approx(130 / 50)  # 130 GPU-s over a 50 s submit span
    assert s["weighted_jct_s"] == pytest.approx(180.0)


def test_bin_average_of_a_step_function():
    t = np.array([0.0, 10.0])
    v = np.array([2.0, 4.0])
    edges = np.array([0.0, 5.0, 15.0, 20.0])
    # [0,5): 2; [5,15): half 2, half 4 = 3; [15,20): 4
    assert _bin_average(t, v, edges).tolist() == pytest.approx([2.0, 3.0, 4.0])


def test_timeline_utilisation_is_a_share():
    result = run([(0.0, 2, 100.0), (10.0, 1, 10.0)], uniform(1, 4), "fifo")
    tl = timeline_frame(result, bins=10)
    assert len(tl) == 10
    assert (tl["gpu_utilization"] <= 1.0).all() and (tl["gpu_utilization"] >= 0).all()
