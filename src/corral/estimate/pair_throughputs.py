"""Gavel's throughput estimator: how fast a job type runs packed beside others,
for the types not profiled ahead of time.

Gavel's space-sharing policies need, for every pair of job types and every GPU
type, each job's throughput when the two share GPUs. Profiling every pair of a
cluster's job types is quadratic, so Gavel (Narayanan et al., OSDI'20, section
6) profiles a few *reference* job types offline, all pairs among them on every
GPU type. A new job type is measured beside a random fraction of the references
only; the rest of its row (its *fingerprint*: its throughput relative to alone,
beside each reference on each GPU type) is filled in by low-rank matrix
completion over the references' rows, and the job type is matched to the
reference whose fingerprint is nearest (cosine distance). Its pairs are then
taken to be that reference's.

Here the completion is a truncated SVD of the references' rows (rank
``rank``) giving the columns' factors, and a ridge fit (weight ``ridge``) of
the new row's factors to its measured entries. With the reference rows known
in full, this is close to what a joint factorisation reaches (there the new
row's few entries move the columns' factors a little), without its
iterations. A job type's speed alone on each GPU type is measured when it first
runs (Gavel profiles it too): only pairs are estimated.

:func:`estimation_error` measures the estimates against the full measured
matrix (``benchmarks/throughput_estimator.py`` prints it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from corral.perf.throughputs import ThroughputTable

GPU_TYPES = ("V100", "P100", "K80")
"""The GPU types of Gavel's measurements (consolidated gangs)."""


@dataclass
class PairEstimator:
    """Pairs of job types as Gavel's estimator gives them (see the module's docstring).

    ``references`` job types are profiled in full (chosen at random from ``seed``);
    each other job type is measured beside a reference on a GPU type with
    probability ``measured`` (at least one such measurement)."""

    table: ThroughputTable
    references: int
    measured: float = 0.1
    seed: int = 0
    rank: int = 10
    ridge: float = 1e-2
    reference_types: list[str] = field(init=False)
    _matched: dict[tuple[str, int], str] = field(init=False, default_factory=dict)
    _factors: dict[int, np.ndarray] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.measured <= 1.0:
            raise ValueError("the share of a new job type's pairs measured must be in (0, 1]")
        types = self.table.job_types
        if not 1 <= self.references <= len(types):
            raise ValueError(
                f"the job types profiled must be between 1 and {len(types)} (the types measured)"
            )
        self.reference_types = sorted(random.Random(self.seed).sample(types, self.references))

    # ------------------------------------------------------------ fingerprints
    def fingerprint(self, job_type: str, scale: int) -> np.ndarray:
        """``job_type``'s measured throughput beside each reference on each GPU type,
        relative to alone (0 where the two do not fit together; NaN: not measured)."""
        out = np.full(len(GPU_TYPES) * len(self.reference_types), np.nan)
        for t, gpu in enumerate(GPU_TYPES):
            for r, ref in enumerate(self.reference_types):
                rel = self.table.relative_pair((job_type, scale), (ref, scale), (gpu, True))
                if rel is not None:
                    out[t * len(self.reference_types) + r] = rel[0]
        return out

    def _column_factors(self, scale: int) -> np.ndarray:
        """The columns' factors from the references' rows (rank-truncated SVD)."""
        if scale not in self._factors:
            rows = np.nan_to_num(
                np.stack([self.fingerprint(r, scale) for r in self.reference_types])
            )
            _, s, vt = np.linalg.svd(rows, full_matrices=False)
            k = min(self.rank, len(s))
            self._factors[scale] = (vt[:k].T * s[:k]) / max(np.sqrt(len(rows)), 1.0)
        return self._factors[scale]

    def complete(self, row: np.ndarray, scale: int) -> np.ndarray:
        """``row`` (NaN where unmeasured) completed from the references' factors: its
        own factors fit by ridge regression to its measured entries, clipped to
        [0, 1] (a job is never faster beside another than alone in Gavel's data)."""
        v = self._column_factors(scale)
        seen = ~np.isnan(row)
        a = v[seen]
        u = np.linalg.solve(a.T @ a + self.ridge * np.eye(a.shape[1]), a.T @ row[seen])
        return np.where(seen, row, np.clip(v @ u, 0.0, 1.0))

    def profiled(self, job_type: str, scale: int, rng: random.Random) -> np.ndarray:
        """The fingerprint as profiling a new job type would measure it: each entry
        with probability :attr:`measured`, at least one."""
        full = self.fingerprint(job_type, scale)
        known = [k for k in range(len(full)) if not np.isnan(full[k])]
        keep = [k for k in known if rng.random() < self.measured] or [rng.choice(known)]
        row = np.full(len(full), np.nan)
        row[keep] = full[keep]
        return row

    def match(self, job_type: str, scale: int) -> str:
        """The reference ``job_type`` is taken for (itself when it is one)."""
        if job_type in self.reference_types:
            return job_type
        key = (job_type, scale)
        if key not in self._matched:
            rng = random.Random(f"{self.seed}/{job_type}/{scale}")
            row = self.complete(self.profiled(job_type, scale, rng), scale)
            best, nearest = np.inf, self.reference_types[0]
            for ref in self.reference_types:
                other = np.nan_to_num(self.fingerprint(ref, scale))
                norm = float(np.linalg.norm(row) * np.linalg.norm(other))
                distance = 1.0 - float(row @ other) / norm if norm > 0 else 1.0
                if distance < best:
                    best, nearest = distance, ref
            self._matched[key] = nearest
        return self._matched[key]

    # ---------------------------------------------------------------- answers
    def relative_pair(
        self, a: tuple[str, int], b: tuple[str, int], gpu: tuple[str, bool]
    ) -> tuple[float, float] | None:
        """As :meth:`ThroughputTable.relative_pair`, each job type replaced by the
        reference it is matched to."""
        return self.table.relative_pair(
            (self.match(a[0], a[1]), a[1]), (self.match(b[0], b[1]), b[1]), gpu
        )


