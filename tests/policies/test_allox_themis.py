"""AlloX and Themis on small heterogeneous clusters."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import CorralError
from corral.model.cluster import Cluster, Node, assign_racks
from corral.policies import make_policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig

from .test_gavel import FAST_ON_V100, FLAT, sim, typed


def one_each(*types: str) -> Cluster:
    return Cluster("het", assign_racks([Node(f"n{k}", t, 1) for k, t in enumerate(types)], 16))


def test_allox_matches_the_brute_force_optimum_of_jobs_present_at_once() -> None:
    rows = [
        (0, 1, 3_000, FAST_ON_V100),
        (0, 1, 2_000, FLAT),
        (0, 1, 1_000, FAST_ON_V100),
        (0, 1, 4_000, FLAT),
    ]
    jobs = typed(rows)
    where = one_each("V100", "K80")
    result = sim(jobs, where, "allox")
    s = result.state
    got = float((s.finish_time - s.submit).sum())
    # brute force: every split of the jobs between the two GPUs, each GPU
    # running its jobs shortest first (optimal on one machine)
    times = np.array([[s.total_steps[j] / s.type_speed[j, t] for t in range(2)] for j in range(4)])
    names = where.gpu_type_names
    best = np.inf
    for assign in itertools.product(range(2), repeat=4):
        total = 0.0
        for t in range(2):
            clock = 0.0
            for j in sorted((j for j in range(4) if assign[j] == t), key=lambda j: times[j, t]):
                clock += times[j, t]
                total += clock
        best = min(best, total)
    assert got == pytest.approx(best, rel=1e-9), names


def test_allox_alpha_narrows_the_choice_to_the_longest_waiting() -> None:
    with pytest.raises(Exception, match="alpha"):
        make_policy("allox", alpha=1.5)
    # a first job holds the GPU while a long and then two short jobs arrive
    rows = [(0, 1, 1_000, FLAT), (1, 1, 9_000, FLAT), (2, 1, 100, FLAT), (3, 1, 100, FLAT)]
    where = one_each("V100")
    fair = sim(typed(rows), where, "allox", alpha=1.0)
    fast = sim(typed(rows), where, "allox")
    # AlloX alone runs the two short jobs first; alpha = 1 keeps arrival order
    assert fast.state.first_start[1] > max(fast.state.first_start[2:])
    assert fair.state.first_start[1] == pytest.approx(1_000)


def test_themis_gives_the_lease_to_the_worst_finish_time_fairness() -> None:
    # one GPU; a long job runs; a short job arrives: with f = 0 every job bids,
    # and the one with the worst rho (the short waiting job) wins the next lease
    rows = [(0, 1, 10_000, FLAT), (100, 1, 500, FLAT)]
    result = sim(typed(rows), one_each("V100"), "themis", lease=600, fraction=0.0)
    s = result.state
    assert s.first_start[1] == pytest.approx(600)
    assert s.finish_time[1] < s.finish_time[0]


def test_themis_partial_allocation_shares_are_fractions_and_leftovers_are_used() -> None:
    from corral.traces.gavel_synthetic import GavelWorkload, generate_gavel

    jobs = generate_gavel(GavelWorkload(jobs=30, rate=20, seed=5))
    where = Cluster(
        "het",
        assign_racks([Node(f"n{k}", t, 4) for k, t in enumerate(["V100", "P100", "K80"] * 2)], 16),
    )
    policy = make_policy("themis")
    result = Simulator(jobs, where, policy, SimConfig(check_invariants=True)).run()
    assert (result.state.status == 3).all()
    assert policy.auctions > 0  # type: ignore[attr-defined]
    # work conservation: some GPU is busy whenever a job waits (sampled after each pass)
    tl = result.timeline
    waiting_idle = [b == 0 and p > 0 for b, p in zip(tl.busy_gpus, tl.pending, strict=True)]
    assert not any(waiting_idle)


def _auction_by_full_reruns(policy, state, bidders, room):  # type: ignore[no-untyped-def]
    """Themis' auction as the paper states it: the allocation found again
    without each winner, and the others' welfare summed both ways."""
    import math

    bids = policy._bids(state, bidders)
    best = policy._welfare_allocation(state, bids, bidders, room)

    def welfare(alloc, who):  # type: ignore[no-untyped-def]
        return sum(policy._log_value(bids, i, alloc.get(i)) for i in who)

    out = {}
    for j, t in best.items():
        others = [i for i in bidders if i != j]
        alone = policy._welfare_allocation(state, bids, others, room)
        out[j] = (t, math.exp(min(0.0, welfare(best, others) - welfare(alone, others))))
    return out


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 1, 1, 2, 4, 8]), min_size=1, max_size=60),
    types=st.sampled_from([("V100",), ("V100", "K80"), ("V100", "P100", "K80")]),
    per_node=st.sampled_from([1, 2, 4, 8]),
    seed=st.integers(0, 1_000),
)
def test_themis_auction_equals_the_full_reruns(sizes, types, per_node, seed) -> None:  # type: ignore[no-untyped-def]
    """The auction's replay of only the offers a winner's absence changes gives
    exactly the shares of re-running the allocation without each winner."""
    from corral.model.state import SchedulerState
    from corral.traces.gavel_synthetic import GavelWorkload, generate_gavel

    rng = np.random.default_rng(seed)
    table = generate_gavel(GavelWorkload(jobs=len(sizes), rate=1000, seed=seed))
    table.df["num_gpus"] = sizes
    table.df["submit_time"] = np.sort(rng.uniform(0, 100, len(sizes)))
    nodes = [Node(f"n{k}", t, per_node) for k, t in enumerate(types * 2)]
    where = Cluster("het", assign_racks(nodes, 16))
    state = SchedulerState(where, table)
    state.now = 200.0
    for i in range(len(sizes)):
        state.arrive(i)
    policy = make_policy("themis")
    bidders = [int(j) for j in rng.permutation(len(sizes))]
    room = where.type_gpus.copy()
    fast = policy.auction(state, bidders, room)  # type: ignore[attr-defined]
    slow = _auction_by_full_reruns(policy, state, bidders, room)
    assert fast.keys() == slow.keys()
    for j in fast:
        assert fast[j][0] == slow[j][0]
        assert fast[j][1] == pytest.approx(slow[j][1], rel=1e-9, abs=1e-12)


