"""AlloX's matching against brute force on tiny instances."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.optimize.matching import min_total_completion, total_completion


def brute_force(times: np.ndarray) -> float:
    """Try every assignment of jobs to machines; each machine runs its jobs
    shortest first (optimal for one machine)."""
    n, m = times.shape
    best = np.inf
    for assign in itertools.product(range(m), repeat=n):
        seqs = [
            sorted((j for j in range(n) if assign[j] == k), key=lambda j: times[j, k])
            for k in range(m)
        ]
        best = min(best, total_completion(times, seqs))
    return best


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 3), st.integers(0, 100_000))
def test_matching_is_optimal_on_tiny_instances(n: int, m: int, seed: int) -> None:
    times = np.random.default_rng(seed).uniform(1, 20, size=(n, m)).round(1)
    seqs = min_total_completion(times)
    assert sorted(j for s in seqs for j in s) == list(range(n))
    assert np.isclose(total_completion(times, seqs), brute_force(times))


def test_a_job_never_goes_where_it_cannot_run() -> None:
    times = np.array([[1.0, np.inf], [2.0, 3.0], [5.0, 1.0]])
    seqs = min_total_completion(times)
    assert 0 in seqs[0]
    # known optimum: job 0 then job 1 on machine 0 (1 + 3), job 2 on machine 1 (1): 5
    assert total_completion(times, seqs) == 5.0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 3), st.integers(0, 100_000))
def test_uniform_machines_are_solved_by_sorting_and_stay_optimal(n: int, m: int, seed: int) -> None:
    """Times proportional to one vector take the sorting path: the same optimum
    as brute force, with ties (equal jobs) run in input order."""
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 6, size=n).astype(float)  # small integers: ties happen
    rates = np.concatenate(([1.0], rng.choice([0.5, 1.0, 2.0, 3.0], size=m - 1)))
    times = size[:, None] * rates[None, :]
    seqs = min_total_completion(times)
    assert sorted(j for s in seqs for j in s) == list(range(n))
    assert np.isclose(total_completion(times, seqs), brute_force(times))
    for seq in seqs:
        for a, b in itertools.pairwise(seq):
            assert size[a] < size[b] or (size[a] == size[b] and a < b)


def test_ten_thousand_jobs_on_one_machine_are_shortest_first() -> None:
    times = np.random.default_rng(1).uniform(1, 100, size=(10_000, 1))
    (seq,) = min_total_completion(times)
    assert seq == np.argsort(times[:, 0], kind="stable").tolist()
