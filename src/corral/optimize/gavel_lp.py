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

import numpy as np

from corral.errors import CorralError
from corral.optimize.highs import RowBoundSeries, Rows, solve, stack

_TOL = 1e-6
_WEIGHT_RANGE = 1e-9
"""Weights below this fraction of the largest count as this fraction: HiGHS refuses
coefficients beyond 1e15, and a job weighted a billionth of another is already
given nothing of the cluster's time."""


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


IPM_FROM = 100
"""Jobs from which a level is found by HiGHS' interior point (then crossover)
rather than its dual simplex: the max-min level's LP (a row per job binding one
variable, the level) is highly degenerate, and the simplex's time grew as about
n^2.3 (5.2 s at 10,000 jobs on one GPU type, where the interior point took 0.21
s; 15 ms against 6 ms at 625, 0.5 ms against 0.8 ms at 50)."""


def _solve(cost: np.ndarray, rows: Rows, upper: np.ndarray) -> np.ndarray | None:
    """The LP's optimum over x >= 0 (None if infeasible)."""
    found = solve(cost, rows, 0.0, upper)
    return None if found is None else found.x


def _level(cost: np.ndarray, rows: Rows, upper: np.ndarray, jobs: int) -> float:
    """The optimum of a first stage whose last variable is the level it maximises
    (the max-min level, 1 / the makespan): only that value is kept, the second
    stage makes the allocation, so how it is found does not change the result
    beyond the solvers' tolerances (the allocations agreed to 1e-14 at 50-10,000
    jobs)."""
    found = solve(cost, rows, 0.0, upper, method="ipm" if jobs >= IPM_FROM else "choose")
    assert found is not None  # x = 0 at level 0 is always feasible
    return float(found.x[-1])


