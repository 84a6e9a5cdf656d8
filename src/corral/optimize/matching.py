"""Minimum total completion time on unrelated machines, as a min-cost matching.

The classic reduction (Horn; Bruno, Coffman and Sethi) that AlloX builds on:
if job ``j`` is the ``k``-th last on machine ``m`` it adds ``k x p[j, m]`` to
the sum of completion times (it delays itself and the ``k - 1`` jobs after
it). Matching jobs to (machine, position-from-the-end) slots at that cost
with the Hungarian method (``scipy.optimize.linear_sum_assignment``) gives an
optimal non-preemptive schedule of jobs all present at time 0.
"""

from __future__ import annotations

import numpy as np

from corral.lazy import LazyModule

optimize = LazyModule("scipy.optimize")


def min_total_completion(times: np.ndarray) -> list[list[int]]:
    """Each machine's job sequence (first to run first) minimising the sum of
    completion times. ``times``: jobs x machines processing times (inf where a
    job cannot run on a machine)."""
    n, m = times.shape
    if n == 0:
        return [[] for _ in range(m)]
    positions = np.arange(1, n + 1, dtype=np.float64)
    finite = np.where(np.isfinite(times), times, 0.0)
    big = (finite.max() + 1.0) * (n + 1) * n * 10
    # cost[j, machine * n + (k - 1)] = k * p[j, machine]
    cost = (finite[:, :, None] * positions[None, None, :]).reshape(n, m * n)
    cost[np.repeat(~np.isfinite(times), n, axis=1)] = big
    rows, cols = optimize.linear_sum_assignment(cost)
    sequences: list[list[tuple[int, int]]] = [[] for _ in range(m)]
    for j, c in zip(rows.tolist(), cols.tolist(), strict=True):
        sequences[c // n].append((c % n, j))
    # higher position-from-the-end runs earlier
    return [[j for _, j in sorted(seq, reverse=True)] for seq in sequences]


def total_completion(times: np.ndarray, sequences: list[list[int]]) -> float:
    """Sum of completion times of the given per-machine sequences."""
    total = 0.0
    for machine, seq in enumerate(sequences):
        clock = 0.0
        for j in seq:
            clock += float(times[j, machine])
            total += clock
    return total
