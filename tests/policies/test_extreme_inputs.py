"""Every registered policy schedules whatever values a job spec accepts.

One job's weight or duration at the edge of what the API takes once made every
pass of Gavel's LPs fail, leaving every user's jobs waiting. Here each policy
gets workloads mixing the extreme accepted values (weights at both bounds,
durations of one second and of a year) on a cluster of three GPU types, and
every pass must succeed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.model.cluster import Cluster, Node, assign_racks
from corral.model.jobs import JobTable
from corral.policies import POLICIES, make_policy
from corral.runtime.jobspec.specs import MAX_SECONDS, MAX_WEIGHT, MIN_WEIGHT, JobSpec
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig

EXTREME_WEIGHTS = [MIN_WEIGHT, 1.0, MAX_WEIGHT]
EXTREME_SECONDS = [1.0, 60.0, MAX_SECONDS]


def mixed_cluster() -> Cluster:
    nodes = [Node("v0", "V100", 4), Node("p0", "P100", 4), Node("k0", "K80", 4)]
    return Cluster("mixed", assign_racks(nodes, 16), rack_size=16)


def workload(rows: list[tuple[int, float, float]]) -> JobTable:
    """(GPUs, duration, weight) per job, all submitted within the first minute."""
    return JobTable(
        pd.DataFrame(
            {
                "job_id": [f"j{k}" for k in range(len(rows))],
                "submit_time": np.linspace(0.0, 60.0, len(rows)),
                "num_gpus": [r[0] for r in rows],
                "duration": [r[1] for r in rows],
                "weight": [r[2] for r in rows],
            }
        )
    )


def test_the_spec_refuses_values_beyond_the_bounds() -> None:
    base = {"command": ["true"]}
    for bad in ({"weight": 1e-30}, {"weight": 1e300}, {"duration": 1e15}, {"wall_time": 1e15}):
        with pytest.raises(ValueError):
            JobSpec.model_validate({**base, **bad})
    for bad_gpus in ("2", True, 2.5):
        with pytest.raises(ValueError):
            JobSpec.model_validate({**base, "gpus": bad_gpus})
    ok = JobSpec.model_validate(
        {**base, "weight": MIN_WEIGHT, "duration": MAX_SECONDS, "wall_time": MAX_SECONDS}
    )
    assert ok.weight == MIN_WEIGHT
    schema = JobSpec.model_json_schema()["properties"]
    assert schema["weight"]["minimum"] == MIN_WEIGHT  # the bounds are in the API's schema
    assert schema["weight"]["maximum"] == MAX_WEIGHT


@pytest.mark.parametrize("name", list(POLICIES))
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from([1, 2, 4]),
            st.sampled_from(EXTREME_SECONDS),
            st.sampled_from(EXTREME_WEIGHTS),
        ),
        min_size=2,
        max_size=10,
    )
)
def test_every_policy_passes_with_extreme_accepted_values(
    name: str, rows: list[tuple[int, float, float]]
) -> None:
    config = SimConfig(check_invariants=True, max_time=6 * 3600.0, switch_cost=0.0)
    result = Simulator(workload(rows), mixed_cluster(), make_policy(name), config).run()
    # every pass succeeded (a failing pass raises), the invariants held throughout,
    # and the cluster did work: something ran within the window
    assert result.passes >= 1 and result.busy_gpu_seconds > 0, name
