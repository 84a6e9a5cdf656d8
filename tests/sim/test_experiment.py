"""The Experiment API: the same runs as the command line, results as DataFrames,
a crash that spoils one row, and a result made in Python that ``corral rerun``
makes again."""

from __future__ import annotations

import gc
import json
import shlex
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from corral import Experiment
from corral.cli.app import app
from corral.errors import CorralError
from tests.sim.test_compare_failures import CRASHING

WORKLOAD = {"trace": "synthetic:jobs=80,load=1.0", "cluster": "uniform:3x4:V100"}


def _quiet(kind: str, text: str) -> None:
    pass


def _numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """A results table less what differs between two runs of the same thing."""
    keep = [c for c in frame.columns if c != "wall_s" and not c.startswith("provenance")]
    return frame[keep].reset_index(drop=True)


def test_a_grid_in_python_gives_frames_of_every_run_and_job(tmp_path: Path) -> None:
    experiment = Experiment(
        **WORKLOAD,
        policies=["fifo", "las[quantum=60,label=las-1min]", "las"],
        seeds=[0, 1],
        runner="serial",
    )
    results = experiment.run(tmp_path / "out", say=_quiet)
    assert results.ok and results.layout == "sweep"
    runs = results.runs
    assert len(runs) == 6
    assert sorted(set(runs["policy"])) == ["fifo", "las", "las-1min"]
    assert set(runs["seed"]) == {0, 1}
    assert (runs["jobs_finished"] == 80).all()
    # a variant is its own run: its quantum changes its preemptions
    by_policy = runs.groupby("policy")["preemptions"].sum()
    assert by_policy["las-1min"] != by_policy["las"]
    jobs = results.jobs
    assert len(jobs) == 6 * 80
    assert {"policy", "seed", "load", "cluster_scale", "user", "vc", "jct"} <= set(jobs.columns)
    assert (jobs["jct"] > 0).all()
    # the means over seeds are the sweep's own table
    by_point = results.by_point
    assert list(by_point["seeds"]) == [2, 2, 2]
    written = pd.read_csv(tmp_path / "out" / "by_point.csv")
    assert list(written["policy"]) == list(by_point["policy"])
    assert not results.timelines.empty


def test_python_and_the_command_line_make_the_same_comparison(tmp_path: Path) -> None:
    from_python = Experiment(**WORKLOAD, policies="fifo,srtf,las", runner="serial").run(
        tmp_path / "py", say=_quiet
    )
    assert from_python.layout == "comparison"
    words = ["--trace", WORKLOAD["trace"], "--cluster", WORKLOAD["cluster"]]
    result = CliRunner().invoke(
        app, ["compare", *words, "--policies", "fifo,srtf,las", "--out", str(tmp_path / "cli")]
    )
    assert result.exit_code == 0, result.output
    cli = pd.read_csv(tmp_path / "cli" / "comparison.csv")
    py = pd.read_csv(tmp_path / "py" / "comparison.csv")
    pd.testing.assert_frame_equal(_numbers(py), _numbers(cli))
    for policy in ("fifo", "srtf", "las"):
        assert (tmp_path / "py" / policy / "jobs.csv").read_bytes() == (
            tmp_path / "cli" / policy / "jobs.csv"
        ).read_bytes()


def test_a_crashing_policy_spoils_its_row_not_the_experiment(tmp_path: Path) -> None:
    plugin = tmp_path / "crashes.py"
    plugin.write_text(CRASHING)
    results = Experiment(
        **WORKLOAD, policies=["fifo", f"{plugin}:Crashes", "las"], runner="serial"
    ).run(tmp_path / "out", say=_quiet)
    assert not results.ok
    (failure,) = results.failures
    assert failure["error"].startswith("ZeroDivisionError")
    assert failure["raised_at"].startswith(f"{plugin}:11")
    assert "1 / 0" in (tmp_path / "out" / failure["log"]).read_text()
    assert set(results.jobs["policy"]) == {"fifo", "las"}
    assert (tmp_path / "out" / "report.html").exists()


def test_mistakes_are_refused_before_anything_runs(tmp_path: Path) -> None:
    for kwargs, words in (
        ({"policies": "fifo,nope"}, "unknown policy 'nope'"),
        ({"policies": "las[quantum=-1]"}, "las[quantum=-1]"),
        ({"policies": "fifo", "loads": [0.5, -1]}, "must be a positive number"),
        ({"policies": "fifo", "runner": "mpi"}, "runner: 'mpi'"),
        ({"policies": "fifo", "layout": "run", "seeds": [0, 1]}, "holds one run"),
        ({"policies": "fifo,fifo"}, "two entries would write to one folder"),
    ):
        with pytest.raises(CorralError, match=None) as caught:
            Experiment(**WORKLOAD, **kwargs).run(tmp_path / "never", say=_quiet)
        assert words in str(caught.value), caught.value
    assert not (tmp_path / "never").exists()


def test_a_result_made_in_python_records_its_command_and_reruns_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    experiment = Experiment(
        **WORKLOAD,
        policies=["fifo", "las[quantum=60,label=short]"],
        seeds=[3],
        loads=[0.8],
        failure_rate=0.05,
        runner="serial",
    )
    results = experiment.run("first", say=_quiet)
    record = json.loads((tmp_path / "first" / "provenance.json").read_text())
    words = shlex.split(record["command"])
    assert words[:2] == ["corral", "sweep"]
    assert record["command"] == experiment.command("first")
    assert "--failure-rate" in words and "--loads" in words and "--seeds" in words
    assert record["policy_options"]["short"]["quantum"] == 60
    assert record["options"]["failure_rate"] == 0.05
    result = CliRunner().invoke(app, ["rerun", "first", "--out", "again"])
    assert result.exit_code == 0, result.output
    assert "identical:" in result.output
    assert results.runs["seed"].tolist() == [3, 3]


