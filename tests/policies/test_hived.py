"""HiveD: cell levels, buddy allocation, sharing safety, the sharing anomaly,
opportunistic jobs and their eviction, bad hardware."""

from __future__ import annotations

from collections import Counter

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from corral.errors import CorralError
from corral.model.cluster import Cluster, Node, assign_racks
from corral.model.jobs import JobTable
from corral.placement.cells import BuddyAllocator, CellTree, carve, level_sizes
from corral.policies import make_policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig

from ..conftest import uniform
from .test_philly import vc_jobs


def simulate(rows, cluster, policy="hived", until=float("inf"), **options):  # type: ignore[no-untyped-def]
    config = SimConfig(switch_cost=0.0, check_invariants=until == float("inf"), max_time=until)
    return Simulator(vc_jobs(rows), cluster, make_policy(policy, **options), config).run()


def test_levels_come_from_the_node_size_or_the_given_sizes() -> None:
    assert level_sizes(8) == [1, 2, 4, 8]
    assert level_sizes(2) == [1, 2]
    assert level_sizes(6) == [1, 2, 6]
    assert level_sizes(1) == [1]
    assert level_sizes(8, [4, 8]) == [1, 4, 8]
    assert level_sizes(8, [3, 4]) == [1, 4, 8]  # 3 does not divide 8: dropped


def test_buddy_allocation_splits_and_merges_back() -> None:
    tree = CellTree(uniform(2, 8))
    buddy = BuddyAllocator(tree)
    assert buddy.free_cells(0, 0) == 16
    a = buddy.bind(0, 0)  # one GPU: splits a node down to a GPU
    assert tree.size_list[a] == 1
    # the split left one free cell per level below the node in that node
    assert [len(buddy.free[0][lv]) for lv in range(4)] == [1, 1, 1, 1]
    b = buddy.bind(0, 2)  # a 4-GPU cell: the split node's free half, not the other node
    assert tree.node_of(b) == tree.node_of(a)
    buddy.release(a)
    buddy.release(b)
    # both nodes sit side by side in one rack: they merge up into the rack cell
    assert tree.chains[0].sizes == (1, 2, 4, 8, 16)
    assert [len(level) for level in buddy.free[0]] == [0, 0, 0, 0, 1]
    flat = BuddyAllocator(CellTree(uniform(2, 8), rack_nodes=0))
    assert [len(level) for level in flat.free[0]] == [0, 0, 0, 2]


