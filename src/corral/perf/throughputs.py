"""Measured throughput profiles: steps per second of a job type on a GPU type.

The bundled table is Gavel's (26 job types on V100, P100 and K80 at 1, 2, 4
and 8 GPUs, consolidated on one server or spread, alone or paired with
another job on the same GPUs). Keys are ``(job_type, scale_factor)``.
"""

from __future__ import annotations

import ast
import gzip
import json
from dataclasses import dataclass, field
from functools import lru_cache

from corral.data import data_path
from corral.errors import CorralError

PAIR_GPU = ("V100", True)
"""The GPU (type, consolidated) whose pair measurements policies that pack jobs
read: Gavel measured pairs on V100s only."""


@dataclass
class ThroughputTable:
    """steps/s alone: ``alone[(gpu_type, consolidated)][(job_type, scale)]``."""

    alone: dict[tuple[str, bool], dict[tuple[str, int], float]] = field(default_factory=dict)
    paired: dict[
        tuple[str, bool], dict[tuple[str, int], dict[tuple[str, int], tuple[float, float]]]
    ] = field(default_factory=dict)

    @property
    def job_types(self) -> list[str]:
        names = {key[0] for table in self.alone.values() for key in table}
        return sorted(names)

    def runnable_types(self, scale: int) -> list[str]:
        """Job types measured at ``scale`` GPUs with a positive speed on every GPU type
        (Gavel records ResNet-50 at batch size 128 on 2+ K80s as 0: out of memory)."""
        tables = [v for (_, consolidated), v in self.alone.items() if consolidated]
        names = {t for table in tables for t, s in table if s == scale}
        return sorted(t for t in names if all(v.get((t, scale), 0.0) > 0 for v in tables))

    def steps_per_second(
        self, job_type: str, gpu_type: str, scale: int = 1, consolidated: bool = True
    ) -> float:
        table = self.alone.get((gpu_type.upper(), consolidated))
        if table is None:
            raise CorralError(f"no throughput measurements for GPU type '{gpu_type}'")
        try:
            return table[(job_type, scale)]
        except KeyError:
            raise CorralError(
                f"no throughput for job type '{job_type}' at {scale} GPU(s) on {gpu_type}"
            ) from None

    def relative_pair(
        self,
        a: tuple[str, int],
        b: tuple[str, int],
        gpu: tuple[str, bool] = PAIR_GPU,
    ) -> tuple[float, float] | None:
        """Throughputs of ``a`` and ``b`` (``(job_type, GPUs)``) packed on one GPU
        set, each relative to running alone; None when the pair was not measured.
        ``(0.0, 0.0)`` means measured not to fit together (out of GPU memory)."""
        alone = self.alone.get(gpu, {})
        measured = self.paired.get(gpu, {}).get(a, {}).get(b)
        if measured is None or a not in alone or b not in alone:
            return None
        if min(measured) <= 0 or alone[a] <= 0 or alone[b] <= 0:
            return 0.0, 0.0
        return measured[0] / alone[a], measured[1] / alone[b]


def parse_gavel_throughputs(raw: dict) -> ThroughputTable:
    table = ThroughputTable()
    keys: dict[str, tuple[str, int]] = {}

    def job(text: str) -> tuple[str, int]:
        """A key such as ``"('ResNet-18 (batch size 16)', 1)"``, parsed once: the
        same hundred or so recur ten thousand times, and parsing each is most of
        the cost of loading the table (which every simulation does)."""
        key = keys.get(text)
        if key is None:
            job_type, scale = ast.literal_eval(text)
            key = keys[text] = (str(job_type), int(scale))
        return key

    for gpu_key, entries in raw.items():
        consolidated = not gpu_key.endswith("_unconsolidated")
        gpu_type = gpu_key.removesuffix("_unconsolidated").upper()
        alone: dict[tuple[str, int], float] = {}
        paired: dict[tuple[str, int], dict[tuple[str, int], tuple[float, float]]] = {}
        for job_key, measures in entries.items():
            key = job(job_key)
            alone[key] = float(measures["null"])
            paired[key] = {
                job(other): (float(v[0]), float(v[1]))
                for other, v in measures.items()
                if other != "null"
            }
        table.alone[(gpu_type, consolidated)] = alone
        table.paired[(gpu_type, consolidated)] = paired
    return table


@lru_cache(maxsize=1)
def gavel_throughputs() -> ThroughputTable:
    """The bundled Gavel measurements (loaded once)."""
    with gzip.open(data_path("gavel", "throughputs.json.gz"), "rt", encoding="utf-8") as fh:
        return parse_gavel_throughputs(json.load(fh))
