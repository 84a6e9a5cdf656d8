"""The canonical job table and the job life cycle.

Every trace loader produces a :class:`JobTable`: one row per job, sorted by
submit time, with the columns in :data:`COLUMNS`. Time is in seconds from the
start of the trace; work is in *steps* (a job that is only known by its
duration becomes a generic job doing 1 step/s on its reference allocation, so
``total_steps == duration``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from corral.errors import CorralError
from corral.model.status import JobStatus

if TYPE_CHECKING:
    from corral.perf.speeds import SpeedModel

GENERIC_JOB_TYPE = "generic"

COLUMNS: dict[str, str] = {
    "job_id": "str: unique id",
    "submit_time": "float: seconds from trace start",
    "num_gpus": "int: GPUs the job asks for (its gang size)",
    "duration": "float: run time on its reference allocation, seconds (NaN when unknown)",
    "total_steps": "float: work, in steps (a measured job type known only by its duration "
    "does duration x its reference steps/s)",
    "job_type": "str: throughput-profile key ('generic' when only a duration is known)",
    "model": "str: model name when known (locality data), else ''",
    "vc": "str: virtual cluster / queue",
    "user": "str: owner",
    "weight": "float: priority weight (weighted JCT)",
    "priority": "int: priority tier, higher runs first whatever the policy's key (0 when "
    "the trace has none, as real traces do)",
    "batch_size": "int: global batch size when known (training curves, scaling), else 0",
    "batch_mode": "str: batch-size schedule ('static'; Shockwave's traces also name "
    "'gns' or 'accordion', carried and reported, not modelled)",
    "gpu_type": "str: the GPU type the trace says the job asked for or ran on ('' when "
    "any); carried and reported, not a placement constraint",
    "checkpoints": "bool: a preempted job resumes from where it stopped (True, the papers' "
    "assumption); False: it restarts from scratch, and is not preempted again before it "
    "has run twice its longest lost attempt",
}

_DEFAULTS: dict[str, object] = {
    "job_type": GENERIC_JOB_TYPE,
    "model": "",
    "vc": "default",
    "user": "",
    "weight": 1.0,
    "priority": 0,
    "batch_mode": "static",
    "batch_size": 0,
    "gpu_type": "",
    "checkpoints": True,
}


class JobTable:
    """An immutable, validated table of jobs sorted by submit time."""

    def __init__(self, df: pd.DataFrame, source: str = "<memory>") -> None:
        self.source = source
        self.derived_steps = "total_steps" not in df.columns
        """True when the work was derived from durations (the trace gave no steps)."""
        self.df = _normalise(df, source)

    def __len__(self) -> int:
        return len(self.df)

    def __repr__(self) -> str:
        return f"JobTable({len(self)} jobs from {self.source})"

    @classmethod
    def from_records(cls, records: list[dict[str, object]], source: str = "<memory>") -> JobTable:
        return cls(pd.DataFrame.from_records(records), source)

    def head(self, n: int) -> JobTable:
        return self._replace(self.df.iloc[:n].copy())

    def _replace(self, df: pd.DataFrame) -> JobTable:
        out = JobTable(df, self.source)
        out.derived_steps = self.derived_steps
        return out

    def with_speeds(self, speeds: SpeedModel) -> JobTable:
        """Work re-derived from durations with other measurements (e.g. the user's
        profiles); a table whose trace gave steps is returned as it is."""
        if not self.derived_steps:
            return self
        df = self.df.copy()
        df["total_steps"] = steps_from_duration(df, speeds)
        return self._replace(df)

    def gpu_seconds(self) -> float:
        """Work demanded in GPU-seconds on reference allocations."""
        return float((self.df["duration"] * self.df["num_gpus"]).sum())

    def span(self) -> float:
        """Time from first to last submission (the window load is measured over)."""
        if len(self) < 2:
            return 0.0
        return float(self.df["submit_time"].iloc[-1] - self.df["submit_time"].iloc[0])

    def offered_load(self, total_gpus: int) -> float:
        """GPU-seconds demanded / GPU-seconds available over the submission span.

        With a single job (no span) the job's own duration is the window.
        """
        span = self.span()
        if span <= 0:
            span = float(self.df["duration"].max()) if len(self) else 0.0
        if span <= 0 or total_gpus <= 0:
            return 0.0
        return self.gpu_seconds() / (total_gpus * span)

    def at_load(self, load: float, total_gpus: int) -> JobTable:
        """The same jobs arriving faster or slower, so the offered load on
        ``total_gpus`` GPUs is ``load``: gaps between submissions are scaled
        by one factor (the arrival pattern keeps its shape, as load sweeps in
        Tiresias' and Gavel's evaluations do)."""
        if not load > 0:
            raise CorralError(f"a target load must be > 0, got {load}")
        now = self.offered_load(total_gpus)
        if now <= 0 or self.span() <= 0:
            raise CorralError(
                f"trace '{self.source}' has no arrival span to rescale to load {load}"
            )
        df = self.df.copy()
        first = float(df["submit_time"].iloc[0])
        df["submit_time"] = first + (df["submit_time"] - first) * (now / load)
        out = self._replace(df)
        out.source = self.source
        return out


def steps_from_duration(df: pd.DataFrame, speeds: SpeedModel | None = None) -> np.ndarray:
    """Work of jobs known by duration: duration x reference steps/s for measured types."""
    if speeds is None:
        from corral.perf.speeds import SpeedModel  # perf builds on the model, not the reverse

        speeds = SpeedModel()
    duration = df["duration"].to_numpy(dtype=np.float64)
    types = df["job_type"].fillna(GENERIC_JOB_TYPE).astype(str).tolist()
    rates = speeds.reference_rates(types, df["num_gpus"].astype(np.int64).tolist())
    return np.where(np.isnan(rates), duration, duration * rates)


def _normalise(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """Fill defaults, check types and ranges, sort by submit time, start the clock at 0."""
    out = df.copy()
    for column in ("submit_time", "num_gpus"):
        if column not in out:
            raise CorralError(f"{source}: job table lacks the column '{column}'")
    if "duration" not in out and "total_steps" not in out:
        raise CorralError(f"{source}: job table needs 'duration' or 'total_steps'")
    if "duration" not in out:
        out["duration"] = out["total_steps"].astype(float)
    if "total_steps" not in out:
        out["total_steps"] = out["duration"].astype(float)
        if "job_type" in out:
            out["total_steps"] = steps_from_duration(out)
    if "job_id" not in out:
        out["job_id"] = [str(i) for i in range(len(out))]
    for column, default in _DEFAULTS.items():
        if column not in out:
            out[column] = default  # type: ignore[call-overload]  # scalars broadcast
    out = out[list(COLUMNS)]
    out["job_id"] = out["job_id"].astype(str)
    out["submit_time"] = out["submit_time"].astype(float)
    out["num_gpus"] = out["num_gpus"].astype(np.int64)
    out["duration"] = out["duration"].astype(float)
    out["total_steps"] = out["total_steps"].astype(float)
    out["weight"] = out["weight"].astype(float)
    out["priority"] = out["priority"].fillna(0).astype(np.int64)
    out["batch_size"] = out["batch_size"].fillna(0).astype(np.int64)
    out["checkpoints"] = out["checkpoints"].fillna(True).astype(bool)
    for column in ("job_type", "model", "vc", "user", "batch_mode", "gpu_type"):
        out[column] = out[column].fillna("").astype(str)
    if out["job_id"].duplicated().any():
        dup = out.loc[out["job_id"].duplicated(), "job_id"].iloc[0]
        raise CorralError(f"{source}: job id '{dup}' appears more than once")
    if (out["num_gpus"] < 1).any():
        raise CorralError(f"{source}: every job needs at least 1 GPU")
    if (out["total_steps"] <= 0).any() or out["total_steps"].isna().any():
        raise CorralError(f"{source}: every job needs a positive amount of work")
    if out["submit_time"].isna().any():
        raise CorralError(f"{source}: every job needs a submit time")
    out = out.sort_values("submit_time", kind="stable").reset_index(drop=True)
    if len(out):
        out["submit_time"] = out["submit_time"] - out["submit_time"].iloc[0]
    return out


__all__ = ["JobStatus", "JobTable"]
