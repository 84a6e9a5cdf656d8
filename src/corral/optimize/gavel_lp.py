"""Gavel's allocation problems over effective throughput, as LPs solved with HiGHS.

An allocation ``X`` (jobs x GPU types) says what fraction of time each job
should spend on each type. A job's effective throughput is
``sum_t T[j, t] X[j, t]`` (``T``: its steps/s on a gang of its size of each
type). Every allocation obeys: a job runs at most all of the time
(``sum_t X[j, t] <= 1``), and the GPUs a type hands out fit it
(``sum_j gpus_j X[j, t] <= count_t``). Each objective is Gavel's:

* **max-min fairness**: maximise the least weighted normalised throughput,
  scale factor x throughput / (weight x throughput on the proportional
  share, each type in proportion to its size). Multiplying by the scale
  factor (GPUs per job) is Gavel's: a job on 4 GPUs reaches the level of a
  1-GPU job with a quarter of the time, so equal levels mean equal GPU-time.
  Then, holding that level, maximise the total (so no capacity idles when
  others could use it: Gavel's water-filling intent, in one extra LP).
  The heterogeneity-agnostic variant sees every type as equally fast.
* **finish-time fairness**: minimise the largest rho = (elapsed + remaining
  steps / throughput) / (time it would have taken isolated so far +
  remaining steps / isolated throughput). The isolated share is Gavel's: 1/n
  of every type divided by the job's scale factor (capped at all of the
  time). For a fixed rho the constraints are linear, so rho is found by
  bisection over feasibility LPs.
* **min makespan**: maximise v with throughput_j >= remaining_j x v; the
  makespan is 1/v.
* **max throughput**: maximise the sum of throughputs, each normalised by the
  job's best type.
* **space sharing** (max-min fairness, packed): variables are combinations,
  a job alone or a measured pair sharing one gang, with each member's
  throughput in the pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from corral.errors import CorralError
from corral.lazy import LazyModule

if TYPE_CHECKING:
    from scipy import sparse
else:
    sparse = LazyModule("scipy.sparse")
optimize = LazyModule("scipy.optimize")

_TOL = 1e-6


@dataclass
class AllocationProblem:
    throughput: np.ndarray
    """jobs x types: steps/s of each job's gang on each type."""
    gpus: np.ndarray
    """GPUs each job's gang needs."""
    capacity: np.ndarray
    """GPUs of each type."""
    weights: np.ndarray | None = None
    combos: list[tuple[int, ...]] = field(default_factory=list)
    """Space sharing: each combination's member jobs (singles first)."""
    combo_throughput: np.ndarray | None = None
    """combos x 2 x types: each member's steps/s in the combination."""

    @property
    def n(self) -> int:
        return int(self.throughput.shape[0])

    @property
    def k(self) -> int:
        return int(self.throughput.shape[1])

    def fits(self) -> np.ndarray:
        """jobs x types: True where the job's gang fits in the type and runs there
        (a measured speed of 0 means it does not fit in the GPU's memory)."""
        return (self.gpus[:, None] <= self.capacity[None, :]) & (self.throughput > 0)

    def proportional_throughput(self) -> np.ndarray:
        """Each job's throughput on all of the time, spread over the types in
        proportion to their sizes (Gavel's max-min normaliser)."""
        mix = self.capacity / max(float(self.capacity.sum()), 1.0)
        return (self.throughput * self.fits()) @ mix

    def isolated_throughput(self) -> np.ndarray:
        """Each job's throughput on an equal 1/n share of every type, divided by
        its scale factor and capped at all of the time (Gavel's isolated
        baseline, the reference of finish-time fairness)."""
        x = self.capacity[None, :] / max(self.n, 1) / self.gpus[:, None].astype(float)
        x = x / np.maximum(x.sum(axis=1, keepdims=True), 1.0)
        return ((self.throughput * self.fits()) * x).sum(axis=1)


