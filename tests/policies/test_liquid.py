"""Liquid: bursts packed together, first come first served otherwise, no preemption."""

from __future__ import annotations

import numpy as np
import pytest

from corral.errors import CorralError
from corral.policies import make_policy

from ..conftest import run, uniform


def test_a_burst_is_packed_and_older_jobs_go_first() -> None:
    cluster = uniform(4, 4, rack_size=2)
    rows = [(0.0, 4, 1000.0)]  # an older job that fits
    rows += [(10.0, g, 500.0) for g in (3, 2, 1, 4, 2)]  # a burst of five
    result = run(rows, cluster, "liquid")
    s = result.state
    assert result.policy.batches == 1
    assert s.first_start[0] == 0.0
    # 16 GPUs: the older job's 4, then the burst's 12 all fit at once
    assert (s.first_start[1:] == 10.0).all()
    assert s.preemptions.sum() == 0


def test_spread_jobs_stay_within_a_rack_when_they_can() -> None:
    cluster = uniform(4, 4, rack_size=2)
    s = run([(0.0, 1, 100.0), (0.0, 6, 100.0)], cluster, "liquid", placement="network")
    assert np.isfinite(s.state.finish_time).all()


def test_options_are_checked() -> None:
    with pytest.raises(CorralError, match="batch"):
        make_policy("liquid", batch=1)


def test_runs_on_the_philly_trace_with_gavel_types() -> None:
    from corral.model.cluster_specs import load_cluster
    from corral.sim.run import RunSpec, simulate
    from corral.traces import TraceOptions, load_trace

    cluster = load_cluster("philly", scale=0.17)
    jobs = load_trace("philly", cluster.total_gpus, TraceOptions(max_jobs=1500, job_types="gavel"))
    result = simulate(jobs, cluster, RunSpec("liquid", check_invariants=True))
    assert np.isfinite(result.state.finish_time).all()
    assert result.policy.batches > 0


def test_prescheduling_hides_the_launch_phase_once_run_times_are_learned() -> None:
    # 80 alike jobs queue for one GPU; each start costs a 30-s launch phase.
    # After 50 finish the forest predicts the next end, and the successor's
    # data is staged meanwhile, so its launch is (nearly) hidden.
    rows = [(0.0, 1, 100.0)] * 80
    cluster = uniform(1, 1)
    plain = run(rows, cluster, "liquid", launch=30, prescheduling=False)
    staged = run(rows, cluster, "liquid", launch=30)
    end_plain = float(np.nanmax(plain.state.finish_time))
    end_staged = float(np.nanmax(staged.state.finish_time))
    assert end_plain == pytest.approx(80 * 130.0)
    assert end_staged < end_plain - 20 * 30.0
    assert staged.policy.estimator.fits >= 1 and staged.policy.counts["prestaged"] > 20


def test_small_jobs_share_a_gpu() -> None:
    rows = [(0.0, 1, 100.0), (0.0, 1, 100.0)]
    result = run(rows, uniform(1, 1), "liquid", small=1e9)
    assert result.policy.counts["shared"] == 1
    assert (result.state.first_start == 0.0).all()