def test_without_a_folder_the_results_live_as_long_as_the_object(tmp_path: Path) -> None:
    results = Experiment(**WORKLOAD, policies="fifo", runner="serial").run(say=_quiet)
    folder = results.out
    assert (folder / "fifo" / "jobs.csv").exists()
    assert len(results.jobs) == 80
    del results
    gc.collect()
    assert not folder.exists()


def test_one_policy_in_the_run_layout_writes_as_corral_sim(tmp_path: Path) -> None:
    results = Experiment(**WORKLOAD, policies="srtf", layout="run").run(tmp_path, say=_quiet)
    assert (tmp_path / "jobs.csv").exists() and (tmp_path / "summary.json").exists()
    assert results.report is None and len(results.jobs) == 80
    assert shlex.split(results.provenance["command"])[:4] == ["corral", "sim", "--policy", "srtf"]


def test_simulate_returns_the_engines_result_of_the_one_point() -> None:
    """What the validation scripts use: the engine's own result (its state), with the
    settings read as ``corral sim`` reads them; the same schedule as the run's files."""
    import numpy as np

    from corral.model.cluster_specs import load_cluster
    from corral.sim.run import RunSpec, simulate
    from corral.traces import TraceOptions, load_trace

    experiment = Experiment(**WORKLOAD, policies="las[quantum=60]", failure_rate=0.05, seed=4)
    result = experiment.simulate()
    cluster = load_cluster(WORKLOAD["cluster"])
    jobs = load_trace(WORKLOAD["trace"], cluster.total_gpus, TraceOptions(seed=4))
    spec = RunSpec("las", seed=4, failure_rate=0.05, policy_options={"quantum": 60})
    direct = simulate(jobs, cluster, spec)
    assert np.array_equal(result.state.finish_time, direct.state.finish_time, equal_nan=True)
    assert (result.state.preemptions == direct.state.preemptions).all()
    with pytest.raises(CorralError, match="runs one point"):
        Experiment(**WORKLOAD, policies="fifo,las").simulate()


def test_one_experiment_run_twice_records_each_folders_own_command(tmp_path: Path) -> None:
    experiment = Experiment(**WORKLOAD, policies="fifo", runner="serial")
    for name in ("first", "second"):
        experiment.run(tmp_path / name, say=_quiet)
        record = json.loads((tmp_path / name / "provenance.json").read_text())
        assert shlex.split(record["command"])[-1] == str(tmp_path / name)
        assert record["options"]["out"] == str(tmp_path / name)


@pytest.fixture
def mine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The example policy file copied here as ``mine.py`` and imported, as a notebook
    imports a policy of its own (the working folder is ``tmp_path``)."""
    import importlib
    import sys

    monkeypatch.chdir(tmp_path)
    example = Path(__file__).parents[2] / "examples" / "policies" / "floor_throughput.py"
    (tmp_path / "mine.py").write_text(example.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module("mine")
    finally:
        sys.modules.pop("mine", None)


def test_a_policy_class_runs_and_reruns_from_its_file(tmp_path: Path, mine: Any) -> None:
    """``policies=[MyPolicy]`` (a class from a file, as a notebook imports it): it runs,
    the result names its file, and ``corral rerun`` makes it again, from the copy
    the result kept when the file is gone. A class with no file is refused."""
    experiment = Experiment(**WORKLOAD, policies=[mine.FloorThroughput, "fifo"], runner="serial")
    experiment.run("first", say=_quiet)
    record = json.loads((tmp_path / "first" / "provenance.json").read_text())
    assert "mine.py:FloorThroughput" in record["command"]
    (tmp_path / "mine.py").unlink()
    result = CliRunner().invoke(app, ["rerun", "first", "--out", "again"])
    assert result.exit_code == 0, result.output
    assert "identical:" in result.output
    local = type("Local", (mine.FloorThroughput,), {"__module__": "__main__"})
    with pytest.raises(CorralError, match="has no file of its own"):
        Experiment(**WORKLOAD, policies=[local]).variants()


def test_a_policy_object_runs_with_its_options_and_reruns(tmp_path: Path, mine: Any) -> None:
    """``policies=[MyPolicy(floor=0.25)]``: the entry is the class's file with the
    options the object was made with, so the run and ``corral rerun`` use them; an
    option the object does not keep is refused, saying what to give."""
    chosen = mine.FloorThroughput(floor=0.25)
    experiment = Experiment(**WORKLOAD, policies=[chosen, "fifo"], runner="serial")
    (variant, _) = experiment.variants()
    assert variant.policy == "mine.py:FloorThroughput" and variant.options["floor"] == "0.25"
    results = experiment.run("first", say=_quiet)
    assert results.ok
    record = json.loads((tmp_path / "first" / "provenance.json").read_text())
    assert "mine.py:FloorThroughput[" in record["command"] and "floor=0.25" in record["command"]
    default = Experiment(**WORKLOAD, policies=[mine.FloorThroughput()], runner="serial")
    assert "floor" not in default.variants()[0].options  # (a default is not written)
    result = CliRunner().invoke(app, ["rerun", "first", "--out", "again"])
    assert result.exit_code == 0, result.output
    assert "identical:" in result.output
    forgetful = mine.FloorThroughput(floor=0.25)
    del forgetful.floor
    with pytest.raises(CorralError, match="keeps no attribute 'floor'"):
        Experiment(**WORKLOAD, policies=[forgetful]).variants()
