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


@pytest.mark.long
def test_the_pages_whole_workflow_cells_then_its_commands(tmp_path: Path, monkeypatch) -> None:
    """The page in order as a reader follows it: its Python cells (the experiment,
    the tables, ``plot``), then its shell commands: ``corral rerun`` after the
    figures are drawn says the result is the same, and the same experiment on the
    command line makes the same tables as the one from Python."""
    import shlex

    import pandas as pd
    from typer.testing import CliRunner

    from corral.cli import app

    pytest.importorskip("matplotlib")
    text = PAGE.read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__notebook__"}
    for k, cell in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
        exec(compile(cell, f"{PAGE.name} cell {k + 1}", "exec"), namespace)
    commands = [
        shlex.split(line)
        for block in re.findall(r"```bash\n(.*?)```", text, re.S)
        for line in block.replace("\\\n", " ").splitlines()
        if line.strip().startswith("corral ")
    ]
    assert [c[1] for c in commands] == ["rerun", "sweep", "plot"]
    said = []
    for words in commands:
        words = [w.replace("first-experiment", "cli") if words[1] != "rerun" else w for w in words]
        done = CliRunner().invoke(app, words[1:])
        assert done.exit_code == 0, f"{' '.join(words)}: {done.output}"
        said.append(done.output)
    assert "identical:" in said[0]  # (the figures drawn into the result are not outputs)
    ours = pd.read_csv(tmp_path / "runs" / "first-experiment" / "by_point.csv")
    theirs = pd.read_csv(tmp_path / "runs" / "cli" / "by_point.csv")
    pd.testing.assert_frame_equal(ours, theirs)
    assert (tmp_path / "runs" / "cli" / "figures" / "avg_jct.png").exists()