def _solve(
    c: np.ndarray, a_ub: sparse.spmatrix, b_ub: np.ndarray, bounds: np.ndarray
) -> np.ndarray | None:
    res = optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if res.status == 2:  # infeasible
        return None
    if res.status != 0:
        raise CorralError(f"allocation LP failed: {res.message}")
    return np.asarray(res.x)


def _base_rows(p: AllocationProblem, extra: int) -> tuple[sparse.spmatrix, np.ndarray]:
    """Per-job time and per-type capacity rows over x (jobs*types) + ``extra`` columns."""
    n, k = p.n, p.k
    cols = np.arange(n * k)
    job_rows = sparse.csr_matrix((np.ones(n * k), (cols // k, cols)), shape=(n, n * k + extra))
    type_rows = sparse.csr_matrix(
        (np.repeat(p.gpus.astype(float), k), (cols % k, cols)), shape=(k, n * k + extra)
    )
    return sparse.vstack([job_rows, type_rows]).tocsr(), np.concatenate(
        [np.ones(n), p.capacity.astype(float)]
    )


def _bounds(p: AllocationProblem, extra: list[tuple[float, float | None]]) -> np.ndarray:
    upper = p.fits().astype(float).ravel()
    rows = [(0.0, u) for u in upper] + extra
    return np.array(rows, dtype=object)


def _throughput_rows(p: AllocationProblem, scale: np.ndarray, extra: int) -> sparse.spmatrix:
    """Row j: -scale_j * sum_t T[j, t] x[j, t] (so that rows <= rhs read throughput >= ...)."""
    n, k = p.n, p.k
    cols = np.arange(n * k)
    values = -(p.throughput * scale[:, None]).ravel()
    return sparse.csr_matrix((values, (cols // k, cols)), shape=(n, n * k + extra))


def _max_total(
    p: AllocationProblem, floor_rows: sparse.spmatrix, floor_rhs: np.ndarray, norm: np.ndarray
) -> np.ndarray:
    """Maximise the sum of normalised throughputs subject to extra floor rows."""
    base, rhs = _base_rows(p, 0)
    a = sparse.vstack([base, floor_rows]).tocsr()
    b = np.concatenate([rhs, floor_rhs])
    c = -(p.throughput / norm[:, None]).ravel()
    x = _solve(c, a, b, _bounds(p, []))
    if x is None:  # numerical edge: the floor at its limit; relax it slightly
        x = _solve(c, a, b + np.abs(b) * 1e-6 + 1e-9, _bounds(p, []))
    assert x is not None
    return x.reshape(p.n, p.k)


def _empty(p: AllocationProblem) -> np.ndarray | None:
    return np.zeros((p.n, p.k)) if p.n == 0 else None


def max_min_fairness(p: AllocationProblem, agnostic: bool = False) -> np.ndarray:
    """Gavel's (weighted) max-min fairness over normalised effective throughput."""
    if (done := _empty(p)) is not None:
        return done
    if agnostic:
        return _agnostic(p)
    norm = _max_min_norm(p)
    scale = 1.0 / norm
    base, rhs = _base_rows(p, 1)
    rows = _throughput_rows(p, scale, 1).tolil()
    can_run = p.fits().any(axis=1)
    rows[np.flatnonzero(can_run), p.n * p.k] = 1.0  # z <= normalised throughput
    a = sparse.vstack([base, rows.tocsr()]).tocsr()
    b = np.concatenate([rhs, np.zeros(p.n)])
    c = np.zeros(p.n * p.k + 1)
    c[-1] = -1.0
    x = _solve(c, a, b, _bounds(p, [(0.0, None if can_run.any() else 0.0)]))
    assert x is not None  # x = 0, z = 0 is always feasible
    level = float(x[-1]) * (1 - 1e-6)
    floor = _throughput_rows(p, scale, 0)[np.flatnonzero(can_run)]
    return _max_total(p, floor, np.full(floor.shape[0], -level), norm)


def _max_min_norm(p: AllocationProblem) -> np.ndarray:
    """What a job's throughput is divided by in max-min fairness: weight x
    proportional throughput / scale factor."""
    weights = p.weights if p.weights is not None else np.ones(p.n)
    return np.maximum(p.proportional_throughput(), _TOL) * weights / p.gpus.astype(float)


def _agnostic(p: AllocationProblem) -> np.ndarray:
    """Max-min over time shares with every type alike (Gavel's agnostic baseline).

    The LP sees equal speeds, so its split of a job's share between types is
    arbitrary; it is replaced by a split in proportion to the sizes of the
    types the job fits in, whenever that split still fits every type.
    """
    fits = p.fits()
    blind = AllocationProblem(fits.astype(float), p.gpus, p.capacity, p.weights)
    x = max_min_fairness(blind)
    mix = fits * p.capacity[None, :]
    mix = mix / np.maximum(mix.sum(axis=1, keepdims=True), 1)
    spread = x.sum(axis=1, keepdims=True) * mix
    if ((p.gpus[:, None] * spread).sum(axis=0) <= p.capacity + 1e-9).all():
        return spread
    return x


def min_makespan(p: AllocationProblem, remaining: np.ndarray) -> np.ndarray:
    """Maximise v such that every job's throughput >= its remaining steps x v."""
    if (done := _empty(p)) is not None:
        return done
    base, rhs = _base_rows(p, 1)
    rows = _throughput_rows(p, np.ones(p.n), 1).tolil()
    can_run = p.fits().any(axis=1)
    for j in np.flatnonzero(can_run):
        rows[j, p.n * p.k] = remaining[j]
    a = sparse.vstack([base, rows.tocsr()]).tocsr()
    b = np.concatenate([rhs, np.zeros(p.n)])
    c = np.zeros(p.n * p.k + 1)
    c[-1] = -1.0
    x = _solve(c, a, b, _bounds(p, [(0.0, None if can_run.any() else 0.0)]))
    assert x is not None
    v = float(x[-1]) * (1 - 1e-6)
    floor = _throughput_rows(p, np.ones(p.n), 0)[np.flatnonzero(can_run)]
    norm = np.maximum(p.throughput.max(axis=1), _TOL)
    return _max_total(p, floor, -remaining[can_run] * v, norm)


def max_throughput(p: AllocationProblem) -> np.ndarray:
    """Maximise the total throughput, each job's normalised by its best type."""
    if (done := _empty(p)) is not None:
        return done
    norm = np.maximum(p.throughput.max(axis=1), _TOL)
    return _max_total(p, sparse.csr_matrix((0, p.n * p.k)), np.zeros(0), norm)


def finish_time_fairness(
    p: AllocationProblem,
    elapsed: np.ndarray,
    remaining: np.ndarray,
    isolated_so_far: np.ndarray | None = None,
    iterations: int = 30,
) -> tuple[np.ndarray, float]:
    """Minimise the largest finish-time fairness rho; returns (X, rho).

    ``elapsed``: seconds since each job arrived; ``remaining``: its steps
    left; ``isolated_so_far``: the seconds its progress so far would have
    taken on its isolated share (Gavel accumulates this over its solves;
    zero for a job that has not run).
    """
    if (done := _empty(p)) is not None:
        return done, 0.0
    if isolated_so_far is None:
        isolated_so_far = np.zeros(p.n)
    can_run = p.fits().any(axis=1)
    isolated = isolated_so_far + remaining / np.maximum(p.isolated_throughput(), _TOL)
    best = np.maximum(p.throughput.max(axis=1), _TOL)
    lo = float(np.max(((elapsed + remaining / best) / isolated)[can_run], initial=0.0))
    base, rhs = _base_rows(p, 0)
    rows = _throughput_rows(p, np.ones(p.n), 0)[np.flatnonzero(can_run)]
    idx = np.flatnonzero(can_run)

    def floor(rho: float) -> np.ndarray | None:
        slack = rho * isolated[idx] - elapsed[idx]
        if (slack <= 0).any():
            return None
        return -remaining[idx] / slack

    # the same constraint matrix, objective and bounds at every rho: only the
    # floors on throughput move
    a = sparse.vstack([base, rows]).tocsr()
    zero, bounds = np.zeros(p.n * p.k), _bounds(p, [])

    def feasible(rho: float) -> bool:
        need = floor(rho)
        if need is None:
            return False
        return _solve(zero, a, np.concatenate([rhs, need]), bounds) is not None

    hi = max(lo, 1e-3) * 2
    while not feasible(hi):
        hi *= 2
        if hi > 1e12:
            raise CorralError("finish-time fairness: no feasible allocation found")
    for _ in range(iterations):
        if hi - lo <= 1e-4 * hi:
            break
        mid = (lo + hi) / 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    need = floor(hi)
    assert need is not None
    return _max_total(p, rows, need, best), hi


def max_min_fairness_packed(p: AllocationProblem) -> np.ndarray:
    """Max-min fairness where a measured pair of jobs may share one gang.

    Returns combos x types (``p.combos`` order). Each job's throughput sums
    its share of time alone and in each pair, at the pair's measured speeds.
    """
    if p.combo_throughput is None or not p.combos:
        raise CorralError("the packed allocation needs combinations with their throughputs")
    n, k = p.n, p.k
    m = len(p.combos)
    norm = _max_min_norm(p)
    combo_gpus = np.array([p.gpus[c[0]] for c in p.combos], dtype=float)
    fits = combo_gpus[:, None] <= p.capacity[None, :]
    job_r, job_c, thr_v = [], [], []
    for ci, members in enumerate(p.combos):
        for slot, j in enumerate(members):
            for t in range(k):
                job_r.append(j)
                job_c.append(ci * k + t)
                thr_v.append(p.combo_throughput[ci, slot, t] / norm[j])
    nv = m * k + 1
    time_rows = sparse.csr_matrix((np.ones(len(job_r)), (job_r, job_c)), shape=(n, nv))
    cols = np.arange(m * k)
    type_rows = sparse.csr_matrix((np.repeat(combo_gpus, k), (cols % k, cols)), shape=(k, nv))
    thr = sparse.csr_matrix((-np.array(thr_v), (job_r, job_c)), shape=(n, nv)).tolil()
    can_run = np.zeros(n, dtype=bool)
    for ci, members in enumerate(p.combos):
        if fits[ci].any():
            can_run[list(members)] = True
    thr[np.flatnonzero(can_run), m * k] = 1.0
    a = sparse.vstack([time_rows, type_rows, thr.tocsr()]).tocsr()
    b = np.concatenate([np.ones(n), p.capacity.astype(float), np.zeros(n)])
    z_bound = (0.0, None if can_run.any() else 0.0)
    bounds = np.array([(0.0, float(f)) for f in fits.ravel()] + [z_bound], dtype=object)
    c = np.zeros(nv)
    c[-1] = -1.0
    x = _solve(c, a, b, bounds)
    assert x is not None
    level = float(x[-1]) * (1 - 1e-6)
    # second stage: hold the level, maximise the total normalised throughput
    thr_rows = sparse.csr_matrix((-np.array(thr_v), (job_r, job_c)), shape=(n, nv))
    a2 = sparse.vstack([time_rows, type_rows, thr_rows[np.flatnonzero(can_run)]]).tocsr()
    b2 = np.concatenate([np.ones(n), p.capacity.astype(float), np.full(can_run.sum(), -level)])
    c2 = np.asarray(thr_rows.sum(axis=0)).ravel()
    bounds2 = bounds.copy()
    bounds2[-1] = (0.0, 0.0)
    x2 = _solve(c2, a2, b2, bounds2)
    if x2 is None:
        x2 = _solve(c2, a2, b2 + 1e-9, bounds2)
    assert x2 is not None
    return x2[:-1].reshape(m, k)
