"""POP (:mod:`corral.optimize.pop`): Gavel's LPs split into parts, each with its share
of every GPU type. The split covers every job once, the parts' allocation keeps
every constraint of the whole problem, and on a granular problem it loses little
of the full LP's objective (``benchmarks/pop_quality.py`` measures how much at
cluster scale)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import CorralError
from corral.model.cluster_specs import load_cluster
from corral.model.state import SchedulerState
from corral.optimize.gavel_lp import AllocationProblem, _max_min_norm, max_min_fairness
from corral.optimize.pop import JOBS_PER_PART, keep_parts, parts_for, solve_parts, split
from corral.policies import make_policy
from corral.policies.gavel import GavelPolicy
from corral.traces.loading import load_trace


@given(
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=0, max_size=60),
    parts=st.integers(1, 9),
    how=st.sampled_from(["balanced", "random"]),
)
@settings(max_examples=60, deadline=None)
def test_a_split_puts_every_job_in_one_part(gpus: list[int], parts: int, how: str) -> None:
    g = np.array(gpus, dtype=np.int64)
    groups = split(g, np.ones(len(g)), parts, how, seed=3)
    together = np.sort(np.concatenate(groups)) if groups else np.array([])
    assert together.tolist() == list(range(len(g)))
    if len(g) >= parts > 1:
        sizes = [len(x) for x in groups]
        assert max(sizes) - min(sizes) <= 1
        if how == "balanced":  # each part's demand within one largest gang of another's
            demand = [int(g[x].sum()) for x in groups]
            assert max(demand) - min(demand) <= 2 * max(gpus)


def test_a_split_is_the_same_for_the_same_seed() -> None:
    g = np.array([1, 2, 4, 8] * 10)
    first = split(g, np.ones(40), 4, "random", seed=1)
    again, other = split(g, np.ones(40), 4, "random", 1), split(g, np.ones(40), 4, "random", 2)
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    assert not all((a == b).all() for a, b in zip(first, other, strict=True))
    with pytest.raises(ValueError, match="balanced"):
        split(g, np.ones(40), 4, "sorted")


def test_the_parts_are_chosen_from_the_size() -> None:
    cap = np.array([334.0, 334.0, 334.0])
    assert parts_for(JOBS_PER_PART, cap, 8, None) == 1  # (no change at the papers' sizes)
    assert parts_for(JOBS_PER_PART + 1, cap, 8, None) == 2
    assert parts_for(10_000, cap, 8, None) == 16
    assert parts_for(10_000, cap, 8, 1) == 1  # turned off
    assert parts_for(10_000, np.array([36.0, 36.0, 36.0]), 8, None) == 4  # a gang fits a part
    assert parts_for(3, cap, 1, 8) == 3  # never more parts than jobs


def granular(n: int, seed: int = 0) -> AllocationProblem:
    rng = np.random.default_rng(seed)
    return AllocationProblem(
        throughput=rng.uniform(0.2, 3.0, (n, 3)),
        gpus=rng.choice([1, 2, 4], n, p=[0.7, 0.2, 0.1]),
        capacity=np.array([60.0, 60.0, 60.0]),
        weights=rng.choice([1.0, 2.0], n),
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_the_parts_keep_every_constraint_and_most_of_the_level(threads: int) -> None:
    p, parts = granular(400), 4
    groups = split(p.gpus, p.weights, parts)

    def one(rows: np.ndarray) -> np.ndarray:
        sub = AllocationProblem(p.throughput[rows], p.gpus[rows], p.capacity / parts,
                                p.weights[rows])  # fmt: skip
        return max_min_fairness(sub)

    x = np.zeros((p.n, p.k))
    for rows, part in zip(groups, solve_parts(groups, one, threads), strict=True):
        x[rows] = part
    assert (x >= -1e-9).all() and (x.sum(axis=1) <= 1 + 1e-6).all()
    assert ((p.gpus[:, None] * x).sum(axis=0) <= p.capacity + 1e-6).all()
    level = ((p.throughput * x).sum(axis=1) / _max_min_norm(p)).min()
    full = max_min_fairness(p)
    best = ((p.throughput * full).sum(axis=1) / _max_min_norm(p)).min()
    assert 0.9 * best <= level <= best * (1 + 1e-6)


def typed_state(jobs: int, gpus: int = 120) -> SchedulerState:
    third = gpus // 3
    where = load_cluster(f"gavel:{third}:{third}:{third}")
    table = load_trace(f"gavel-synthetic:jobs={jobs},rate=3600,multi=1,seed=0", where.total_gpus)
    state = SchedulerState(where, table)
    state.now = float(table.df["submit_time"].max())
    for i in range(len(table)):
        state.arrive(i)
    return state


@pytest.mark.parametrize(
    "name",
    [
        "gavel-max-min-fairness",
        "gavel-finish-time-fairness",
        "gavel-min-makespan",
        "gavel-max-min-fairness-packed",
    ],
)
def test_every_gavel_lp_policy_plans_with_pop(name: str) -> None:
    state = typed_state(120)
    policy = make_policy(name, pop=3)
    assert isinstance(policy, GavelPolicy)
    active = np.arange(120)
    policy._solve(state, active)
    assert policy.pop_parts == 3
    covered = sorted(j for combo in policy._combos for j in combo if len(combo) == 1)
    assert covered == list(range(120))
    types = state.cluster.type_gpus
    used = np.zeros(len(types))
    for combo, share in zip(policy._combos, policy._x, strict=True):
        used += state.gpus[combo[0]] * share
    assert (used <= types + 1e-6).all()
    plan = make_policy(name, pop=3).schedule(state)  # a whole pass: starts within the cluster
    held = [g for i, gpus in plan.starts.items() if i not in plan.packs for g in gpus]
    assert plan.starts and len(held) == len(set(held))


def test_finish_time_fairness_keeps_each_jobs_account_across_parts() -> None:
    state = typed_state(60)
    policy = make_policy("gavel-finish-time-fairness", pop=3)
    policy._solve(state, np.arange(60))
    assert sorted(policy._last_remaining) == list(range(60))
    policy._solve(state, np.arange(30))  # jobs gone are forgotten
    assert sorted(policy._isolated_so_far) == list(range(30))


def test_pop_is_refused_below_one_part() -> None:
    with pytest.raises(CorralError, match="option 'pop' must be a whole number >= 1"):
        make_policy("gavel-max-min-fairness", pop=0)
    with pytest.raises(CorralError, match="option 'pop_split' must be one of balanced, random"):
        make_policy("gavel-max-min-fairness", pop_split="sorted")


def test_a_kept_split_keeps_each_job_in_its_part_and_deals_new_ones_to_the_lightest() -> None:
    part_of = {0: 0, 1: 0, 2: 1, 3: 1, 4: 2}
    jobs = np.array([0, 2, 3, 4, 7, 8])  # 1 ended; 7 and 8 arrived
    load = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.5])
    groups = keep_parts(part_of, jobs, load, 3)
    assert groups is not None
    parts = {int(j): k for k, g in enumerate(groups) for j in jobs[g]}
    assert {j: parts[j] for j in (0, 2, 3, 4)} == {0: 0, 2: 1, 3: 1, 4: 2}
    assert parts[8] == 0 and parts[7] == 2  # the heaviest first, each to the lightest
    # a split that can no longer be kept even is dealt afresh
    assert keep_parts(part_of, jobs, load, 4) is None  # another number of parts
    assert keep_parts({0: 0, 1: 1}, np.arange(8), np.ones(8), 2) is not None
    assert keep_parts({j: 0 for j in range(8)}, np.arange(9), np.ones(9), 2) is None
    assert keep_parts({}, jobs, load, 3) is None


def test_a_pass_after_an_arrival_solves_only_the_part_it_joined() -> None:
    """Max-min fairness' allocation depends on the jobs' problem alone: a part
    whose jobs are unchanged keeps its allocation, the part a new job joins is
    solved again, and the result is the one a solve of that same split gives.
    Finish-time fairness' depends on time: every part is solved again."""
    state = typed_state(120)
    policy = make_policy("gavel-max-min-fairness", pop=4)
    assert isinstance(policy, GavelPolicy)
    policy._solve(state, np.arange(110))
    assert policy.pop_resolved == 4
    policy._solve(state, np.arange(110))
    assert policy.pop_resolved == 0
    policy._solve(state, np.arange(111))
    assert policy.pop_resolved == 1
    kept = dict(zip(policy._combos, policy._x.tolist(), strict=True))
    fresh = make_policy("gavel-max-min-fairness", pop=4)
    assert isinstance(fresh, GavelPolicy)
    fresh._part_of = dict(policy._part_of)  # the same split, every part solved anew
    fresh._solved_parts = {}
    fresh._solve(state, np.arange(111))
    assert fresh.pop_resolved == 4
    assert dict(zip(fresh._combos, fresh._x.tolist(), strict=True)) == kept
    timed = make_policy("gavel-finish-time-fairness", pop=4)
    assert isinstance(timed, GavelPolicy)
    timed._solve(state, np.arange(110))
    timed._solve(state, np.arange(110))
    assert timed.pop_resolved == 4
