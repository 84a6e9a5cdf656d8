"""A job's loss curve lives in the store: heartbeats extend it, and the loop's
fit reads it, so a restarted service predicts from the same points."""

from __future__ import annotations

import pytest

from corral.runtime.loop.estimates import MAX_POINTS, LossHistory, extend_curve


def _loss(step: float) -> float:
    """Optimus' loss curve: 1 / (a k + b) + c."""
    return 1.0 / (0.01 * step + 0.5) + 0.2


def test_heartbeats_extend_the_curve_in_order_and_thin_it():
    curve = None
    for step in range(0, 50, 5):
        curve = extend_curve(curve, step, _loss(step))
    assert curve is not None and curve["steps"] == [float(s) for s in range(0, 50, 5)]
    # a repeated or earlier step (a resumed attempt), and no loss, add nothing
    assert extend_curve(curve, 45, 0.1) is curve
    assert extend_curve(curve, 60, None) is curve
    assert extend_curve(curve, 60, float("nan")) is curve
    for step in range(50, 50 + 5 * MAX_POINTS, 5):
        curve = extend_curve(curve, step, _loss(step))
    assert len(curve["steps"]) <= MAX_POINTS
    assert curve["steps"] == sorted(curve["steps"]) and curve["steps"][0] == 0.0


def test_a_history_rebuilt_from_the_stored_curve_predicts_the_same():
    curve = None
    for step in range(0, 400, 4):
        curve = extend_curve(curve, step, _loss(step))
    running = LossHistory(target=0.3)
    for k in range(10, len(curve["steps"]) + 1, 10):  # the loop reading it as it grows
        partial = {"steps": curve["steps"][:k], "losses": curve["losses"][:k]}
        running.update(partial)
        running.predicted_total(partial["steps"][-1])
    restarted = LossHistory(target=0.3)
    restarted.update(curve)
    done = curve["steps"][-1]
    assert restarted.predicted_total(done) is not None
    # the same up to when each last refitted (every tenth more points)
    assert restarted.predicted_total(done) == pytest.approx(running.predicted_total(done), rel=1e-3)
    # the truth: loss 0.3 is reached where 0.01 s + 0.5 = 10
    assert restarted.predicted_total(done) == pytest.approx(950, rel=0.05)


def test_the_heartbeat_history_keeps_missing_values_as_none_and_stays_small():
    from corral.runtime.loop.estimates import extend_progress

    progress = None
    for k in range(3 * MAX_POINTS):
        throughput = None if k == 0 else 2.0
        progress = extend_progress(progress, 1000.0 + k, 2.0 * k, throughput, float("nan"))
    assert progress is not None and len(progress["times"]) <= MAX_POINTS
    assert set(progress) == {"times", "steps", "throughput", "loss"}
    assert len({len(values) for values in progress.values()}) == 1  # one point per index
    assert progress["throughput"][0] is None and progress["loss"] == [None] * len(progress["loss"])
    assert progress["times"] == sorted(progress["times"]) and progress["times"][0] == 1000.0
    # a heartbeat no later than the last (clocks equal) adds nothing
    assert extend_progress(progress, progress["times"][-1], 0.0, 1.0, 1.0) is progress
