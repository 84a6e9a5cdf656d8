"""corral rerun: a result made again from its provenance, and compared with the first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.errors import CorralError
from corral.sim.rerun import differences, recorded, rerun_args

WORKLOAD = ["--trace", "philly", "--max-jobs", "200", "--cluster", "philly",
            "--cluster-scale", "0.17"]  # fmt: skip


def test_the_recorded_command_writes_elsewhere(tmp_path: Path) -> None:
    record = {"command": "corral compare --trace philly --out runs/a --policies 'las[quantum=60]'"}
    assert rerun_args(record, tmp_path / "b") == [
        "compare", "--trace", "philly", "--policies", "las[quantum=60]",
        "--out", str(tmp_path / "b"),
    ]  # fmt: skip
    assert rerun_args({"command": "corral sim --out=x"}, tmp_path)[-1] == str(tmp_path)
    with pytest.raises(CorralError, match="not one of corral sim"):
        rerun_args({"command": "corral serve --config x"}, tmp_path)
    with pytest.raises(CorralError, match="not a corral result folder"):
        recorded(tmp_path)


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_a_result_made_again_is_identical_and_a_changed_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.chdir(tmp_path)  # (the rerun runs from here, as the first did)
    runner = CliRunner()
    policies = ["--policies", "fifo,las[quantum=60]"]
    extra = ["--loads", "0.5,0.9", "--runner", "serial"] if command == "sweep" else []
    args = [command, *WORKLOAD, *policies, *extra, "--out", "first"]
    monkeypatch.setattr("sys.argv", ["corral", *args])  # (what provenance records)
    made = runner.invoke(app, args)
    assert made.exit_code == 0, made.output
    assert json.loads(Path("first/provenance.json").read_text())["command"].startswith(
        f"corral {command} "
    )
    again = runner.invoke(app, ["rerun", "first", "--out", "second"])
    assert again.exit_code == 0, again.output
    assert "identical" in again.output
    found = differences(Path("first"), Path("second"))
    assert found.identical and len(found.same) >= 5
    # a result whose jobs were changed afterwards is told apart, by file
    jobs = next(Path("first").rglob("jobs.csv"))
    lines = jobs.read_text().splitlines()
    lines[1] = lines[1].replace(",", ",9", 1)
    jobs.write_text("\n".join(lines) + "\n")
    changed = runner.invoke(app, ["rerun", "first", "--out", "third"])
    assert changed.exit_code != 0
    assert "1 file(s) differ" in str(changed.exception)
    assert f"differs: {jobs.relative_to('first').as_posix()}" in changed.output


def test_a_rerun_on_another_trace_of_the_same_name_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fixture = Path(__file__).parents[1] / "fixtures" / "tiny_tiresias.csv"
    Path("trace.csv").write_text(fixture.read_text())
    args = ["sim", "--trace", "trace.csv", "--cluster", "uniform:4x4:V100", "--out", "first"]
    monkeypatch.setattr("sys.argv", ["corral", *args])
    assert CliRunner().invoke(app, args).exit_code == 0
    lines = fixture.read_text().splitlines()
    Path("trace.csv").write_text("\n".join(lines[:-1]) + "\n")  # one job fewer
    again = CliRunner().invoke(app, ["rerun", "first"])
    assert again.exit_code != 0 and "differ" in str(again.exception)
    assert "not the one the result was made from" in again.stderr


def test_a_rerun_of_a_policy_file_that_changed_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fixture = Path(__file__).parents[1] / "fixtures" / "tiny_tiresias.csv"
    example = Path(__file__).parents[2] / "examples" / "policies" / "floor_throughput.py"
    Path("mine.py").write_text(example.read_text())
    args = ["sim", "--trace", str(fixture), "--cluster", "uniform:4x4:V100"]
    args += ["--policy", "mine.py:FloorThroughput", "--out", "first"]
    monkeypatch.setattr("sys.argv", ["corral", *args])
    made = CliRunner().invoke(app, args)
    assert made.exit_code == 0, made.output
    assert Path("first/sources/mine.py").read_text() == example.read_text()  # (kept)
    same = CliRunner().invoke(app, ["rerun", "first", "--out", "same"])
    assert same.exit_code == 0 and "has changed" not in same.stderr
    # edited since, then gone: the copy the result kept is what runs, and it says so
    Path("mine.py").write_text(example.read_text() + "\n# tuned since\n")
    again = CliRunner().invoke(app, ["rerun", "first", "--out", "again"])
    said = " ".join(again.stderr.split())  # (Rich wraps lines)
    assert "the policy file mine.py has changed: running the copy the result kept" in said
    assert again.exit_code == 0 and "identical" in again.output
    Path("mine.py").unlink()
    gone = CliRunner().invoke(app, ["rerun", "first", "--out", "gone"])
    said = " ".join(gone.stderr.split())
    assert "the policy file mine.py is not here: running the copy the result kept" in said
    assert gone.exit_code == 0 and "identical" in gone.output
    # a result without its copy says what it cannot do
    Path("first/sources/mine.py").unlink()
    lost = CliRunner().invoke(app, ["rerun", "first", "--out", "lost"])
    assert lost.exit_code != 0 and "the policy file mine.py is not here" in lost.stderr.replace(
        "\n", " "
    )


def test_the_experiments_workflow_in_order_compare_plot_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the docs order it: a comparison, its figures drawn into the result, then a
    rerun, which compares the run's outputs and not what plot added."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    args = ["compare", *WORKLOAD, "--policies", "fifo,las", "--out", "first"]
    monkeypatch.setattr("sys.argv", ["corral", *args])
    assert runner.invoke(app, args).exit_code == 0
    drawn = runner.invoke(app, ["plot", "first"])
    assert drawn.exit_code == 0, drawn.output
    assert any(Path("first/figures").iterdir())
    again = runner.invoke(app, ["rerun", "first", "--out", "second"])
    assert again.exit_code == 0, again.output
    assert "identical" in again.output and "missing" not in again.output


def test_a_comparison_with_a_crashed_policy_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text(
        "from corral.policies.fifo import Fifo\n\n"
        "class Broken(Fifo):\n"
        "    name = 'broken'\n\n"
        "    def schedule(self, state):\n"
        "        raise RuntimeError('a bug in my policy')\n"
    )
    args = ["compare", *WORKLOAD, "--policies", "fifo,broken.py:Broken", "--out", "out"]
    done = subprocess.run(
        [sys.executable, "-m", "corral.cli", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stderr  # (the operation failed: the README's table)
    assert "a bug in my policy" in done.stderr
    # and a rerun that differs exits 1 too, not 2 (which means a usage or input error)
    jobs = Path("out/fifo/jobs.csv")
    lines = jobs.read_text().splitlines()
    lines[1] = lines[1].replace(",", ",9", 1)
    jobs.write_text("\n".join(lines) + "\n")
    rerun = subprocess.run(
        [sys.executable, "-m", "corral.cli", "rerun", "out", "--out", "again"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert rerun.returncode == 1 and "1 file(s) differ" in rerun.stderr
    assert "failed again, as in the result: broken" in rerun.stdout
    jobs.write_text("\n".join([lines[0], lines[1].replace(",9", ",", 1), *lines[2:]]) + "\n")
    same = subprocess.run(
        [sys.executable, "-m", "corral.cli", "rerun", "out", "--out", "third"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert same.returncode == 0, same.stderr  # (its good rows the same, the same one failed)
    assert "identical" in same.stdout
