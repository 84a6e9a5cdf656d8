"""Policy options from the command line."""

from __future__ import annotations

import pytest

from corral.errors import CorralError
from corral.sim.run import parse_policy_options


def test_policy_options_apply_where_they_belong():
    assert parse_policy_options(["quantum=300"], "las") == {"quantum": 300}
    assert parse_policy_options(["quantum=300"], "fifo") == {}
    assert parse_policy_options(["las.quantum=60.5", "srtf.x=1"], "las") == {"quantum": 60.5}
    with pytest.raises(CorralError):
        parse_policy_options(["quantum"], "las")


def test_the_pollux_artifact_preset_sets_its_mechanics_and_keeps_what_is_given():
    from corral.sim.run import RunSpec

    spec = RunSpec(policy="tiresias-las", preset="pollux-sim")
    config = spec.config()
    assert (config.switch_cost, config.charge_first_start, config.decide_every) == (
        30.0,
        True,
        60.0,
    )
    assert spec.policy_options == {"queues": 2, "thresholds": "57600", "queue_order": "strict"}
    # placement and locality stay corral's (the artifact interpolates measured placements)
    assert spec.placement is None and spec.measured_locality
    given = RunSpec(policy="pollux", preset="pollux-sim", policy_options={"initial_batch": "job"})
    assert given.policy_options == {"initial_batch": "job"}


def test_a_pollux_workload_under_the_artifact_preset_keeps_the_invariants():
    import numpy as np

    from corral import Experiment

    result = Experiment(
        trace="pollux-6@0.5",
        cluster="uniform:16x4:T4",
        policies="tiresias-las",
        preset="pollux-sim",
        check=True,
        progress=False,
    ).simulate()
    s = result.state
    assert (s.finish_time >= s.submit + 30.0).all()  # every start is charged 30 s
    assert (s.first_start % 60.0 == 0.0).all()  # passes only on the minute
    assert np.isfinite(s.finish_time).all()


def test_the_pollux_artifact_preset_is_refused_for_a_policy_that_plans_its_own_rounds():
    from corral import Experiment

    with pytest.raises(CorralError, match="plans rounds of its own: --preset pollux-sim"):
        Experiment(
            trace="pollux-6@0.5",
            cluster="uniform:16x4:T4",
            policies="hare",
            preset="pollux-sim",
            progress=False,
        ).simulate()
