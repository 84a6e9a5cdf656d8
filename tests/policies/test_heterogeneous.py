"""Every policy runs on Gavel's heterogeneous clusters: no job is started on a GPU type
where its measured speed is 0 (a gang that does not fit the GPU's memory), at its own
size or at a size a policy gives it (Optimus and Pollux resize, Gandiva grows)."""

from __future__ import annotations

import pytest

from corral.model.cluster_specs import load_cluster
from corral.policies import POLICIES, make_policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig
from corral.traces.gavel_synthetic import GavelWorkload, generate_gavel

NAMES = [name for name in POLICIES if name != "gavel"]  # (an alias of max-min fairness)


CRASHED = ("optimus", "gandiva", "gavel-max-min-fairness-packed")
"""The policies Gavel's workload of 200 jobs once crashed (a 'speed 0' plan, a pair
given speed 0): they keep that workload whole, the others run a smaller one."""


WORKLOADS = [(0, 1), (2, 1), (0, 0)]
"""(seed, multi): seeds 0 and 2, with multi-GPU jobs and with single-GPU ones only."""


def cases() -> list[object]:
    """Every policy on every workload; the 200-job runs past the first workload are
    long (a minute each: make test-long runs them)."""
    return [
        pytest.param(name, seed, multi, marks=pytest.mark.long)
        if name in CRASHED and (seed, multi) != WORKLOADS[0]
        else (name, seed, multi)
        for seed, multi in WORKLOADS
        for name in NAMES
    ]


@pytest.mark.parametrize(("name", "seed", "multi"), cases())
def test_every_policy_runs_gavels_workloads_on_three_gpu_types(
    name: str, seed: int, multi: int
) -> None:
    """Gavel's workload on seeds 0 and 2, with single-GPU jobs only and with
    multi-GPU ones: every job ends, the invariants hold. 30 jobs (weeks of the
    cluster's time); 200 for the policies it crashed (Optimus, Gandiva, the packed
    variant), the size that found those crashes."""
    jobs = 200 if name in CRASHED else 30
    workload = GavelWorkload.parse(f"jobs={jobs},rate=20,multi={multi}", seed=seed)
    config = SimConfig(check_invariants=True, seed=seed)
    result = Simulator(
        generate_gavel(workload), load_cluster("gavel:4:4:4"), make_policy(name), config
    ).run()
    assert len(result.state.finish_time) == jobs
    assert (result.state.finish_time == result.state.finish_time).all()  # all finished