def _base_rows(p: AllocationProblem, extra: int) -> Rows:
    """Per-job time and per-type capacity rows over x (jobs*types) + ``extra`` columns."""
    n, k = p.n, p.k
    cols = np.arange(n * k)
    return Rows.of(
        np.concatenate([cols // k, n + cols % k]),
        np.concatenate([cols, cols]),
        np.concatenate([np.ones(n * k), np.repeat(p.gpus.astype(float), k)]),
        n + k,
        n * k + extra,
        upper=np.concatenate([np.ones(n), p.capacity.astype(float)]),
    )


def _upper(p: AllocationProblem, extra: list[float]) -> np.ndarray:
    """Variables' upper bounds: x[j, t] <= 1 where the job runs on the type, else 0."""
    return np.concatenate([p.fits().astype(float).ravel(), extra])


def _throughput_rows(
    p: AllocationProblem,
    scale: np.ndarray,
    extra: int,
    level: np.ndarray | None = None,
) -> Rows:
    """Row j: -scale_j * sum_t T[j, t] x[j, t] (so that rows <= rhs read throughput
    >= ...), plus ``level[j]`` on the first extra column where given (NaN: none)."""
    n, k = p.n, p.k
    cols = np.arange(n * k)
    rows, at, values = cols // k, cols, -(p.throughput * scale[:, None]).ravel()
    if level is not None:
        on = np.flatnonzero(~np.isnan(level))
        rows = np.concatenate([rows, on])
        at = np.concatenate([at, np.full(len(on), n * k)])
        values = np.concatenate([values, level[on]])
    return Rows.of(rows, at, values, n, n * k + extra, upper=0.0)


def _max_total(p: AllocationProblem, floor: Rows, norm: np.ndarray) -> np.ndarray:
    """Maximise the sum of normalised throughputs subject to extra floor rows."""
    rows = stack(_base_rows(p, 0), floor)
    c = -(p.throughput / norm[:, None]).ravel()
    upper = _upper(p, [])
    x = _solve(c, rows, upper)
    if x is None:  # numerical edge: the floor at its limit; relax it slightly
        b = rows.upper
        x = _solve(c, rows.bounded(b + np.abs(b) * 1e-6 + 1e-9), upper)
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
    can_run = p.fits().any(axis=1)
    # z <= normalised throughput of each job that can run
    z_rows = _throughput_rows(p, scale, 1, np.where(can_run, 1.0, np.nan))
    c = np.zeros(p.n * p.k + 1)
    c[-1] = -1.0
    upper = _upper(p, [np.inf if can_run.any() else 0.0])
    level = _level(c, stack(_base_rows(p, 1), z_rows), upper, p.n) * (1 - 1e-6)
    floor = _throughput_rows(p, scale, 0).take(np.flatnonzero(can_run))
    return _max_total(p, floor.bounded(-level), norm)


def _max_min_norm(p: AllocationProblem) -> np.ndarray:
    """What a job's throughput is divided by in max-min fairness: weight x
    proportional throughput / scale factor."""
    weights = p.weights if p.weights is not None else np.ones(p.n)
    if p.n and (weights.max() > 1.0 or weights.min() < _WEIGHT_RANGE):  # any weight solves
        weights = np.maximum(weights / weights.max(), _WEIGHT_RANGE)
    return np.maximum(p.proportional_throughput(), _TOL) * weights / p.gpus.astype(float)


def _agnostic(p: AllocationProblem) -> np.ndarray:
    """Max-min over time shares with every type alike (Gavel's agnostic baseline).

    Blind to speed as Gavel's is: every job counts as running at speed 1 on every
    type its gang fits in, even one where it cannot run (Gavel's wrapper sets every
    throughput to 1; its rounds then skip the types where the job's real speed is
    0, so such a job uses only part of its share). The LP sees equal speeds, so its
    split of a job's share between types is arbitrary: a vertex puts each job's
    share on one type, where Gavel's interior-point solver spreads it evenly, so
    that any job may take any type in a round. It is replaced by a split in
    proportion to the sizes of the types the gang fits in, whenever that split
    still fits every type (it always does where every gang fits every type).
    """
    sized = p.gpus[:, None] <= p.capacity[None, :]
    blind = AllocationProblem(sized.astype(float), p.gpus, p.capacity, p.weights)
    x = max_min_fairness(blind)
    mix = sized * p.capacity[None, :]
    mix = mix / np.maximum(mix.sum(axis=1, keepdims=True), 1)
    spread = x.sum(axis=1, keepdims=True) * mix
    if ((p.gpus[:, None] * spread).sum(axis=0) <= p.capacity + 1e-9).all():
        return spread
    return x


def min_makespan(p: AllocationProblem, remaining: np.ndarray) -> np.ndarray:
    """Maximise v such that every job's throughput >= its remaining steps x v."""
    if (done := _empty(p)) is not None:
        return done
    can_run = p.fits().any(axis=1)
    # v is 1 / the makespan, in seconds: around 1e-6 for a day's work, below the
    # solver's tolerances (it stopped 2% short of the optimum at 1,000 jobs). In units
    # of the longest job's time alone on its best type, v is near 1.
    alone = remaining / np.maximum(p.throughput.max(axis=1), _TOL)
    unit = float(alone[can_run].max(initial=0.0))
    if unit > 0:
        remaining = np.maximum(remaining / unit, _WEIGHT_RANGE)
    v_rows = _throughput_rows(p, np.ones(p.n), 1, np.where(can_run, remaining, np.nan))
    c = np.zeros(p.n * p.k + 1)
    c[-1] = -1.0
    upper = _upper(p, [np.inf if can_run.any() else 0.0])
    v = _level(c, stack(_base_rows(p, 1), v_rows), upper, p.n) * (1 - 1e-6)
    floor = _throughput_rows(p, np.ones(p.n), 0).take(np.flatnonzero(can_run))
    norm = np.maximum(p.throughput.max(axis=1), _TOL)
    return _max_total(p, floor.bounded(-remaining[can_run] * v), norm)


def max_throughput(p: AllocationProblem) -> np.ndarray:
    """Maximise the total throughput, each job's normalised by its best type."""
    if (done := _empty(p)) is not None:
        return done
    norm = np.maximum(p.throughput.max(axis=1), _TOL)
    nothing = _throughput_rows(p, np.ones(p.n), 0).take(np.zeros(0, dtype=int))
    return _max_total(p, nothing, norm)


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
    idx = np.flatnonzero(can_run)
    base = _base_rows(p, 0)
    rows = _throughput_rows(p, np.ones(p.n), 0).take(idx)

    def floor(rho: float) -> np.ndarray | None:
        slack = rho * isolated[idx] - elapsed[idx]
        if (slack <= 0).any():
            return None
        return -remaining[idx] / slack

    # the same constraint matrix, objective and bounds at every rho: only the
    # floors on throughput move
    checks = RowBoundSeries(np.zeros(p.n * p.k), stack(base, rows), 0.0, _upper(p, []))

    def feasible(rho: float) -> bool:
        need = floor(rho)
        if need is None:
            return False
        return checks.solve(np.concatenate([base.upper, need])) is not None

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
    return _max_total(p, rows.bounded(need), best), hi


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
    ones = np.ones(len(job_r))
    time_rows = Rows.of(np.array(job_r), np.array(job_c), ones, n, nv, upper=1.0)
    cols = np.arange(m * k)
    type_rows = Rows.of(
        cols % k, cols, np.repeat(combo_gpus, k), k, nv, upper=p.capacity.astype(float)
    )
    can_run = np.zeros(n, dtype=bool)
    for ci, members in enumerate(p.combos):
        if fits[ci].any():
            can_run[list(members)] = True
    on = np.flatnonzero(can_run)
    z_rows = Rows.of(  # z <= each job's normalised throughput
        np.concatenate([job_r, on]),
        np.concatenate([job_c, np.full(len(on), m * k)]),
        np.concatenate([-np.array(thr_v), np.ones(len(on))]),
        n,
        nv,
        upper=0.0,
    )
    upper = np.concatenate([fits.ravel().astype(float), [np.inf if can_run.any() else 0.0]])
    c = np.zeros(nv)
    c[-1] = -1.0
    level = _level(c, stack(time_rows, type_rows, z_rows), upper, n) * (1 - 1e-6)
    # second stage: hold the level, maximise the total normalised throughput
    thr_rows = Rows.of(np.array(job_r), np.array(job_c), -np.array(thr_v), n, nv, upper=0.0)
    a2 = stack(time_rows, type_rows, thr_rows.take(on).bounded(-level))
    c2 = np.bincount(np.array(job_c), weights=-np.array(thr_v), minlength=nv)
    upper[-1] = 0.0
    x2 = _solve(c2, a2, upper)
    if x2 is None:
        x2 = _solve(c2, a2.bounded(a2.upper + 1e-9), upper)
    assert x2 is not None
    return x2[:-1].reshape(m, k)