def test_allox_matches_at_most_window_jobs_on_types_that_rank_jobs_differently() -> None:
    """Past ``window`` waiting jobs on a heterogeneous cluster, the shortest
    (on their fastest type) are matched and the rest follow shortest first:
    every job is still in the order, none twice."""
    from corral.model.state import SchedulerState
    from corral.traces.gavel_synthetic import GavelWorkload, generate_gavel

    table = generate_gavel(GavelWorkload(jobs=40, rate=1000, seed=3))
    nodes = [Node(f"n{k}", t, 8) for k, t in enumerate(["V100", "P100", "K80"])]
    where = Cluster("het", assign_racks(nodes, 16))
    state = SchedulerState(where, table)
    state.now = 100.0
    for i in range(len(table)):
        state.arrive(i)
    policy = make_policy("allox", window=5)
    jobs = state.pending_in_order()
    order = policy.plan_order(state, jobs)  # type: ignore[attr-defined]
    assert sorted(j for j, _ in order) == sorted(jobs.tolist())
    # a job's time on a type: its work at its speed there, the type's GPUs shared
    speed = state.type_speed[jobs]
    left = state.total_steps[jobs] - state.steps_done[jobs]
    share = state.gpus[jobs] / where.type_gpus[0]  # every type has 8 GPUs here
    best = {
        int(j): float(np.min(left[k] / speed[k][speed[k] > 0]) * share[k])
        for k, j in enumerate(jobs)
    }
    matched, rest = order[:5], order[5:]
    assert max(best[j] for j, _ in matched) <= min(best[j] for j, _ in rest)
    assert [best[j] for j, _ in rest] == sorted(best[j] for j, _ in rest)
    with pytest.raises(CorralError, match="'window' must be a whole number >= 1"):
        make_policy("allox", window=0)
