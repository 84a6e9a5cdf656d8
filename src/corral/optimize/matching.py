"""Minimum total completion time on unrelated machines, as a min-cost matching.

The classic reduction (Horn; Bruno, Coffman and Sethi) that AlloX builds on:
if job ``j`` is the ``k``-th last on machine ``m`` it adds ``k x p[j, m]`` to
the sum of completion times (it delays itself and the ``k - 1`` jobs after
it). Matching jobs to (machine, position-from-the-end) slots at that cost
with the Hungarian method (``scipy.optimize.linear_sum_assignment``) gives an
optimal non-preemptive schedule of jobs all present at time 0.

When every job's times are the same vector up to a factor (one machine, or
machines that are uniformly faster or slower: ``p[j, m] = p[j] x r[m]``),
the matching needs no solver: the slot costs are then ``p[j] x (k r[m])``,
and the sum is least when the longest job takes the smallest coefficient
``k r[m]``, the next longest the next smallest, and so on (the rearrangement
inequality). That is shortest-processing-time first on one machine, found
by sorting: exactly the matching's optimum, in ``n log n`` rather than the
Hungarian method's ``n^3`` on an ``n x mn`` matrix (ten thousand jobs would
need a 10^8-entry matrix). Of equal jobs, the one first in the input runs first.
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
    rates = uniform_rates(times)
    if rates is not None:
        return _by_rearrangement(times[:, 0] / rates[0], rates)
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


def uniform_rates(times: np.ndarray) -> np.ndarray | None:
    """Each machine's time factor when every job's times are proportional to
    one vector (None: they are not, or a job cannot run somewhere)."""
    if not np.isfinite(times).all() or (times <= 0).any():
        return None
    rates = times[0] / times[0, 0]
    if times.shape[1] > 1 and not np.allclose(times, times[:, :1] * rates, rtol=1e-12, atol=0.0):
        return None
    return rates


def _by_rearrangement(size: np.ndarray, rates: np.ndarray) -> list[list[int]]:
    """Uniform machines: the ``k``-th smallest coefficient ``position x rate``
    to the ``k``-th longest job."""
    n, m = len(size), len(rates)
    positions = np.arange(1, n + 1, dtype=np.float64)
    coefficient = (positions[:, None] * rates[None, :]).ravel()  # position-major
    slots = np.argsort(coefficient, kind="stable")[:n]
    # longest first; among equal jobs the last in the input first, so that the
    # first in the input takes the larger position and runs earlier
    longest_first = np.lexsort((-np.arange(n), -size))
    sequences: list[list[tuple[int, int]]] = [[] for _ in range(m)]
    for j, slot in zip(longest_first.tolist(), slots.tolist(), strict=True):
        sequences[slot % m].append((slot // m, j))
    # a larger position (counted from the end) runs earlier; ties: input order
    return [[j for _, j in sorted(seq, key=lambda pj: (-pj[0], pj[1]))] for seq in sequences]


def total_completion(times: np.ndarray, sequences: list[list[int]]) -> float:
    """Sum of completion times of the given per-machine sequences."""
    total = 0.0
    for machine, seq in enumerate(sequences):
        clock = 0.0
        for j in seq:
            clock += float(times[j, machine])
            total += clock
    return total
