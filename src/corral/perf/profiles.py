"""User-measured throughput profiles, merged over the bundled Gavel table.

Two formats are read:

* **CSV** with the header ``job_type,gpu_type,num_gpus,steps_per_second`` and
  an optional ``consolidated`` column (``true``/``false``, default true: the
  gang ran on one server). One row per measurement, e.g.::

      job_type,gpu_type,num_gpus,steps_per_second
      my-bert,A100,1,41.5
      my-bert,A100,4,150.2
      my-bert,T4,1,6.1

* **JSON** in Gavel's own layout (``{"v100": {"('ResNet-50', 1)": {"null":
  steps/s, ...}}}``), as its profiler writes it.

A user row replaces the bundled value for the same (job type, GPU type,
GPU count, consolidation); new GPU types (A100, H100, T4 ...) and new job
types simply extend the table. Every bad row is reported with file, line and
field.
"""

from __future__ import annotations

import json
from pathlib import Path

from corral.errors import InputError
from corral.perf.throughputs import ThroughputTable, gavel_throughputs, parse_gavel_throughputs
from corral.traces.rows import RowChecker, read_text_frame, require_columns

PROFILE_COLUMNS = ["job_type", "gpu_type", "num_gpus", "steps_per_second"]
_TRUE = {"true", "1", "yes", "y", ""}
_FALSE = {"false", "0", "no", "n"}


def load_profiles(path: str | Path, base: ThroughputTable | None = None) -> ThroughputTable:
    """The bundled table (or ``base``) with the measurements of ``path`` merged in."""
    source = str(path)
    if not Path(source).is_file():
        raise InputError(source, None, None, "no such profile file")
    merged = _copy(base if base is not None else gavel_throughputs())
    extra = _read_json(source) if source.endswith(".json") else _read_csv(source)
    for key, table in extra.alone.items():
        merged.alone.setdefault(key, {}).update(table)
    for key, pairs in extra.paired.items():
        merged.paired.setdefault(key, {}).update(pairs)
    return merged


def _copy(table: ThroughputTable) -> ThroughputTable:
    return ThroughputTable(
        alone={k: dict(v) for k, v in table.alone.items()},
        paired={k: dict(v) for k, v in table.paired.items()},
    )


def _read_json(path: str) -> ThroughputTable:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, None, f"not valid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise InputError(path, 1, None, "expected an object keyed by GPU type")
    try:
        return parse_gavel_throughputs(raw)
    except (ValueError, SyntaxError, KeyError, TypeError, IndexError) as exc:
        raise InputError(
            path, None, None, f"not in Gavel's throughput layout ({type(exc).__name__}: {exc})"
        ) from None


def _read_csv(path: str) -> ThroughputTable:
    raw, first = read_text_frame(path)
    require_columns(path, raw, PROFILE_COLUMNS)
    check = RowChecker(path, raw, first, skip_bad=False)
    job_type = check.text("job_type")
    gpu_type = check.text("gpu_type")
    gpus = check.number("num_gpus", integer=True, minimum=1)
    rate = check.number("steps_per_second", positive=True)
    consolidated = [True] * len(raw)
    if "consolidated" in raw.columns:
        for row, value in enumerate(raw["consolidated"].astype(str).str.strip().str.lower()):
            if value not in _TRUE | _FALSE:
                line = int(raw["__row"].iloc[row]) + first
                problem = f"expected true or false, got '{value}'"
                raise InputError(path, line, "consolidated", problem)
            consolidated[row] = value in _TRUE
    table = ThroughputTable()
    for name, gtype, count, steps, cons in zip(
        job_type, gpu_type, gpus, rate, consolidated, strict=True
    ):
        key = (gtype.upper(), cons)
        table.alone.setdefault(key, {})[(name, int(count))] = float(steps)
    return table
