"""The notebook page (docs/experiments.md): its Python cells, run in order in a
fresh folder, make the result, the tables and the figures it says they do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[1] / "docs" / "experiments.md"


def test_the_notebook_pages_cells_run_in_order(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    cells = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(cells) >= 4
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__notebook__"}
    for k, cell in enumerate(cells):
        exec(compile(cell, f"{PAGE.name} cell {k + 1}", "exec"), namespace)
    results = namespace["results"]
    assert len(results.runs) == 27 and results.ok  # type: ignore[attr-defined]
    figures = tmp_path / "runs" / "first-experiment" / "figures"
    for name in ("avg_jct.pdf", "avg_jct.png", "preemptions.pdf", "waits.pdf"):
        assert (figures / name).exists(), name
    # the command the page prints is the one the result records
    record = (tmp_path / "runs" / "first-experiment" / "provenance.json").read_text()
    assert "corral sweep --policies" in record and "--failure-rate 0.02" in record
