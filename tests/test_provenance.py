"""Every result says how it was made: version, command line, every option, the
trace by name and checksum (never a local path), the seed; and --json output is
JSON alone on stdout."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from typer.testing import CliRunner

from corral import __version__
from corral.cli import app
from corral.errors import CorralError

runner = CliRunner()
TIRESIAS = Path(__file__).parent / "fixtures" / "tiny_tiresias.csv"
RUN = ["--trace", str(TIRESIAS), "--cluster", "uniform:4x4:V100", "--no-progress"]


def stdout_of(result) -> str:  # type: ignore[no-untyped-def]
    """Standard output alone (the runner keeps stderr apart)."""
    return result.stdout


def test_a_sim_summary_records_how_it_was_made(tmp_path, monkeypatch):
    out = tmp_path / "run"
    args = ["sim", *RUN, "--policy", "las", "--policy-opt", "quantum=60", "--out", str(out)]
    # As a shell runs it: the program by its installed path, which is not recorded.
    monkeypatch.setattr("sys.argv", ["/opt/venv/bin/corral", *args])
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    record = summary["provenance"]
    assert record == json.loads((out / "provenance.json").read_text())
    assert record["corral_version"] == __version__
    assert record["command"].startswith("corral sim --trace ")
    assert record["command"].endswith("--policy-opt quantum=60 --out " + str(out))
    # The trace by its file name, counts and checksum; no local path anywhere.
    assert record["trace"] == {
        "name": "tiny_tiresias.csv",
        "jobs": 12,
        "rows": 12,
        "sha256": hashlib.sha256(TIRESIAS.read_bytes()).hexdigest(),
    }
    assert summary["trace"] == "tiny_tiresias.csv"
    assert str(TIRESIAS.parent) not in json.dumps(summary["trace"])
    # Every option, defaults too, and the policy's options as run.
    options = record["options"]
    assert options["policy"] == "las" and options["cluster"] == "uniform:4x4:V100"
    assert options["seed"] == 0 and options["failure_rate"] == 0.0  # defaults
    assert options["policy_opt"] == ["quantum=60"]
    assert record["policy_options"] == {"las": {"quantum": 60}}
    assert record["seed"] == 0


def test_a_bundled_trace_is_named_and_a_generated_one_says_so(tmp_path):
    out = tmp_path / "run"
    args = ["sim", "--trace", "synthetic:jobs=20", "--cluster", "uniform:2x4:V100"]
    result = runner.invoke(app, [*args, "--no-progress", "--seed", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "summary.json").read_text())["provenance"]
    assert record["trace"] == {"name": "synthetic:jobs=20", "generated": True, "jobs": 20}
    assert record["seed"] == 3


def test_a_comparison_report_carries_the_record(tmp_path):
    out = tmp_path / "cmp"
    args = ["compare", *RUN, "--policies", "fifo,las", "--format", "both", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    record = json.loads((out / "provenance.json").read_text())
    assert record["options"]["policies"] == "fifo,las"
    assert set(record["policy_options"]) == {"fifo", "las"}
    assert record["policy_options"]["las"]["quantum"] > 0  # the default, written out
    for report in ("report.md", "report.html"):
        text = (out / report).read_text()
        assert (
            f"corral version</b>: {__version__}" in text or f"corral version: {__version__}" in text
        )
        assert record["trace"]["sha256"] in text
        assert "every option" in text and "switch_cost=kill-restart" in text
    for policy in ("fifo", "las"):
        summary = json.loads((out / policy / "summary.json").read_text())
        assert summary["provenance"]["trace"] == record["trace"]


def test_a_sweep_records_its_seeds_and_keeps_paths_out_of_results(tmp_path):
    out = tmp_path / "sw"
    args = ["sweep", *RUN, "--policies", "fifo", "--seeds", "0..1", "--runner", "serial"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "provenance.json").read_text())
    assert record["seed"] == [0, 1]
    results = (out / "results.csv").read_text()
    assert str(TIRESIAS.parent) not in results and "provenance" not in results.splitlines()[0]
    assert "tiny_tiresias.csv" in results
    assert "seeds give the same runs" in result.stderr


def test_json_flags_print_json_alone(tmp_path):
    sim = runner.invoke(app, ["sim", *RUN, "--json", "--out", str(tmp_path / "s")])
    assert sim.exit_code == 0
    assert json.loads(stdout_of(sim))["jobs_finished"] == 12
    cmp = runner.invoke(
        app, ["compare", *RUN, "--json", "--policies", "fifo,sjf", "--out", str(tmp_path / "c")]
    )
    assert cmp.exit_code == 0
    assert [r["policy"] for r in json.loads(stdout_of(cmp))["runs"]] == ["fifo", "sjf (oracle)"]
    sweep = runner.invoke(
        app,
        [
            "sweep",
            *RUN,
            "--json",
            "--policies",
            "fifo",
            "--runner",
            "serial",
            "--out",
            str(tmp_path / "w"),
        ],
    )
    assert sweep.exit_code == 0
    assert len(json.loads(stdout_of(sweep))["runs"]) == 1
    clusters = runner.invoke(app, ["clusters", "gavel:1:2:3", "--json"])
    assert json.loads(stdout_of(clusters))["gpus_by_type"] == {"K80": 3, "P100": 2, "V100": 1}
    assert "philly" in json.loads(stdout_of(runner.invoke(app, ["clusters", "--json"])))["presets"]


def test_parquet_copies_carry_the_rows_and_the_record(tmp_path):
    import pandas as pd
    import pyarrow.parquet as pq

    out = tmp_path / "cmp"
    args = ["compare", *RUN, "--policies", "fifo,las", "--parquet", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for name in ("comparison", "las/jobs", "fifo/timeline"):
        csv = pd.read_csv(out / f"{name}.csv")
        table = pq.read_table(out / f"{name}.parquet")
        pd.testing.assert_frame_equal(table.to_pandas(), csv)
        record = json.loads(table.schema.metadata[b"corral.provenance"])
        assert record["trace"]["name"] == "tiny_tiresias.csv"


def test_parquet_without_pyarrow_is_refused_before_running(tmp_path, monkeypatch):
    monkeypatch.setattr("corral.sim.output.parquet_available", lambda: False)
    result = runner.invoke(app, ["sim", *RUN, "--parquet", "--out", str(tmp_path / "s")])
    assert isinstance(result.exception, CorralError)  # the command line's exit code 2
    assert "pyarrow" in str(result.exception) and not (tmp_path / "s").exists()


def test_a_result_names_the_code_and_the_plugins_that_made_it(tmp_path):
    """The commit of the checkout (with whether it was modified), the libraries'
    versions, each plugin policy's source by SHA-256, and options typed as the
    policy declares them (a flag given as "false" is recorded as false)."""
    import shutil
    import subprocess

    plugin = Path(__file__).parent.parent / "examples" / "policies" / "shortest_first.py"
    out = tmp_path / "cmp"
    args = ["compare", *RUN, "--policies", f"gandiva,{plugin}:ShortestFirst",
            "--policy-opt", "gandiva.packing=false", "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    record = json.loads((out / "provenance.json").read_text())
    assert record["policy_options"]["gandiva"]["packing"] is False
    assert record["policy_sources"] == {
        "shortest-first": {
            "file": "shortest_first.py",
            "sha256": hashlib.sha256(plugin.read_bytes()).hexdigest(),
        }
    }
    assert {"numpy", "pandas", "scipy"} <= set(record["libraries"])
    root = Path(__file__).resolve().parent.parent
    if shutil.which("git") and (root / ".git").exists():
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        assert record["code"]["git_commit"] == head and isinstance(record["code"]["dirty"], bool)
        assert f"commit {head[:12]}" in (out / "report.html").read_text()
    assert str(plugin.parent) not in json.dumps(record["policy_sources"])


def test_jobs_csv_names_each_jobs_user(tmp_path):
    """Per-user fairness from a result alone: each job's user beside its VC (a
    Helios log names them; the bundled Philly trace does not)."""
    import pandas as pd

    from corral.traces.loading import load_trace

    log = Path(__file__).parent / "fixtures" / "traces" / "helios_cluster_log.csv"
    out = tmp_path / "run"
    args = ["sim", "--trace", str(log), "--cluster", "uniform:4x8:V100", "--no-progress"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    jobs = pd.read_csv(out / "jobs.csv", dtype={"user": str, "job_id": str})
    trace = load_trace(str(log), 32).df
    users = dict(zip(trace["job_id"].astype(str), trace["user"], strict=True))
    assert jobs["user"].nunique() > 1
    assert all(users[j] == u for j, u in zip(jobs["job_id"], jobs["user"], strict=True))