def mixed_cluster() -> Cluster:
    nodes = [Node(f"a{k}", "V100", 8) for k in range(3)] + [
        Node(f"b{k}", "K80", 2) for k in range(4)
    ]
    return Cluster("mixed", assign_racks(nodes, 4), rack_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shares=st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=4),
    ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20), st.booleans()), max_size=80),
)
def test_sharing_safety_a_vc_always_obtains_the_cells_it_owns(shares, ops) -> None:
    """Whatever the other VCs bind and release, a VC asking for a cell of a kind
    it owns and has not bound gets one (HiveD's safety, with carved quotas)."""
    tree = CellTree(mixed_cluster())
    total = sum(shares) or 1
    quotas = {v: s * tree.cluster.total_gpus // max(total, 1) for v, s in enumerate(shares)}
    cells = carve(tree, quotas)
    assert (
        sum(
            tree.chains[c].sizes[lv] * n for owned in cells.values() for (c, lv), n in owned.items()
        )
        <= tree.cluster.total_gpus
    )
    buddy = BuddyAllocator(tree)
    bound: dict[int, list[int]] = {v: [] for v in cells}
    for v, pick, release in ops:
        if v not in cells:
            continue
        if release and bound[v]:
            buddy.release(bound[v].pop(pick % len(bound[v])))
            continue
        held = Counter((tree.chain_list[c], tree.level_list[c]) for c in bound[v])
        spare = [key for key, n in cells[v].items() if held[key] < n]
        if not spare:
            continue
        chain, level = spare[pick % len(spare)]
        cell = buddy.bind(chain, level)
        assert cell >= 0, f"VC {v} owns a {(chain, level)} cell it cannot obtain"
        bound[v].append(cell)
    every = [c for cs in bound.values() for c in cs]
    gpus = [g for c in every for g in tree.gpus(c)]
    assert len(gpus) == len(set(gpus))  # no GPU in two bound cells


def anomaly_rows() -> list[tuple[float, int, float, str]]:
    """VC a fills the cluster with 1-GPU jobs (half on its own quota, half
    borrowed); every other one ends at 100 s, leaving each node half free; then
    VC b, whose quota is two whole nodes, asks for a node-sized gang."""
    rows = [(0.0, 1, 100.0 if k % 2 == 0 else 10_000.0, "a") for k in range(32)]
    rows.append((200.0, 8, 1000.0, "b"))
    return rows


def test_the_sharing_anomaly_under_quotas_and_its_fix_under_hived() -> None:
    cluster = uniform(4, 8)
    quotas = "a=16,b=16"
    rows = anomaly_rows()
    gang = len(rows) - 1
    # Philly's quota scheduler: b is within its quota and 16 GPUs are free, yet
    # no node has 8 free (a's jobs within its quota are not reclaimable), so the
    # gang waits until its locality relaxes
    philly = simulate(rows, cluster, "philly", quotas=quotas).state
    assert philly.first_start[gang] - philly.submit[gang] >= 300.0
    # HiveD: b's node cells are obtainable: the gang starts at once, on a whole
    # node, evicting a's opportunistic jobs from it
    hived = simulate(rows, cluster, quotas=quotas).state
    assert hived.first_start[gang] == hived.submit[gang] == 200.0
    assert hived.preemptions[:gang].sum() == 4  # the 4 long opportunistic jobs on that node
    assert hived.finish_time[gang] == 1200.0
    early = simulate(rows, cluster, quotas=quotas, until=300.0).state
    assert len({cluster.gpu_node_list[g] for g in early.alloc[gang] or ()}) == 1
    # and a's guaranteed jobs were never preempted: 16 of them packed on 2 nodes
    assert (hived.preemptions[:gang] <= 1).all()


def test_without_opportunistic_jobs_a_vc_only_uses_its_own_cells() -> None:
    cluster = uniform(4, 8)
    rows = anomaly_rows()
    s = simulate(rows, cluster, quotas="a=16,b=16", opportunistic=False).state
    starts = s.first_start[:32]
    assert (starts == 0.0).sum() == 16  # a's quota; the rest wait for a's own cells
    assert s.preemptions.sum() == 0
    assert s.first_start[32] == 200.0


def test_a_gang_wider_than_a_node_takes_whole_node_cells() -> None:
    cluster = uniform(4, 8)
    rows = [(0.0, 1, 50.0, "a"), (0.0, 16, 100.0, "b"), (10.0, 12, 100.0, "a")]
    s = simulate(rows, cluster, quotas="a=24,b=8", opportunistic=False, until=20.0).state
    # b owns one node cell: its 16-GPU gang cannot be guaranteed and waits
    assert np.isnan(s.first_start[1])
    # a owns 3 node cells; its 1-GPU job binds one, the 12-GPU gang binds the
    # other two (one whole, one for the remaining 4 GPUs: a node cell, as a
    # owns no 4-GPU cell)
    held = Counter(cluster.gpu_node_list[g] for g in s.alloc[2] or ())
    assert sorted(held.values()) == [4, 8]
    assert cluster.gpu_node_list[(s.alloc[0] or ())[0]] not in held


def test_racks_are_a_cell_level_cut_from_runs_of_a_chains_nodes() -> None:
    # racks of 3 nodes, then one of 2: rack cells of 3 nodes; the last two stay node cells
    nodes = [Node(f"n{k}", "V100", 4) for k in range(8)]
    tree = CellTree(Cluster("racks", assign_racks(nodes, 3), rack_size=3))
    chain = tree.chains[0]
    assert chain.sizes == (1, 2, 4, 12) and chain.rack_nodes == 3 and chain.node_level == 2
    tops = [c for c in range(len(tree)) if tree.parent_list[c] < 0]
    assert sorted(tree.size_list[c] for c in tops) == [4, 4, 12, 12]
    buddy = BuddyAllocator(tree)
    assert buddy.free_cells(0, chain.node_level) == 8
    assert [len(level) for level in buddy.free[0]] == [0, 0, 2, 2]
    # a node cell comes from a standalone node before a rack is split
    assert tree.parent_list[buddy.bind(0, chain.node_level)] < 0
    assert CellTree(tree.cluster, rack_nodes=2).chains[0].sizes == (1, 2, 4, 8)
    assert CellTree(tree.cluster, rack_nodes=0).chains[0].sizes == (1, 2, 4)
    with pytest.raises(CorralError, match="rack_nodes"):
        make_policy("hived", rack_nodes="1")


def test_a_vc_owning_a_rack_cell_runs_its_gang_in_one_rack() -> None:
    """Without a rack level, a VC's two node cells are bound wherever buddy
    allocation finds free nodes; a rack cell keeps the VC's gang in one rack."""
    cluster = uniform(6, 8, rack_size=2)
    rows = [
        (0.0, 8, 1000.0, "b"),
        (0.0, 8, 10.0, "b"),  # ends at 10: frees a node beside b's first job
        (0.0, 8, 1000.0, "b"),
        (20.0, 16, 100.0, "a"),
    ]

    def racks_of_gang(**options):  # type: ignore[no-untyped-def]
        s = simulate(rows, cluster, quotas="a=16,b=32", until=30.0, **options).state
        assert s.first_start[3] == 20.0
        return {cluster.gpu_rack[g] for g in s.alloc[3] or ()}

    assert len(racks_of_gang(rack_nodes=0)) == 2
    assert len(racks_of_gang()) == 1


def test_a_higher_priority_job_preempts_lower_ones_of_its_own_vc_only() -> None:
    """HiveD's priorities inside a VC: a waiting job stops its VC's lower-priority
    guaranteed jobs (the fewest, lowest first) when that makes room in a cell
    the VC holds; it never touches another VC's cells or a job of equal rank."""
    rows = [
        # (submit, gpus, duration, vc, priority)
        (0.0, 4, 1000.0, "a", 0),  # 0: a's node cell, half
        (0.0, 2, 1000.0, "a", 1),  # 1: same cell, a quarter
        (0.0, 2, 1000.0, "a", 0),  # 2: the last quarter: a's cell is full
        (0.0, 8, 1000.0, "b", 0),  # 3: b's node cell, full
        (10.0, 2, 100.0, "a", 0),  # 4: equal to the lowest: waits
        (20.0, 4, 100.0, "a", 2),  # 5: stops job 0, which alone frees a 4-GPU half
        (30.0, 8, 100.0, "b", 5),  # 6: b's only job is lower: stops 3
    ]
    df = vc_jobs([r[:4] for r in rows]).df
    df["priority"] = [r[4] for r in rows]
    config = SimConfig(switch_cost=0.0, check_invariants=False, max_time=40.0)
    policy = make_policy("hived", quotas="a=8,b=8", opportunistic=False)
    s = Simulator(JobTable(df), uniform(2, 8), policy, config).run().state
    assert np.isnan(s.first_start[4])
    # job 0 (priority 0, 4 GPUs) alone makes room; job 2 (also 0, but 2 GPUs)
    # would need job 1 (priority 1) to go too
    assert s.first_start[5] == 20.0
    assert s.preemptions.tolist() == [1, 0, 0, 1, 0, 0, 0]
    assert s.first_start[6] == 30.0
    assert {cluster_node(s, 5)} == {cluster_node(s, 1)}
    # without priorities nothing is preempted
    df["priority"] = 0
    s = (
        Simulator(
            JobTable(df),
            uniform(2, 8),
            make_policy("hived", quotas="a=8,b=8", opportunistic=False),
            config,
        )
        .run()
        .state
    )
    assert s.preemptions.sum() == 0 and np.isnan(s.first_start[5])


def cluster_node(state, job):  # type: ignore[no-untyped-def]
    return {state.cluster.gpu_node_list[g] for g in state.alloc[job] or ()}.pop()


def test_bad_nodes_are_never_bound_and_cells_move_to_healthy_ones() -> None:
    cluster = uniform(4, 8)
    rows = [(0.0, 8, 100.0, "a"), (0.0, 8, 100.0, "a"), (0.0, 4, 100.0, "b")]
    result = simulate(rows, cluster, quotas="a=16,b=8", bad_nodes="n0", until=50.0)
    s = result.state
    # three healthy nodes for 2 + 1 node cells: everything starts at once, off
    # n0, each job in its VC's cells (the rack cell holding n0 is split past it)
    assert (s.first_start == 0.0).all()
    assert result.policy.kind.tolist() == [1, 1, 1]  # guaranteed
    for k in range(3):
        assert all(cluster.gpu_node_list[g] != 0 for g in s.alloc[k] or ())
    # with two nodes bad, b's node cell cannot be bound: b waits, a does not
    s = simulate(rows, cluster, quotas="a=16,b=8", bad_nodes="n0,n1", until=50.0).state
    assert s.first_start[0] == s.first_start[1] == 0.0
    assert np.isnan(s.first_start[2])
    with pytest.raises(CorralError, match="no node 'zz'"):
        simulate(rows, cluster, quotas="a=16,b=8", bad_nodes="zz")


def test_failed_hardware_dooms_cells_of_the_vc_owning_the_most_not_the_last_to_ask() -> None:
    """HiveD's doomed cells: a node fails (live: drained) and leaves three
    healthy nodes for four node cells. The loss is decided then, for the VC
    owning the most such cells (a tie here: the VC listed first, a); a, asking
    first, still binds only one cell and runs its second job opportunistically,
    and b keeps both of its cells, evicting it. Without dooming, a would have
    bound two and b would find no healthy node for its second cell."""
    from corral.model.state import SchedulerState

    cluster = uniform(4, 8)
    rows = [(0.0, 8, 100.0, "a"), (0.0, 8, 100.0, "a"), (0.0, 8, 100.0, "b"), (0.0, 8, 100.0, "b")]
    state = SchedulerState(cluster, vc_jobs(rows))
    state.known_in_advance = False  # as live: the service withholds a drained node's GPUs
    state.free.take(list(range(24, 32)))
    policy = make_policy("hived", quotas="a=16,b=16")

    def run_pass():  # type: ignore[no-untyped-def]
        plan = policy.schedule(state)
        for i in plan.stops:
            state.preempt(i)
        for i, gpus in plan.starts.items():
            state.start(i, tuple(gpus), 1.0, 0.0)
        return plan

    state.arrive(0)
    state.arrive(1)
    plan = run_pass()
    assert sorted(plan.starts) == [0, 1]
    assert dict(policy.doomed[policy.vcs.names.index("a")]) == {(0, 3): 1}
    assert policy.kind[0] == 1 and policy.kind[1] == 2  # guaranteed, opportunistic
    state.arrive(2)
    state.arrive(3)
    plan = run_pass()
    assert plan.stops == [1] and sorted(plan.starts) == [2, 3]
    assert not run_pass().starts  # nothing idle, and a's second cell is doomed
    assert policy.why[1] == "CellsUnavailable"
    # the node comes back: nothing is doomed any more, and a's job finds its cell
    state.free.release(list(range(24, 32)))
    plan = run_pass()
    assert not any(policy.doomed.values()) and list(plan.starts) == [1]


def test_options_are_checked() -> None:
    with pytest.raises(CorralError, match="opportunistic"):
        make_policy("hived", opportunistic="maybe")
    with pytest.raises(CorralError, match="cell_sizes"):
        make_policy("hived", cell_sizes="a,b")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(
            st.floats(0, 2000, allow_nan=False),
            st.sampled_from([1, 1, 2, 3, 4, 8, 16]),
            st.floats(10, 3000, allow_nan=False),
            st.sampled_from("abc"),
        ),
        min_size=1,
        max_size=30,
    ),
    tiers=st.lists(st.integers(0, 2), min_size=30, max_size=30) | st.just([0] * 30),
)
def test_each_vc_runs_exactly_as_on_its_private_cluster(rows, tiers) -> None:
    """Sharing safety, end to end: without opportunistic jobs or locality
    slowdowns, every job of every VC starts when it would on a private cluster
    made of its VC's cells (with priorities too: a VC's preemptions choose
    among its virtual cells, as on its private cluster)."""
    from corral.model.state import SchedulerState
    from corral.perf.locality import LocalityModel
    from corral.perf.speeds import SpeedModel

    cluster = mixed_cluster()
    quotas = {"a": 16, "b": 10, "c": 6}
    flat = SpeedModel(locality=LocalityModel(1.0, 1.0))
    jobs = vc_jobs(rows)
    jobs.df["priority"] = tiers[: len(rows)]
    carver = make_policy("hived", quotas=quotas)
    carver.prepare(SchedulerState(cluster, jobs))
    config = SimConfig(switch_cost=0.0, speeds=flat)
    policy = make_policy("hived", quotas=quotas, opportunistic=False)
    shared = Simulator(jobs, cluster, policy, config).run().state
    for v, name in enumerate(carver.vcs.names):
        private_cluster = carver.private_cluster(v)
        mine = jobs.df["vc"] == name
        if private_cluster is None or not mine.any():
            continue
        table = JobTable(jobs.df[mine].copy())
        offset = float(jobs.df["submit_time"][mine].iloc[0])
        options = {"quotas": {name: private_cluster.total_gpus}, "opportunistic": False}
        alone = Simulator(table, private_cluster, make_policy("hived", **options), config).run()
        expect = alone.state.first_start + offset
        got = shared.first_start[mine.to_numpy()]
        assert np.allclose(expect, got, equal_nan=True), (name, expect, got)


def test_a_vc_breaks_ties_by_virtual_cell_as_on_its_private_cluster() -> None:
    """VC a's first cell lands on node 1 and its second on node 0 (b held node
    0 for a while). When a job fits both equally, it goes to a's first cell,
    as it would on a's private cluster, not to the lower-numbered node; which
    cell it fills decides when a's 2-GPU job can start."""
    rows = [
        (0.0, 2, 50.0, "b"),  # b's cell: node 0, for 50 s
        (0.0, 1, 500.0, "a"),  # a's first cell: node 1
        (0.0, 1, 2000.0, "a"),  # ... which it fills
        (60.0, 1, 1000.0, "a"),  # a's second cell: node 0, free again
        (70.0, 1, 3000.0, "a"),
        (1100.0, 1, 5000.0, "a"),  # one GPU free in each of a's cells: the first
        (1200.0, 2, 100.0, "a"),  # needs a whole cell: the second empties at 3070
    ]
    s = simulate(rows, uniform(4, 2), quotas="a=4,b=4", opportunistic=False).state
    assert s.first_start[6] == 3070.0
