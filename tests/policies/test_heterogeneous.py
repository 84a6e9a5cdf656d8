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


@pytest.mark.parametrize(("seed", "multi"), [(0, 1), (2, 1), (0, 0)])
@pytest.mark.parametrize("name", NAMES)
def test_every_policy_runs_gavels_workloads_on_three_gpu_types(
    name: str, seed: int, multi: int
) -> None:
    """The workload that crashed Optimus, Gandiva (a 'speed 0' plan) and the packed
    variant (a pair given speed 0) on seeds 0 and 2, smaller, with single-GPU jobs
    only and with multi-GPU ones: every job ends, the invariants hold."""
    jobs = generate_gavel(GavelWorkload.parse(f"jobs=30,rate=20,multi={multi}", seed=seed))
    config = SimConfig(check_invariants=True, seed=seed)
    result = Simulator(jobs, load_cluster("gavel:4:4:4"), make_policy(name), config).run()
    assert (result.state.finish_time == result.state.finish_time).all()  # all finished