@dataclass(frozen=True)
class EstimationError:
    """How far the estimated pairs are from the measured ones."""

    references: int
    measured: float
    pairs: int
    """Pairs compared (at least one job type of each not a reference)."""
    mean_abs: float
    """Mean absolute error of a job's throughput beside the other, relative to alone."""
    mean_abs_guessed: float
    """The same with each unprofiled job type matched to a random reference (no
    fingerprint): what the completion and matching gain."""
    same_model: float
    """Share of unprofiled job types matched to a reference of the same model (the
    name before its batch size)."""


def _model(job_type: str) -> str:
    return job_type.split(" (")[0]


def estimation_error(
    table: ThroughputTable, references: int, measured: float, seeds: range, scale: int = 1
) -> EstimationError:
    """The estimates of ``seeds`` estimators (each its own references and
    measurements) against the full matrix at ``scale`` GPUs, on every GPU type."""
    errors: list[float] = []
    guessed: list[float] = []
    same: list[bool] = []
    for seed in seeds:
        est = PairEstimator(table, references, measured, seed)
        rng = random.Random(f"guess/{seed}")
        guess = {t: rng.choice(est.reference_types) for t in table.job_types}
        types = [t for t in table.job_types if (t, scale) in table.alone.get(("V100", True), {})]
        for a in types:
            if a not in est.reference_types:
                same.append(_model(est.match(a, scale)) == _model(a))
            for b in types:
                if a in est.reference_types and b in est.reference_types:
                    continue
                for gpu in GPU_TYPES:
                    true = table.relative_pair((a, scale), (b, scale), (gpu, True))
                    if true is None:
                        continue
                    got = est.relative_pair((a, scale), (b, scale), (gpu, True))
                    ga = a if a in est.reference_types else guess[a]
                    gb = b if b in est.reference_types else guess[b]
                    blind = table.relative_pair((ga, scale), (gb, scale), (gpu, True))
                    if got is not None:
                        errors.append(abs(got[0] - true[0]))
                    if blind is not None:
                        guessed.append(abs(blind[0] - true[0]))
    return EstimationError(
        references,
        measured,
        len(errors),
        float(np.mean(errors)) if errors else float("nan"),
        float(np.mean(guessed)) if guessed else float("nan"),
        float(np.mean(same)) if same else float("nan"),
    )
