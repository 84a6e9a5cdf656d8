"""Every policy runs on Gavel's heterogeneous clusters: no job is started on a GPU type
where its measured speed is 0 (a gang that does not fit the GPU's memory), at its own
size or at a size a policy gives it (Optimus and Pollux resize, Gandiva grows)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from corral.model.apply_plan import start_problem
from corral.model.cluster import Cluster, Node, assign_racks
from corral.model.cluster_specs import load_cluster
from corral.model.jobs import JobTable
from corral.model.state import SchedulerState
from corral.policies import POLICIES, make_policy
from corral.policies.base import type_holds, wider_than_any_type
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


def _one_node_per_type() -> tuple[Cluster, SchedulerState]:
    """A V100 node and a K80 node of four GPUs each; a two-node gang of two GPUs
    (one a node) waiting, the only job: no GPU type can hold its layout."""
    nodes = [Node("v0", "V100", 4), Node("k0", "K80", 4)]
    cluster = Cluster("a-node-a-type", assign_racks(nodes, 16), rack_size=16)
    table = pd.DataFrame(
        {"job_id": ["gang"], "submit_time": [0.0], "num_gpus": [2], "duration": [100.0]}
    )
    state = SchedulerState(cluster, JobTable(table))
    state.arrive(0)
    state.nodes_req[0] = 2
    return cluster, state


LAYOUT_NAMES = [name for name in NAMES if POLICIES[name].node_layouts]


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_a_gang_whose_node_layout_no_type_holds_starts_across_types(name: str) -> None:
    """Type-aware policies (Gavel's LPs, Themis' auction) once gave such a gang a
    type whose nodes cannot make its layout: its start was refused each pass and it
    waited for ever, live. It runs across the types instead, alone in the cluster."""
    cluster, state = _one_node_per_type()
    assert wider_than_any_type(state).tolist() == [True]
    assert type_holds(state).tolist() == [[False, False]]
    policy = make_policy(name)
    plan = policy.schedule(state)
    gpus = plan.starts.get(0)
    assert gpus is not None, f"{name} never starts the gang"
    assert start_problem(plan, state, cluster, 0, gpus, policy.elastic, policy.resizes) is None


def test_type_holds_reads_the_layout_the_size_and_each_types_nodes() -> None:
    nodes = [Node("v0", "V100", 4), Node("v1", "V100", 2), Node("k0", "K80", 8)]
    cluster = Cluster("three", assign_racks(nodes, 16), rack_size=16)
    sizes, layouts = [2, 6, 8, 4, 8], [2, 2, 2, 0, 0]
    table = pd.DataFrame(
        {
            "job_id": [f"j{k}" for k in range(5)],
            "submit_time": [0.0] * 5,
            "num_gpus": sizes,
            "duration": [10.0] * 5,
        }
    )
    state = SchedulerState(cluster, JobTable(table))
    state.nodes_req[:] = layouts
    k80, v100 = cluster.gpu_type_names.index("K80"), cluster.gpu_type_names.index("V100")
    holds = type_holds(state)
    # 2 on 2 nodes: two V100 nodes (4 and 2 GPUs) do, one K80 node does not;
    # 6 on 2 nodes: the 2-GPU V100 node has too few; 8 on 2: none.
    assert holds[:3, v100].tolist() == [True, False, False]
    assert not holds[:3, k80].any()
    # no layout: only the pool's size counts (6 V100s, 8 K80s)
    assert holds[3].tolist() == [True, True] and holds[4, [v100, k80]].tolist() == [False, True]


def test_neither_gavels_lp_nor_themis_auction_gives_such_a_gang_a_type() -> None:
    """What the gang would be given on a type it cannot use is taken from the jobs
    that can: Gavel's allocation has nothing for it, Themis' auction no win."""
    _, state = _one_node_per_type()
    jobs = np.array([0])
    allocation = make_policy("gavel-max-min-fairness").allocate(state, jobs)  # type: ignore[attr-defined]
    assert not np.asarray(allocation)[0].any()
    themis = make_policy("themis")
    assert themis.auction(state, [0], state.cluster.type_gpus.copy()) == {}  # type: ignore[attr-defined]
