"""Hare's relaxation: a lower bound on total weighted JCT and an order of jobs.

The problem: jobs made of rounds of ``g`` tasks, each task running on one
GPU at its type's time ``tau[j, t]``; the next round starts when the last
task of this one ends; minimise sum of weight x completion. We relax it to
an interval-indexed LP (in the style of Hall, Schulz, Shmoys and Wein) on
geometric intervals ``[b_{k-1}, b_k)``:

* ``y[j, t, k]``: the fraction of job ``j``'s task work processed on GPU type
  ``t`` during interval ``k`` (preemption and splitting allowed);
* each job is processed once: ``sum_{t,k} y = 1``;
* a type's GPUs give at most ``count_t x |interval|`` GPU-seconds per interval:
  ``sum_j y[j, t, k] x W[j, t] <= count_t x |I_k|``, ``W[j, t] = rounds x g x tau``;
* a job cannot run faster than one round per ``min_t tau[j, t]``:
  ``sum_t y[j, t, k] <= |I_k after its release| / (rounds x min tau)``, and
  nothing before its release;
* ``C_j >= sum y[j, t, k] x b_{k-1} + critical_j / 2``: the job's work is
  processed at most at rate 1 / critical (critical = rounds x min tau), so
  the mean time of its processing is at most ``C_j - critical_j / 2``, and
  that mean is at least the weighted mean of the intervals' openings; and
  ``C_j >= release + critical_j``.

Any real schedule gives a feasible point whose objective is at most its
weighted JCT, so the LP optimum is a valid lower bound. Jobs are ordered by
their LP mean busy time (the weighted mean of the interval midpoints),
Hare's "order of tasks" from the relaxation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corral.errors import CorralError
from corral.optimize.highs import Rows, solve, stack


@dataclass
class RelaxationResult:
    bound: float
    """Lower bound on sum of weight x completion time (absolute times)."""
    completion: np.ndarray
    """Each job's LP completion time C_j."""
    mean_time: np.ndarray
    """Each job's LP mean busy time (the order key)."""

    def order(self) -> np.ndarray:
        return np.lexsort((self.completion, self.mean_time))


def _boundaries(start: float, horizon: float, first: float, growth: float) -> np.ndarray:
    edges = [start, start + first]
    while edges[-1] < horizon:
        edges.append(start + (edges[-1] - start) * growth)
    return np.array(edges)


def relaxation(
    release: np.ndarray,
    weight: np.ndarray,
    tasks: np.ndarray,
    rounds: np.ndarray,
    tau: np.ndarray,
    capacity: np.ndarray,
    growth: float = 1.5,
) -> RelaxationResult:
    """Solve the LP; ``tau`` is jobs x types (inf where a type cannot run the job)."""
    n, k_types = tau.shape
    if n == 0:
        return RelaxationResult(0.0, np.zeros(0), np.zeros(0))
    # tasks of a round may run on any types, one after another if need be
    usable = np.isfinite(tau) & (capacity[None, :] > 0)
    tau_ok = np.where(usable, tau, np.inf)
    fastest = tau_ok.min(axis=1)
    if not np.isfinite(fastest).all():
        raise CorralError("a job has no GPU type it can run on")
    work = rounds[:, None] * tasks[:, None] * np.where(usable, tau, 0.0)
    critical = rounds * fastest
    start = float(release.min())
    total_gpus = float(capacity.sum())
    horizon = float(release.max()) + float((work.min(axis=1)).sum()) / total_gpus + critical.max()
    first = max(float(np.median(fastest)), 1e-3)
    edges = _boundaries(start, horizon * 1.01 + first, first, growth)
    n_int = len(edges) - 1
    lo, hi = edges[:-1], edges[1:]
    width = hi - lo
    # variables: y[j, t, k] (j-major), then C_j
    n_y = n * k_types * n_int
    grid = np.meshgrid(np.arange(n), np.arange(k_types), np.arange(n_int), indexing="ij")
    jj, tt, kk = (axis.ravel() for axis in grid)
    col = np.arange(n_y)
    open_len = np.clip(hi[kk] - np.maximum(lo[kk], release[jj]), 0.0, None)
    upper = np.where(usable[jj, tt] & (open_len > 0), 1.0, 0.0)
    # equality: each job processed once
    n_var = n_y + n
    once = Rows.of(jj, col, np.ones(n_y), n, n_var, upper=1.0, lower=1.0)
    # capacity per (type, interval)
    rows = [
        Rows.of(
            tt * n_int + kk,
            col,
            work[jj, tt],
            k_types * n_int,
            n_var,
            upper=(capacity[:, None] * width[None, :]).ravel(),
        )
    ]
    # per-job speed limit per interval (only where it binds: rhs < 1)
    limit = open_len.reshape(n, k_types, n_int)[:, 0, :] / np.maximum(critical[:, None], 1e-12)
    binding = limit < 1.0
    jb, kb = np.nonzero(binding)
    if len(jb):
        row_of = -np.ones((n, n_int), dtype=np.int64)
        row_of[jb, kb] = np.arange(len(jb))
        sel = binding[jj, kk]
        rows.append(
            Rows.of(
                row_of[jj[sel], kk[sel]],
                col[sel],
                np.ones(int(sel.sum())),
                len(jb),
                n_var,
                upper=limit[jb, kb],
            )
        )
    # C_j >= sum y * lo + critical / 2  ->  sum y * lo - C_j <= -critical / 2
    c_cols = n_y + np.arange(n)
    rows.append(
        Rows.of(
            np.concatenate([jj, np.arange(n)]),
            np.concatenate([col, c_cols]),
            np.concatenate([lo[kk], -np.ones(n)]),
            n,
            n_var,
            upper=-critical / 2,
        )
    )
    c = np.concatenate([np.zeros(n_y), weight.astype(float)])
    # HiGHS' interior point (with its crossover to a vertex) solves this LP
    # 1.5x faster than its simplex at 1,000 jobs and 6x at 5,000; the LP is
    # degenerate, so the two may return different optimal vertices (the same
    # bound, jobs of equal standing in another order)
    found = solve(
        c,
        stack(*rows, once),
        np.concatenate([np.zeros(n_y), release + critical]),
        np.concatenate([upper, np.full(n, np.inf)]),
        method="ipm",
    )
    if found is None:
        raise CorralError("Hare's relaxation LP is infeasible")
    y = found.x[:n_y].reshape(n, k_types, n_int)
    completion = found.x[n_y:]
    mid = (lo + hi) / 2
    mean_time = (y.sum(axis=1) * mid[None, :]).sum(axis=1)
    return RelaxationResult(found.objective, completion, mean_time)
