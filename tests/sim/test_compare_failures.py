"""A comparison where one policy crashes: the others' results, CSV and report are
written, the crashed run leaves an error row (what it raised, the line of the
policy that raised, its traceback's file), and the command exits non-zero with
one line that says so."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from corral.cli.app import app

CRASHING = """
from corral.policies.fifo import Fifo


class Crashes(Fifo):
    name = "crashes"
    description = "FIFO that divides by zero once a job has finished"

    def schedule(self, state):
        if state.finished:
            return 1 / 0
        return super().schedule(state)
"""


def run_with_a_crashing_policy(tmp_path: Path, *args: str) -> tuple[Path, str]:
    """Run ``corral ARGS`` on 0.17 of Philly, with the crashing plugin as the policy
    ``{plugin}``; the plugin's path and the command's one-line error."""
    plugin = tmp_path / "crashes.py"
    plugin.write_text(CRASHING)
    common = ["--trace", "philly", "--cluster", "philly", "--cluster-scale", "0.17"]
    words = [a.format(plugin=plugin) for a in args]
    result = CliRunner().invoke(app, [words[0], *common, *words[1:]])
    assert result.exit_code != 0
    return plugin, str(result.exception)


@pytest.mark.parametrize("parallel", ["1", "2"])
def test_one_crashing_policy_leaves_the_others_results(tmp_path: Path, parallel: str) -> None:
    out = tmp_path / "out"
    plugin, message = run_with_a_crashing_policy(
        tmp_path, "compare", "--max-jobs", "200",
        "--policies", "fifo,{plugin}:Crashes,las,las[quantum=60,label=las-1min]",
        "--parallel", parallel, "--format", "both", "--out", str(out),
    )  # fmt: skip
    assert "\n" not in message and message.startswith("1 of 4 policies failed")
    assert "ZeroDivisionError" in message and f"{plugin}:11" in message
    table = pd.read_csv(out / "comparison.csv")
    assert list(table["policy"]) == ["fifo", "crashes", "las", "las-1min"]
    crashed = table.set_index("policy").loc["crashes"]
    assert crashed["status"] == "error" and crashed["error"].startswith("ZeroDivisionError")
    assert crashed["raised_at"].startswith(f"{plugin}:11 (schedule)")
    assert "1 / 0" in (out / crashed["log"]).read_text()
    assert table.set_index("policy").loc["fifo", "jobs_finished"] == 200
    for policy in ("fifo", "las", "las-1min"):  # (the variant too, in its own folder)
        assert json.loads((out / policy / "summary.json").read_text())["jobs_finished"] == 200
    page = (out / "report.html").read_text()
    assert "Runs that failed" in page and "ZeroDivisionError" in page
    assert "Runs that failed" in (out / "report.md").read_text()


def test_a_sweep_keeps_the_runs_that_did_not_crash(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    plugin, message = run_with_a_crashing_policy(
        tmp_path, "sweep", "--max-jobs", "100", "--policies", "fifo,{plugin}:Crashes",
        "--loads", "0.5,0.9", "--parallel", "2", "--out", str(out),
    )  # fmt: skip
    assert "\n" not in message and message.startswith("2 of 4 runs failed")
    results = pd.read_csv(out / "results.csv")
    crashed = results[results["policy"] == "crashes"]
    assert len(crashed) == 2 and (crashed["status"] == "error").all()
    assert crashed["raised_at"].str.startswith(f"{plugin}:11").all()
    for run in crashed["run"]:
        assert "ZeroDivisionError" in (out / run / "error.log").read_text()
    means = pd.read_csv(out / "by_point.csv")
    assert list(means["policy"]) == ["fifo", "fifo"] and (means["seeds"] == 1).all()
    assert (results[results["policy"] == "fifo"]["jobs_finished"] == 100).all()
    assert "runs that failed" in (out / "report.md").read_text()


def test_a_crashing_policy_in_sim_leaves_its_traceback_in_the_output(tmp_path: Path) -> None:
    """One run's folder is the output itself: its error.log is there, and the one line
    names it (not a folder of the run's own)."""
    out = tmp_path / "one"
    _, message = run_with_a_crashing_policy(
        tmp_path, "sim", "--max-jobs", "100", "--policy", "{plugin}:Crashes", "--out", str(out)
    )
    assert "\n" not in message and message.startswith("1 of 1 policies failed")
    assert f"tracebacks in {out / 'error.log'}" in message
    assert "1 / 0" in (out / "error.log").read_text()
    assert (out / "provenance.json").exists()
