"""Writing a run's results: ``jobs.csv``, ``summary.json`` and ``timeline.csv``.

Both engines write through :func:`write_outputs`, so a gang-engine run and a
round-model run (Hare's) carry the same files, columns and keys, and
``corral compare`` puts them side by side. ``jobs.csv`` depends only on the
inputs and the seed (byte for byte); timing figures such as ``wall_s`` go to
``summary.json`` only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from corral.sim.result import SimResult


@dataclass
class RunOutput:
    """What either engine's run produces: per-job rows, a timeline and a summary."""

    jobs: pd.DataFrame
    timeline: pd.DataFrame
    summary: dict[str, Any]


def write_outputs(output: RunOutput, out_dir: str | Path) -> dict[str, Any]:
    """Write a run's three files; its summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    output.jobs.to_csv(out / "jobs.csv", index=False, float_format="%.3f")
    output.timeline.to_csv(out / "timeline.csv", index=False, float_format="%.4f")
    (out / "summary.json").write_text(json.dumps(output.summary, indent=2) + "\n", encoding="utf-8")
    return output.summary


PARQUET_HINT = "Parquet output needs pyarrow: pip install 'corral[parquet]'"


def parquet_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def write_parquet_copies(folder: Path, provenance: dict[str, Any] | None = None) -> list[Path]:
    """A ``.parquet`` beside every CSV under ``folder`` (typed columns, compressed:
    a million jobs' rows load in a fraction of the CSV's time), with the run's
    provenance in each file's metadata (``corral.provenance``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    written = []
    for csv in sorted(folder.rglob("*.csv")):
        frame = pd.read_csv(csv)
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if provenance is not None:
            meta = dict(table.schema.metadata or {})
            meta[b"corral.provenance"] = json.dumps(provenance).encode()
            table = table.replace_schema_metadata(meta)
        target = csv.with_suffix(".parquet")
        pq.write_table(table, target)
        written.append(target)
    return written


def sim_output(result: SimResult, extra: dict[str, Any] | None = None) -> RunOutput:
    """A gang-engine run as the common output."""
    from corral.sim.metrics import jobs_frame, summarise, timeline_frame

    return RunOutput(jobs_frame(result), timeline_frame(result), summarise(result, extra))


def write_run(
    result: SimResult, out_dir: str | Path, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    return write_outputs(sim_output(result, extra), out_dir)
