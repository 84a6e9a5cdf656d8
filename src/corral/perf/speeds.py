"""How fast a job runs on the GPUs it was given: GPU types, gang size and locality.

A job whose type has measurements (Gavel's table, or the user's profiles)
runs at the measured steps/s of its type on the gang's GPU type at its GPU
count. Rules where the table is silent, stated once here:

* **GPU count not measured** (e.g. 16 GPUs): the measurement at the largest
  measured count below it, scaled linearly (weak scaling).
* **GPU type not measured** (Philly's unnamed types, Alibaba's MISC): the
  reference type's value (V100, Gavel's reference), so typed jobs behave as
  they would with no heterogeneity data.
* **Mixed GPU types in one gang**: synchronous data parallelism runs at the
  pace of its slowest member, so the gang runs at the slowest type's speed for
  its size, times ``mixed_sync`` when the types have different figures (the
  extra synchronisation cost of unequal workers; 0.9 by default, an
  assumption). This is why mixing K80s into a
  V100 job buys nothing.
* **Spread over servers**: the consolidated speed times the locality model's
  factor (Pollux's measurements where it has the model). Gavel's
  "unconsolidated" figures are not used: they measure one GPU per server
  (0.1-0.5x of consolidated for most 8-GPU types), far harsher than a gang
  split over two or three servers.

Jobs without a measured type (``generic``) keep their reference speed on
every GPU type, times the locality factor: heterogeneity is unknown for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from corral.errors import CorralError
from corral.model.cluster import Cluster
from corral.perf.communication import Span, model_profile
from corral.perf.locality import LocalityModel
from corral.perf.throughputs import ThroughputTable, gavel_throughputs

REFERENCE_GPU = "V100"
"""Gavel's reference GPU type: a typed trace job's duration is its time on it."""


@dataclass
class SpeedModel:
    table: ThroughputTable = field(default_factory=gavel_throughputs)
    locality: LocalityModel = field(default_factory=LocalityModel)
    mixed_sync: float = 0.9
    reference_gpu: str = REFERENCE_GPU

    def __post_init__(self) -> None:
        if not 0 < self.mixed_sync <= 1:
            raise CorralError(f"mixed-type sync factor must be in (0, 1], got {self.mixed_sync}")
        self._measured_types = {name for name, _ in self.table.alone}
        self._cache: dict[tuple[str, str, int, bool], float | None] = {}

    def knows(self, job_type: str) -> bool:
        return self.throughput(job_type, self.reference_gpu, 1) is not None

    def throughput(
        self, job_type: str, gpu_type: str, num_gpus: int, consolidated: bool = True
    ) -> float | None:
        """Measured steps/s of the whole gang (None: the job type is not measured)."""
        key = (job_type, gpu_type, num_gpus, consolidated)
        if key not in self._cache:
            self._cache[key] = self._lookup(job_type, gpu_type, num_gpus, consolidated)
        return self._cache[key]

    def measured_as(self, gpu_type: str) -> str:
        """The measured type whose figures a GPU type uses (itself, or the reference)."""
        gpu = gpu_type.upper()
        return gpu if gpu in self._measured_types else self.reference_gpu

    def _lookup(
        self, job_type: str, gpu_type: str, num_gpus: int, consolidated: bool
    ) -> float | None:
        table = self.table.alone.get((self.measured_as(gpu_type), consolidated))
        if table is None:
            return None
        value = table.get((job_type, num_gpus))
        if value is not None:
            return value
        scales = sorted(s for t, s in table if t == job_type)
        if not scales:
            return None
        below = [s for s in scales if s <= num_gpus]
        base = below[-1] if below else scales[0]
        return table[(job_type, base)] * num_gpus / base

    def reference_speed(self, job_type: str, num_gpus: int) -> float | None:
        """Steps/s consolidated on the reference type: what a trace duration means."""
        return self.throughput(job_type, self.reference_gpu, num_gpus)

    def reference_rates(self, job_types: Sequence[str], gpus: Sequence[int]) -> np.ndarray:
        """Steps/s of each job on the reference type (NaN where the type is not measured).

        A typed job known only by a duration (a trace run time) does
        duration x this rate steps of work, as in Gavel.
        """
        return np.array(
            [
                np.nan if (r := self.reference_speed(t, int(g))) is None else r
                for t, g in zip(job_types, gpus, strict=True)
            ],
            dtype=np.float64,
        )

    def type_speeds(
        self, job_types: Sequence[str], gpus: np.ndarray, ref_speed: np.ndarray, cluster: Cluster
    ) -> np.ndarray:
        """jobs x GPU types: each job's steps/s consolidated on each of the cluster's types.

        Unmeasured jobs get their reference speed on every type. Policies that
        weigh heterogeneity (Gavel, AlloX, Themis, Hare) read this matrix.
        """
        names = cluster.gpu_type_names
        out = np.repeat(ref_speed[:, None], len(names), axis=1).astype(np.float64)
        memo: dict[tuple[str, int], list[float] | None] = {}
        for i, (job_type, g) in enumerate(zip(job_types, gpus.tolist(), strict=True)):
            key = (job_type, g)
            if key not in memo:
                measured = [self.throughput(job_type, t, g) for t in names]
                memo[key] = None if measured[0] is None else [float(v or 0.0) for v in measured]
            row = memo[key]
            if row is not None:
                out[i] = row
        return out

    def size_factor(
        self, cluster: Cluster, job_type: str, model: str, asked: int, gpus: int, batch: int = 0
    ) -> float:
        """Speed on ``gpus`` GPUs (fewest nodes) relative to the ``asked`` ones, at
        the job's global batch (a step does the same work at every size).

        Policies that resize jobs (Optimus, Pollux) pass it with their plans.
        A measured job type needs none (1.0): :meth:`gang_speed` reads the table
        at the new size. A model the communication model knows scales as its
        step time predicts (the local batch shrinking as GPUs are added); any
        other job scales linearly, the usual optimistic assumption.
        """
        if gpus == asked:
            return 1.0
        return float(self.size_factors(cluster, job_type, model, asked, np.array([gpus]), batch)[0])

    def scales_linearly(self, job_type: str, model: str) -> bool:
        """Nothing is known of how the job scales (no measured type, no model the
        communication model knows): it is taken to scale linearly."""
        return not (job_type and self.knows(job_type)) and not (
            model and model_profile(model) is not None
        )

    def size_factors(
        self,
        cluster: Cluster,
        job_type: str,
        model: str,
        asked: int,
        sizes: np.ndarray,
        batch: int = 0,
    ) -> np.ndarray:
        """:meth:`size_factor` at each of ``sizes`` (linear scaling at once)."""
        if job_type and self.knows(job_type):
            return np.ones(len(sizes))
        profile = model_profile(model) if model else None
        if profile is None:
            return np.asarray(sizes, dtype=np.float64) / asked
        node = int(cluster.node_gpus.max())
        total = batch or profile.typical_batch * asked

        def step(w: float) -> float:
            return profile.step_time(
                Span.packed(int(w), node), cluster.links, local_batch=total / w
            )

        return step(asked) / np.array([step(w) for w in sizes])

    def gang_speed(
        self,
        cluster: Cluster,
        gpus: Sequence[int],
        job_type: str,
        model: str,
        ref_speed: float,
    ) -> float:
        """Steps/s of a gang on these GPUs."""
        locality = self.locality.factor(cluster, gpus, model) if len(gpus) > 1 else 1.0
        if not job_type or not self.knows(job_type):
            return ref_speed * locality
        names = cluster.gpu_type_names
        type_of = cluster.gpu_type_id
        # sorted distinct types; a set, not numpy's unique: a gang is a few GPUs
        type_ids = sorted({int(type_of[g]) for g in gpus})
        n = len(gpus)
        speed = min(float(self.throughput(job_type, names[t], n) or 0.0) for t in type_ids)
        if len({self.measured_as(names[t]) for t in type_ids}) > 1:
            speed *= self.mixed_sync
        return speed * locality
