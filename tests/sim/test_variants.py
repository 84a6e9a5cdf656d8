"""Variants: one policy several times in one comparison, each with its own options
and label (an ablation without a subclass)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.errors import CorralError
from corral.sim.variants import Variant, parse_variants, split_entries, variant_options

WORKLOAD = ["--trace", "philly", "--max-jobs", "300", "--cluster", "philly",
            "--cluster-scale", "0.17"]  # fmt: skip


def test_entries_split_at_commas_outside_brackets() -> None:
    assert split_entries("fifo, las[quantum=60,label=a] ,srtf") == [
        "fifo",
        "las[quantum=60,label=a]",
        "srtf",
    ]
    with pytest.raises(CorralError, match="not closed"):
        split_entries("las[quantum=60")
    with pytest.raises(CorralError, match="without its"):
        split_entries("las]")


def test_a_variant_is_named_by_its_label_or_as_written() -> None:
    one, two, three = parse_variants("LAS[quantum=60,label=las 1 min],las[quantum=3600],las")
    assert one == Variant("las", "las 1 min", {"quantum": "60"}) and one.folder == "las-1-min"
    assert two.label == "las[quantum=3600]" and two.folder == "las-quantum-3600"
    assert three == Variant("las", "las", {})
    assert Variant("las", "..").folder == "policy" and Variant("las", "../x").folder == "x"
    with pytest.raises(CorralError, match="one folder"):
        parse_variants("las[quantum=60],las[quantum=60]")
    with pytest.raises(CorralError, match="twice"):
        parse_variants("las[quantum=60,quantum=70]")
    with pytest.raises(CorralError, match="expected key=value"):
        parse_variants("las[quantum]")


def test_a_variants_options_come_from_the_policy_its_label_and_its_brackets() -> None:
    pairs = ["las.quantum=600", "mine.quantum=120"]
    assert variant_options(Variant("las", "las"), pairs) == {"quantum": 600.0}
    assert variant_options(Variant("las", "mine"), pairs) == {"quantum": 120.0}
    assert variant_options(Variant("las", "x", {"quantum": "60"}), pairs) == {"quantum": 60.0}
    with pytest.raises(CorralError, match="did you mean 'quantum'"):
        variant_options(Variant("las", "x", {"quantm": "60"}), [])
    with pytest.raises(CorralError, match="must be a number > 0"):
        variant_options(Variant("las", "x", {"quantum": "-1"}), [])


def test_compare_runs_variants_side_by_side(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["compare", *WORKLOAD,
         "--policies", "las[quantum=60,label=las-1min],las[quantum=3600],las,las[label=mine]",
         "--policy-opt", "las.quantum=600", "--policy-opt", "mine.quantum=120",
         "--format", "both", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "comparison.csv").set_index("policy")
    assert list(table.index) == ["las-1min", "las[quantum=3600]", "las", "mine"]
    assert table.loc["las-1min", "preemptions"] > table.loc["las[quantum=3600]", "preemptions"]
    options = json.loads((tmp_path / "provenance.json").read_text())["policy_options"]
    assert options == {
        "las-1min": {"quantum": 60.0},
        "las[quantum=3600]": {"quantum": 3600.0},
        "las": {"quantum": 600.0},
        "mine": {"quantum": 120.0},
    }
    for folder in ("las-1min", "las-quantum-3600", "las", "mine"):
        assert (tmp_path / folder / "summary.json").exists()
    assert "las[quantum=3600]" in (tmp_path / "report.md").read_text()
    assert "las[quantum=3600]" in result.output  # (not read as markup by the table)


def test_an_error_about_a_variant_shows_its_brackets(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "corral.cli", "compare", "--trace", "philly", "--max-jobs", "50",
         "--policies", "las[quantum=-1]", "--out", str(tmp_path)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--policies 'las[quantum=-1]'" in done.stderr, done.stderr


def test_a_sweep_runs_variants_from_the_command_line_or_its_grid_file(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("policies: ['las[quantum=60,label=las-1min]', las]\nloads: [0.5, 0.9]\n")
    out = tmp_path / "sweep"
    result = CliRunner().invoke(
        app,
        ["sweep", *WORKLOAD, "--grid", str(grid), "--policy-opt", "las.quantum=600",
         "--runner", "serial", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    results = pd.read_csv(out / "results.csv")
    assert sorted(set(results["policy"])) == ["las", "las-1min"]
    assert set(results["run"].str.split("/").str[0]) == {"las", "las-1min"}
    quick = results[results["policy"] == "las-1min"].set_index("load")["preemptions"]
    slow = results[results["policy"] == "las"].set_index("load")["preemptions"]
    assert (quick >= slow).all() and (quick > slow).any()  # a shorter quantum preempts more
    options = json.loads((out / "provenance.json").read_text())["policy_options"]
    assert options == {"las-1min": {"quantum": 60.0}, "las": {"quantum": 600.0}}
