"""AntMan: the memory model, guaranteed jobs sharing instead of evicting,
opportunistic jobs packed onto under-used GPUs, eviction when memory does not
allow sharing, upgrades when quota frees."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from corral.errors import CorralError
from corral.model.jobs import JobTable
from corral.perf.memory import fits_together, footprint_gb, gpu_memory_gb
from corral.perf.throughputs import gavel_throughputs
from corral.policies import make_policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig

from ..conftest import uniform

Row = tuple[float, int, float, str] | tuple[float, int, float, str, str]
"""(submit, gpus, duration, vc[, job type])."""


def table(rows: list[Row]) -> JobTable:
    frame = pd.DataFrame(
        {
            "job_id": [f"j{k}" for k in range(len(rows))],
            "submit_time": [r[0] for r in rows],
            "num_gpus": [r[1] for r in rows],
            "duration": [r[2] for r in rows],
            "vc": [r[3] for r in rows],
        }
    )
    if any(len(r) > 4 for r in rows):
        frame["job_type"] = [r[4] if len(r) > 4 else "generic" for r in rows]  # type: ignore[misc]
    return JobTable(frame)


def simulate(rows, cluster, until=float("inf"), **options):  # type: ignore[no-untyped-def]
    config = SimConfig(switch_cost=0.0, check_invariants=until == float("inf"), max_time=until)
    return Simulator(table(rows), cluster, make_policy("antman", **options), config).run()


def test_memory_model() -> None:
    assert gpu_memory_gb("PHILLY-24GB") == 24.0
    assert gpu_memory_gb("v100") == 16.0
    assert gpu_memory_gb("MYSTERY") is None
    assert footprint_gb("ResNet-50 (batch size 128)") == pytest.approx(13.02)
    assert footprint_gb("generic") is None
    big = "ResNet-50 (batch size 128)"
    assert not fits_together([big, big], "V100", squeeze=0.5)
    assert fits_together([big, "LM (batch size 5)"], "V100", squeeze=0.5)
    assert fits_together(["generic", big], "V100")  # unknown: assumed to fit


def test_gavel_records_pairs_that_do_not_fit() -> None:
    rel = gavel_throughputs().relative_pair(
        ("ResNet-50 (batch size 128)", 1), ("ResNet-50 (batch size 128)", 1)
    )
    assert rel == (0.0, 0.0)
    rel = gavel_throughputs().relative_pair(("LM (batch size 5)", 1), ("A3C", 1))
    assert rel is not None and min(rel) > 0


def test_an_owner_shares_an_opportunistic_job_s_gpu_instead_of_evicting_it() -> None:
    # a (quota 2) fills 4 GPUs: 2 guaranteed, 2 opportunistic on b's idle GPUs;
    # b's jobs arrive: no GPU idle, so each shares an opportunistic job's GPU,
    # keeping 95% of its speed (the stated model: the types were not measured)
    rows: list[Row] = [(0.0, 1, 1000.0, "a") for _ in range(4)]
    rows += [(10.0, 1, 95.0, "b"), (10.0, 1, 95.0, "b")]
    s = simulate(rows, uniform(1, 4), quotas="a=2,b=2").state
    assert s.preemptions.sum() == 0
    assert list(s.first_start[4:]) == [10.0, 10.0]
    assert s.finish_time[4:] == pytest.approx([110.0, 110.0])  # 95 s of work at 0.95
    # the opportunistic jobs ran at 0.3 for those 100 s: 70 s behind the others
    assert sorted(s.finish_time[:4]) == pytest.approx([1000.0, 1000.0, 1070.0, 1070.0])


def test_memory_that_does_not_allow_sharing_means_eviction() -> None:
    big = "ResNet-50 (batch size 128)"
    rows: list[Row] = [(0.0, 1, 1000.0, "a", big), (0.0, 1, 1000.0, "a", big)]
    rows.append((10.0, 1, 100.0, "b", big))
    s = simulate(rows, uniform(1, 2, gpu_type="V100"), quotas="a=1,b=1").state
    assert s.first_start[2] == 10.0
    assert s.preemptions[:2].sum() == 1  # the opportunistic one was evicted
    assert s.preemptions[2] == 0


def test_opportunistic_jobs_pack_onto_guaranteed_ones_and_grow_back() -> None:
    rows: list[Row] = [(0.0, 1, 100.0, "a"), (0.0, 1, 1000.0, "a"), (5.0, 1, 200.0, "b")]
    s = simulate(rows, uniform(1, 2), quotas="a=2").state
    # b has no quota and nothing is idle: it packs onto a guaranteed job, the
    # one it gains most from (equal here: the earliest started), at 0.3; a's
    # job keeps 0.95
    assert s.first_start[2] == 5.0 and s.preemptions.sum() == 0
    # a's 100-s job: 5 s alone, then 95 s of work at 0.95 = 100 s more
    assert s.finish_time[0] == pytest.approx(105.0)
    # b: 100 s at 0.3 (30 s of work) while packed, then alone: 170 s more
    assert s.finish_time[2] == pytest.approx(105.0 + 170.0)


def test_a_smaller_opportunistic_job_packs_onto_some_of_a_wider_ones_gpus() -> None:
    """Gang sizes need not match: b's 1-GPU job (b has no quota) shares one GPU
    of a's 4-GPU job, which runs at 0.95 meanwhile (a synchronous gang goes at
    the pace of its shared GPU); when a's job ends, b's keeps its one GPU and
    the other three are free at once for the 3-GPU job waiting."""
    rows: list[Row] = [
        (0.0, 4, 95.0, "a"),  # guaranteed, all 4 GPUs: 95 s of work at 0.95 once b packs
        (5.0, 1, 200.0, "b"),  # opportunistic, nothing idle: packs at 0.3
        (10.0, 3, 50.0, "a"),  # a is at quota: opportunistic, waits for GPUs
    ]
    s = simulate(rows, uniform(1, 4), quotas="a=4").state
    assert s.first_start[1] == 5.0 and s.preemptions.sum() == 0
    assert s.finish_time[0] == pytest.approx(5.0 + 90.0 / 0.95)
    handed = s.finish_time[0]
    # the 3-GPU job starts as a's ends, on the three GPUs b's job did not share
    assert s.first_start[2] == pytest.approx(handed)
    # b: 0.3 while packed, then alone
    assert s.finish_time[1] == pytest.approx(handed + 200.0 - 0.3 * (handed - 5.0))


def test_an_opportunistic_job_is_upgraded_when_its_quota_frees() -> None:
    rows: list[Row] = [
        (0.0, 1, 100.0, "a"),  # guaranteed, ends at 100
        (0.0, 1, 1000.0, "a"),  # opportunistic at first, upgraded at 100
        (150.0, 1, 1000.0, "a"),  # a is at quota again: opportunistic
        (200.0, 1, 50.0, "b"),  # owed a GPU, none idle: shares with job 2
    ]
    result = simulate(rows, uniform(1, 2), until=210.0, quotas="a=1,b=1")
    s = result.state
    assert result.policy.counts["upgraded"] == 1
    assert int(s.host[3]) == 2 or int(s.guest[2]) == 3
    assert s.preemptions.sum() == 0


def test_options_are_checked() -> None:
    with pytest.raises(CorralError, match="slowdown"):
        make_policy("antman", slowdown=1.5)
    with pytest.raises(CorralError, match="squeeze"):
        make_policy("antman", squeeze=0)


def test_runs_on_the_philly_trace_with_its_vcs() -> None:
    from corral.model.cluster_specs import load_cluster
    from corral.sim.run import RunSpec
    from corral.sim.run import simulate as run
    from corral.traces import TraceOptions, load_trace

    cluster = load_cluster("philly", scale=0.17)
    jobs = load_trace("philly", cluster.total_gpus, TraceOptions(max_jobs=1500))
    result = run(jobs, cluster, RunSpec("antman", check_invariants=True))
    s = result.state
    assert np.isfinite(s.finish_time).all()
    assert result.policy.counts["packed"] > 0
