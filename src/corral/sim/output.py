"""Writing a run's results: ``jobs.csv``, ``summary.json`` and ``timeline.csv``.

``jobs.csv`` depends only on the inputs and the seed (byte for byte); timing
figures such as ``wall_s`` go to ``summary.json`` only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corral.sim.engine import SimResult
from corral.sim.metrics import jobs_frame, summarise, timeline_frame


def write_run(
    result: SimResult, out_dir: str | Path, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs_frame(result).to_csv(out / "jobs.csv", index=False, float_format="%.3f")
    timeline_frame(result).to_csv(out / "timeline.csv", index=False, float_format="%.4f")
    summary = summarise(result, extra)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary
