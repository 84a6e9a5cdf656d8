"""Gavel's synthetic workload: typed jobs with Poisson arrivals.

As in Gavel's evaluation: each job's type is drawn uniformly from the
measured types; its run time on the reference GPU (V100) is
60 x 10^U(1.5, 3) s with probability 0.8 and 60 x 10^U(3, 4) s otherwise;
with ``multi=1`` its GPU count is 1, 2, 4 or 8 with probabilities 0.7, 0.1,
0.15, 0.05 (else 1); arrivals are Poisson at ``rate`` jobs per hour. Its work
is that run time x the type's measured V100 steps/s at its size. With
``weights=1`` every job also gets a priority weight drawn from {1, 2, 4, 8}
(Hare's weighted objective; Gavel's jobs all weigh 1). With ``short=1`` run
times are 60 x 10^U(0.5, 1.5) s (3 to 32 minutes), for experiments like
Hare's where most jobs finish within 25 minutes.

``--trace gavel-synthetic:jobs=200,rate=60[,multi=1,weights=1,seed=0]``
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from corral.errors import CorralError
from corral.model.jobs import JobTable
from corral.perf.speeds import SpeedModel
from corral.perf.throughputs import gavel_throughputs
from corral.traces.synthetic import parse_generator_args

SCALES = (1, 2, 4, 8)
SCALE_PROBABILITIES = (0.7, 0.1, 0.15, 0.05)
WEIGHTS = (1.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class GavelWorkload:
    jobs: int = 200
    rate: float = 60.0
    """Arrivals per hour (Poisson)."""
    multi: bool = True
    weights: bool = False
    short: bool = False
    seed: int = 0

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> GavelWorkload:
        values = parse_generator_args(text, ("jobs", "rate", "multi", "weights", "short", "seed"))
        spec = cls(
            jobs=int(values.get("jobs", cls.jobs)),
            rate=values.get("rate", cls.rate),
            multi=bool(values.get("multi", 1.0)),
            weights=bool(values.get("weights", 0.0)),
            short=bool(values.get("short", 0.0)),
            seed=int(values.get("seed", seed)),
        )
        if spec.jobs < 1 or not spec.rate > 0:
            raise CorralError(f"--trace {text}: jobs must be >= 1 and rate > 0")
        return spec


def generate_gavel(spec: GavelWorkload) -> JobTable:
    rng = np.random.default_rng(spec.seed)
    table = gavel_throughputs()
    by_scale = {s: table.runnable_types(s) for s in SCALES}
    n = spec.jobs
    long = rng.random(n) >= 0.8
    minutes = np.where(long, 10 ** rng.uniform(3, 4, n), 10 ** rng.uniform(1.5, 3, n))
    duration = 60.0 * minutes
    if spec.short:
        duration = 60.0 * 10 ** rng.uniform(0.5, 1.5, n)
    gpus = rng.choice(SCALES, size=n, p=SCALE_PROBABILITIES) if spec.multi else np.ones(n, int)
    types = [by_scale[int(g)][int(rng.integers(len(by_scale[int(g)])))] for g in gpus]
    gaps = rng.exponential(3600.0 / spec.rate, size=n)
    arrivals = np.concatenate(([0.0], np.cumsum(gaps[1:])))
    weights = rng.choice(WEIGHTS, size=n) if spec.weights else np.ones(n)
    rates = SpeedModel().reference_rates(types, gpus.tolist())
    df = pd.DataFrame(
        {
            "job_id": [f"gavel-{k}" for k in range(n)],
            "submit_time": arrivals,
            "num_gpus": gpus,
            "duration": duration,
            "total_steps": duration * rates,
            "job_type": types,
            "weight": weights,
        }
    )
    return JobTable(df, source=f"gavel-synthetic(jobs={n}, rate={spec.rate}/h, seed={spec.seed})")
