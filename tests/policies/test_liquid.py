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


def test_small_jobs_share_a_gpu_only_where_their_predicted_memory_fits() -> None:
    """Liquid's memory estimate gates fine-grained sharing: two jobs of a type
    Gavel never measured share a GPU while nothing is known of their memory;
    once jobs of that type have run (simulated: its footprint is what a
    heartbeat would report), pairs predicted to overflow the V100's 16 GB no
    longer share, and pairs predicted to fit still do."""
    import pandas as pd

    from corral.model.jobs import JobTable
    from corral.sim.engine import Simulator
    from corral.sim.result import SimConfig

    def shared(job_type: str) -> int:
        frame = pd.DataFrame(
            {
                "submit_time": [0.0, 0.0, 500.0, 500.0, 1000.0, 1000.0],
                "num_gpus": 1,
                "duration": 100.0,
                "job_type": job_type,
            }
        )
        config = SimConfig(switch_cost=0.0, check_invariants=True)
        policy = make_policy("liquid", small=1e9)
        result = Simulator(JobTable(frame), uniform(1, 1), policy, config).run()
        return int(result.policy.counts["shared"])

    assert shared("Transformer (batch size 4096)") == 1  # 165 GB each, learned after the first pair
    assert shared("LM (batch size 7)") == 3  # 1.2 GB each: every pair fits


def test_the_memory_estimator_learns_each_types_footprint() -> None:
    import pandas as pd

    from corral.estimate.requirements import MemoryEstimator
    from corral.model.jobs import JobTable
    from corral.model.state import SchedulerState

    rng = np.random.default_rng(0)
    kinds = ["ResNet-50 (batch size 64)", "LM (batch size 20)", "Transformer (batch size 128)"]
    types = [kinds[k] for k in rng.integers(0, 3, 400)]
    users = [f"u{k}" for k in rng.integers(0, 5, 400)]
    jobs = JobTable(
        pd.DataFrame(
            {"submit_time": 0.0, "num_gpus": 1, "duration": 60.0, "job_type": types, "user": users}
        )
    )
    state = SchedulerState(uniform(1, 1), jobs)
    truth = state.measured_memory(np.arange(400))
    assert np.isfinite(truth).all()
    estimator = MemoryEstimator(min_samples=50, refit_every=100)
    assert np.isnan(estimator.predict(state, [300])).all()  # nothing learned: unknown
    for i in range(300):
        estimator.observe(state, i, float(truth[i]))
    assert estimator.fits >= 1
    predicted = estimator.predict(state, list(range(300, 400)))
    assert np.allclose(predicted, truth[300:], rtol=0.05)


def test_run_time_estimates_follow_recent_history_of_the_owner_then_the_vc() -> None:
    """Before the forest: an owner's recent jobs, else the VC's; with the forest, a VC
    whose jobs run 100x longer than another's is predicted so, sizes and types alike."""
    import pandas as pd

    from corral.estimate.requirements import RunTimeEstimator
    from corral.model.jobs import JobTable
    from corral.model.state import SchedulerState

    n = 400
    vcs = ["short" if k % 2 else "long" for k in range(n)]
    duration = [60.0 if v == "short" else 6000.0 for v in vcs]
    users = ["" for _ in range(n)]
    users[1] = "ann"
    jobs = JobTable(
        pd.DataFrame(
            {"submit_time": 0.0, "num_gpus": 1, "duration": duration, "vc": vcs, "user": users}
        )
    )
    state = SchedulerState(uniform(1, 1), jobs)
    est = RunTimeEstimator(min_samples=100, refit_every=100, recent=10)
    est.observe(state, 0, 6000.0)  # a "long" job, no owner
    est.observe(state, 1, 30.0)  # ann's, in "short"
    guess = est.predict(state, [2, 3])  # "long" (no owner), "short" (no owner)
    assert guess[0] == pytest.approx(6000.0)
    assert guess[1] == pytest.approx(30.0)  # the VC's recent: ann's job is all it has
    for i in range(4, 300):
        est.observe(state, i, duration[i])
    assert est.fits >= 1
    predicted = est.predict(state, list(range(300, 400)))
    assert np.allclose(predicted, duration[300:], rtol=0.1)
