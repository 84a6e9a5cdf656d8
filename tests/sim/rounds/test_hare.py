"""Hare's round model: bound <= brute-force optimum <= Hare's schedule, and the baselines."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.optimize.hare_lp import relaxation
from corral.policies.rounds.listsched import _TypeHeaps
from corral.policies.rounds.planners import ROUND_PLANNERS, HarePlanner
from corral.policies.rounds.workload import RoundWorkload
from corral.sim.rounds.simulator import RoundSimulator


def workload(
    tau: list[list[float]],
    tasks: list[int],
    rounds: list[int],
    weight: list[float],
    gpu_type: list[int],
    submit: list[float] | None = None,
) -> RoundWorkload:
    n = len(tau)
    return RoundWorkload(
        job_ids=[f"j{k}" for k in range(n)],
        submit=np.array(submit or [0.0] * n),
        weight=np.array(weight, dtype=float),
        tasks=np.array(tasks),
        rounds=np.array(rounds),
        tau=np.array(tau, dtype=float),
        gpu_type=np.array(gpu_type),
        type_names=tuple(f"T{k}" for k in range(len(tau[0]))),
        reference_time=np.zeros(n),
    )


def brute_force(w: RoundWorkload) -> float:
    """Optimal total weighted completion (no switching cost, all jobs at 0).

    Tries every assignment of tasks to GPUs and every order on each GPU; each
    order is run semi-actively (a task starts as soon as its GPU is free and
    its previous round has ended). Some optimal schedule is semi-active, so
    this is the optimum.
    """
    tasks = [(j, r) for j in range(w.n) for r in range(w.rounds[j]) for _ in range(w.tasks[j])]
    gpus = len(w.gpu_type)
    best = np.inf
    for assign in itertools.product(range(gpus), repeat=len(tasks)):
        per_gpu = [[k for k in range(len(tasks)) if assign[k] == g] for g in range(gpus)]
        for orders in itertools.product(*(itertools.permutations(p) for p in per_gpu)):
            value = _evaluate(w, tasks, assign, orders)
            best = min(best, value)
    return best


def _evaluate(w, tasks, assign, orders) -> float:  # type: ignore[no-untyped-def]
    end = {k: 0.0 for k in range(len(tasks))}
    for _ in range(len(tasks) + 1):  # relax to the fixed point (longest paths)
        changed = False
        round_end: dict[tuple[int, int], float] = {}
        for k, (j, r) in enumerate(tasks):
            round_end[(j, r)] = max(round_end.get((j, r), 0.0), end[k])
        for g, order in enumerate(orders):
            free = 0.0
            for k in order:
                j, r = tasks[k]
                start = max(free, round_end.get((j, r - 1), 0.0) if r else 0.0)
                finish = start + w.tau[j, w.gpu_type[g]]
                if finish != end[k]:
                    end[k], changed = finish, True
                free = finish
        if not changed:
            break
    else:
        return np.inf  # cyclic waiting: not a schedule
    done = np.zeros(w.n)
    for k, (j, _) in enumerate(tasks):
        done[j] = max(done[j], end[k])
    return float(np.sum(w.weight * done))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_bound_below_optimum_below_hare(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3))
    shape = [(int(rng.integers(1, 3)), int(rng.integers(1, 3))) for _ in range(n)]
    while sum(g * r for g, r in shape) > 5:  # keep the brute force small
        shape = [(1, int(rng.integers(1, 3))) for _ in range(n)]
    base = rng.uniform(1, 10, size=n).round(1)
    slow = rng.uniform(1, 4, size=n).round(1)
    w = workload(
        tau=[[b, b * s] for b, s in zip(base, slow, strict=True)],
        tasks=[g for g, _ in shape],
        rounds=[r for _, r in shape],
        weight=rng.choice([1.0, 2.0, 4.0], size=n).tolist(),
        gpu_type=[0, 1],
    )
    bound = relaxation(
        w.submit, w.weight, w.tasks, w.rounds.astype(float), w.tau, w.capacity()
    ).bound
    optimum = brute_force(w)
    result = RoundSimulator(w, HarePlanner(), 0.0).run()
    result.check()
    hare = result.summary()["weighted_jct_s"]
    assert bound <= optimum + 1e-6
    assert optimum <= hare + 1e-6


def test_intra_job_parallelism_uses_both_types() -> None:
    # one job, 2 tasks per round, 3 rounds; a fast and a slow GPU: Hare runs
    # each round's tasks on both at once
    w = workload(tau=[[2.0, 3.0]], tasks=[2], rounds=[3], weight=[1.0], gpu_type=[0, 1])
    r = RoundSimulator(w, HarePlanner(), 0.0).run()
    r.check()
    assert r.finish[0] == pytest.approx(9.0)  # 3 rounds of max(2, 3)
    # Sched_Allox keeps a round on one type, but no type has 2 GPUs: a gang
    # wider than every type runs across types, in step
    allox = RoundSimulator(w, ROUND_PLANNERS["sched-allox"](), 0.0).run()
    allox.check()
    assert allox.finish[0] == pytest.approx(9.0)


def test_tasks_of_a_round_may_run_one_after_another_on_the_fast_type() -> None:
    # 2 tasks per round; V100 takes 1 s, K80 10 s: both tasks on the V100 one
    # after the other (2 s) beat spreading (10 s); Sched_Allox cannot (needs 2 GPUs
    # of one type at once), Hare can
    w = workload(tau=[[1.0, 10.0]], tasks=[2], rounds=[2], weight=[1.0], gpu_type=[0, 1])
    hare = RoundSimulator(w, HarePlanner(), 0.0).run()
    hare.check()
    assert hare.finish[0] == pytest.approx(4.0)
    allox = RoundSimulator(w, ROUND_PLANNERS["sched-allox"](), 0.0).run()
    assert allox.finish[0] == pytest.approx(20.0)


def test_switching_costs_are_charged_between_jobs() -> None:
    w = workload(tau=[[5.0], [5.0]], tasks=[1, 1], rounds=[2, 2], weight=[1.0, 1.0], gpu_type=[0])
    r = RoundSimulator(w, HarePlanner(), 0.5).run()
    r.check()
    # one GPU: job A's 2 rounds then B's (no switch inside a job); the first
    # task of each job pays the switch (the GPU starts empty)
    assert sorted(r.finish.tolist()) == pytest.approx([10.5, 21.0])
    assert r.summary()["switches"] == 2


def test_online_replanning_keeps_started_tasks() -> None:
    w = workload(
        tau=[[10.0], [1.0]],
        tasks=[1, 1],
        rounds=[3, 1],
        weight=[1.0, 1.0],
        gpu_type=[0],
        submit=[0.0, 5.0],
    )
    r = RoundSimulator(w, HarePlanner(), 0.0).run()
    r.check()
    # the short job arrives mid-round: it runs after the round in progress,
    # before the long job's remaining rounds
    assert r.finish[1] == pytest.approx(11.0)
    assert r.finish[0] == pytest.approx(31.0)
    assert r.plans == 2


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 7), st.floats(0, 100, allow_nan=False)), max_size=40),
    st.integers(0, 1),
)
def test_earliest_free_gpu_of_a_type_is_the_first_of_its_earliest(
    updates: list[tuple[int, float]], t: int
) -> None:
    """Peeking at a type's earliest-free GPU (stale entries dropped) answers as
    taking the type's earliest GPUs one by one does."""
    heaps = _TypeHeaps(np.zeros(8), np.array([0, 1] * 4), 2)
    for gpu, free in updates:
        heaps.set(gpu, free)
        assert heaps.top(t) == heaps.top(t, 2)[:1]
        assert heaps.top(t) == heaps.top(t)  # peeking changes nothing
        assert heaps.top(t, 4) == sorted(
            (g for g in range(8) if heaps.gpu_type[g] == t), key=lambda g: (heaps.free[g], g)
        )
