"""Turning a job table into round-based jobs on a cluster (the input every
round planner reads)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corral.model.cluster import Cluster
from corral.model.jobs import JobTable
from corral.perf.speeds import SpeedModel


@dataclass
class RoundWorkload:
    job_ids: list[str]
    submit: np.ndarray
    weight: np.ndarray
    tasks: np.ndarray
    """Tasks per round (the job's GPU count)."""
    rounds: np.ndarray
    tau: np.ndarray
    """jobs x GPU types: seconds one task takes on a GPU of that type (inf: cannot run)."""
    gpu_type: np.ndarray
    """Type index of each GPU of the cluster."""
    type_names: tuple[str, ...]
    reference_time: np.ndarray
    """Each job's run time on its reference allocation (the trace's duration)."""

    @property
    def n(self) -> int:
        return len(self.submit)

    def capacity(self) -> np.ndarray:
        return np.bincount(self.gpu_type, minlength=len(self.type_names)).astype(np.int64)

    def critical_path(self) -> np.ndarray:
        """Each job's shortest possible run: every round at its fastest type."""
        out: np.ndarray = self.rounds * self.tau.min(axis=1)
        return out


def build_workload(
    jobs: JobTable,
    cluster: Cluster,
    speeds: SpeedModel | None = None,
    round_seconds: float = 60.0,
    max_rounds: int = 50,
) -> RoundWorkload:
    """Split each job into rounds of about ``round_seconds`` on its reference
    allocation (at most ``max_rounds``); a task's time on type ``t`` is the
    round's steps over the gang's measured steps/s there (the g tasks of a
    round together make the gang's progress)."""
    from corral.model.state import SchedulerState

    state = SchedulerState(cluster, jobs, speeds or SpeedModel())
    speed = state.type_speed
    reference = state.total_steps / state.ref_speed
    rounds = np.clip(np.ceil(reference / round_seconds), 1, max_rounds).astype(np.int64)
    steps_per_round = state.total_steps / rounds
    with np.errstate(divide="ignore"):
        tau = np.where(speed > 0, steps_per_round[:, None] / speed, np.inf)
    return RoundWorkload(
        job_ids=list(state.job_ids),
        submit=state.submit.copy(),
        weight=state.weight.copy(),
        tasks=state.gpus.copy(),
        rounds=rounds,
        tau=tau,
        gpu_type=cluster.gpu_type_id.copy(),
        type_names=cluster.gpu_type_names,
        reference_time=reference,
    )
