"""Synthetic workloads: Poisson arrivals at a target offered load.

Durations and GPU counts are drawn together (as pairs) from the real Philly
trace, so the heavy tail and the correlation between size and length are
kept. Exponential gaps are then scaled so that the jobs actually drawn demand
``load`` x the cluster's GPU-seconds over the submission span (the offered
load as every report defines it); scaling to the sample rather than to the
population mean matters because Philly's tail makes the sample mean of a few
thousand jobs miss by tens of percent. Jobs wider than the cluster are not
drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from corral.errors import CorralError
from corral.model.jobs import JobTable
from corral.traces.philly import load_philly


@dataclass(frozen=True)
class SyntheticSpec:
    jobs: int = 1000
    load: float = 0.8
    seed: int = 0

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> SyntheticSpec:
        """``synthetic`` or ``synthetic:jobs=500,load=0.9[,seed=3]``."""
        values = parse_generator_args(text, ("jobs", "load", "seed"))
        spec = cls(
            jobs=int(values.get("jobs", cls.jobs)),
            load=values.get("load", cls.load),
            seed=int(values.get("seed", seed)),
        )
        if spec.jobs < 1 or not spec.load > 0:
            raise CorralError(f"--trace {text}: jobs must be >= 1 and load > 0")
        return spec


def parse_generator_args(text: str, keys: tuple[str, ...]) -> dict[str, float]:
    """The numeric ``key=value`` list after the colon of ``name:k=v,...`` (or the
    whole text when it has no name: ``k=v,...``, as a program passes it)."""
    name, colon, args = text.partition(":")
    if not colon:  # (read as a name, the list was ignored: every value its default)
        name, args = "name", text
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in args.split(","))):
        key, eq, value = part.partition("=")
        if not eq or key not in keys:
            wanted = ",".join(f"{k}=..." for k in keys)
            raise CorralError(f"--trace {text}: expected {name}:{wanted}, got '{part}'")
        try:
            values[key] = float(value)
        except ValueError:
            raise CorralError(f"--trace {text}: '{key}' must be a number") from None
    return values


def philly_pairs() -> tuple[np.ndarray, np.ndarray]:
    """(duration, GPUs) of every Philly job."""
    df = load_philly().df
    return df["duration"].to_numpy(), df["num_gpus"].to_numpy()


def generate(spec: SyntheticSpec, total_gpus: int) -> JobTable:
    durations, gpus = philly_pairs()
    fits = gpus <= total_gpus
    durations, gpus = durations[fits], gpus[fits]
    rng = np.random.default_rng(spec.seed)
    pick = rng.integers(0, len(durations), size=spec.jobs)
    work = float(np.sum(durations[pick] * gpus[pick]))
    arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0, size=spec.jobs - 1))))
    if spec.jobs > 1:
        arrivals *= work / (spec.load * total_gpus) / arrivals[-1]
    df = pd.DataFrame(
        {
            "job_id": [f"syn-{k}" for k in range(spec.jobs)],
            "submit_time": arrivals,
            "num_gpus": gpus[pick],
            "duration": durations[pick],
        }
    )
    return JobTable(df, source=f"synthetic(jobs={spec.jobs}, load={spec.load}, seed={spec.seed})")
