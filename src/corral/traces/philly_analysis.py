"""The ATC'19 analysis of Philly, recomputed from a ``cluster_job_log``.

Jeon et al. ("Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN
Training Workloads", ATC'19) characterise the jobs by their final status
(passed, killed, unsuccessful) in count and in GPU time, failures by job
size, and the effect of locality on gangs. These are the same tables, made
from whatever log is given (the full release, or a part of it), so that
corral's failure model can be driven by measured rates rather than one
uniform chance per attempt: :func:`failure_rates` gives the per-size chance
that an attempt fails, in the form ``corral sim --failure-rates`` takes.

An attempt counts as failed when the job went on to another attempt, or when
it was the last attempt of an unsuccessful job (a killed job's last attempt
was stopped by its user, not failed).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from corral.traces.philly_log import SIZE_BUCKETS, STATUSES, LoggedJob


@dataclass
class StatusRow:
    status: str
    jobs: int
    job_share: float
    gpu_hours: float
    gpu_share: float


@dataclass
class SizeRow:
    size: str
    jobs: int
    unsuccessful_share: float
    attempts_per_job: float
    attempt_failure_rate: float


@dataclass
class LocalityRow:
    size: str
    servers: int
    jobs: int
    median_queue_minutes: float


@dataclass
class PhillyAnalysis:
    jobs: int
    by_status: list[StatusRow]
    by_size: list[SizeRow]
    locality: list[LocalityRow]

    def failure_rates(self) -> str:
        """Per-size chances that an attempt fails, as ``--failure-rates`` takes them."""
        parts = []
        for row, (lo, hi, _) in zip(self.by_size, SIZE_BUCKETS, strict=True):
            if row.jobs:
                span = f"{lo}" if lo == hi else (f"{lo}-" if hi >= 1 << 30 else f"{lo}-{hi}")
                parts.append(f"{span}:{row.attempt_failure_rate:.4f}")
        return ",".join(parts)


def _bucket(gpus: int) -> int:
    return next(k for k, (lo, hi, _) in enumerate(SIZE_BUCKETS) if lo <= gpus <= hi)


def _failed_attempts(job: LoggedJob) -> int:
    n = len(job.attempts)
    return n - 1 + (1 if job.status == "Unsuccessful" else 0) if n else 0


def analyse(jobs: list[LoggedJob]) -> PhillyAnalysis:
    """The tables, over the jobs that were scheduled (their size is known)."""
    sized = [j for j in jobs if j.gpus]
    total_gpu = sum(j.gpu_seconds for j in sized) or 1.0
    by_status = []
    for status in STATUSES.values():
        mine = [j for j in sized if j.status == status]
        gpu = sum(j.gpu_seconds for j in mine)
        by_status.append(
            StatusRow(
                status, len(mine), len(mine) / max(len(sized), 1), gpu / 3600, gpu / total_gpu
            )
        )
    by_size = []
    for k, (_, _, label) in enumerate(SIZE_BUCKETS):
        mine = [j for j in sized if _bucket(j.gpus or 0) == k]
        attempts = sum(len(j.attempts) for j in mine)
        failed = sum(_failed_attempts(j) for j in mine)
        by_size.append(
            SizeRow(
                label,
                len(mine),
                sum(j.status == "Unsuccessful" for j in mine) / max(len(mine), 1),
                attempts / max(len(mine), 1),
                failed / max(attempts, 1),
            )
        )
    locality = []
    for k, (_, _, label) in enumerate(SIZE_BUCKETS):
        if k == 0:
            continue  # one GPU is always on one server
        spread: dict[int, list[float]] = {}
        for j in sized:
            if _bucket(j.gpus or 0) != k or (q := j.queued_seconds) is None:
                continue
            first = next(a for a in j.attempts if a.gpus > 0)
            spread.setdefault(first.servers, []).append(q / 60)
        for servers in sorted(spread):
            waits = spread[servers]
            locality.append(LocalityRow(label, servers, len(waits), statistics.median(waits)))
    return PhillyAnalysis(len(sized), by_status, by_size, locality)
