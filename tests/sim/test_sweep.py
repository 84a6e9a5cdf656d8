"""corral sweep: the grid, load rescaling, the runners agreeing, and the results folder."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from corral.cli import app
from corral.errors import CorralError, InputError
from corral.sim.sweep import Grid, GridPoint, over_seeds, parse_numbers, parse_seeds
from corral.traces import TraceOptions, load_trace

runner = CliRunner()
WORKLOAD = ["--trace", "synthetic:jobs=120,load=1.0", "--cluster", "uniform:3x4:V100"]


def test_seeds_and_numbers_parse_as_on_the_command_line():
    assert parse_seeds("0..4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0..2,7,1") == [0, 1, 2, 7]
    assert parse_numbers("0.7, 0.9,1.1", "loads") == [0.7, 0.9, 1.1]
    for bad in ("4..1", "a", "1..x"):
        with pytest.raises(CorralError, match="seeds"):
            parse_seeds(bad)
    with pytest.raises(CorralError, match="loads: -1 must be a positive"):
        parse_numbers("0.5,-1", "loads")


def test_grid_file_axes_and_command_line_overrides(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text("policies: [fifo, las]\nloads: [0.5, 0.8]\nseeds: 0..2\n")
    grid = Grid.build(None, None, None, None, path, default_scale=0.5)
    assert grid.policies == ["fifo", "las"] and grid.loads == [0.5, 0.8]
    assert grid.seeds == [0, 1, 2] and grid.cluster_scales == [0.5]
    assert len(grid.points()) == len(grid) == 12
    # an axis on the command line replaces the file's
    assert Grid.build("srtf", None, "9", None, path).policies == ["srtf"]
    assert Grid.build("srtf", None, "9", None, path).seeds == [9]
    path.write_text("policies: [fifo]\nseed: 3\n")
    with pytest.raises(InputError) as err:
        Grid.build(None, None, None, None, path)
    assert "grid.yaml:2" in str(err.value) and "seed" in str(err.value)


def test_at_load_rescales_arrivals_to_the_target_load():
    jobs = load_trace("synthetic:jobs=200,load=0.6", 16, TraceOptions())
    for target in (0.3, 1.2):
        scaled = jobs.at_load(target, 16)
        assert scaled.offered_load(16) == pytest.approx(target)
        assert scaled.df["submit_time"].iloc[0] == jobs.df["submit_time"].iloc[0]
        assert (scaled.df["duration"] == jobs.df["duration"]).all()
    with pytest.raises(CorralError, match="load must be > 0"):
        jobs.at_load(0, 16)


def test_over_seeds_gives_mean_and_sample_deviation():
    rows = [
        {"policy": "a", "load": 0.5, "seed": s, "cluster_scale": 1.0, "avg_jct_s": v}
        for s, v in ((0, 10.0), (1, 20.0), (2, 30.0))
    ]
    rows.append({"policy": "b", "load": None, "seed": 0, "cluster_scale": 1.0, "avg_jct_s": 5.0})
    table = over_seeds(pd.DataFrame(rows))
    a = table[table["policy"] == "a"].iloc[0]
    assert a["avg_jct_s_mean"] == 20.0 and a["avg_jct_s_std"] == pytest.approx(10.0)
    assert a["seeds"] == 3
    b = table[table["policy"] == "b"].iloc[0]
    assert b["avg_jct_s_std"] == 0.0 and pd.isna(b["load"])


def _sweep(tmp_path, name: str, *extra: str):
    out = tmp_path / name
    args = ["sweep", "--policies", "fifo,las", "--loads", "0.6,1.2", "--seeds", "0..1"]
    args += [*WORKLOAD, "--failure-rate", "0.1", "--no-progress", "--out", str(out), *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out, pd.read_csv(out / "results.csv")


def _same_results(a: pd.DataFrame, b: pd.DataFrame) -> None:
    timing = ["wall_s"]
    pd.testing.assert_frame_equal(
        a.drop(columns=timing).sort_values("run").reset_index(drop=True),
        b.drop(columns=timing).sort_values("run").reset_index(drop=True),
    )


def test_sweep_writes_one_row_per_run_and_a_report(tmp_path):
    out, results = _sweep(tmp_path, "proc", "--runner", "processes", "-j", "2")
    assert len(results) == 8
    assert list(results.columns[:5]) == ["policy", "load", "seed", "cluster_scale", "run"]
    assert {"avg_jct_s", "preemptions", "jobs_finished", "offered_load"} <= set(results.columns)
    assert results["offered_load"].round(3).tolist().count(0.6) == 4
    for run in results["run"]:
        summary = json.loads((out / run / "summary.json").read_text())
        assert summary["jobs_finished"] == 120
    # failures are seeded: the two seeds differ, so the spread is not zero
    by_point = pd.read_csv(out / "by_point.csv")
    assert len(by_point) == 4 and (by_point["seeds"] == 2).all()
    assert (by_point["avg_jct_s_std"] > 0).any()
    page = (out / "report.html").read_text()
    assert 'src="http' not in page and "<img" not in page
    # interactive charts against load: JCT, utilisation, preemptions; error bars per point
    assert page.count("<svg id=") == 3 and page.count("data-chart=") == 3
    assert page.count("<circle") == 3 * 4  # 2 policies x 2 loads x 3 charts
    assert "± " in (out / "report.md").read_text()
    # one after another gives the same figures
    _, serial = _sweep(tmp_path, "serial", "--runner", "serial")
    _same_results(results, serial)


def test_sweep_refuses_bad_grids_with_a_message(tmp_path):
    for args, words in (
        (["--policies", "fifo,nope"], "nope"),
        (["--policies", "fifo", "--loads", "x"], "loads: 'x' is not a number"),
        (["--policies", "fifo", "--runner", "mpi"], "--runner"),
        (["--policies", "fifo", "--runner", "processes", "--address", "auto"], "Ray"),
        ([], "needs policies"),
    ):
        result = runner.invoke(app, ["sweep", *WORKLOAD, "--out", str(tmp_path / "x"), *args])
        assert result.exit_code != 0
        # a message for people (corral's main prints a CorralError's text), not a crash
        assert result.exception is None or isinstance(result.exception, CorralError | SystemExit)
        text = result.output + str(result.exception or "")
        assert words in text, text


def test_point_names_are_folders():
    assert GridPoint("las", 0.9, 3, 0.5).name == "las/load-0.9_seed-3_scale-0.5"
    assert GridPoint("fifo", None, 0, 1.0).name == "fifo/load-trace_seed-0_scale-1"


@pytest.mark.long  # starts a Ray cluster; the process runner is tested above
def test_sweeps_run_in_processes_by_default_and_ray_never_attaches_to_a_stray_cluster(
    tmp_path, monkeypatch
):
    """A machine where an earlier Ray run left its address behind: the default sweep
    uses processes, and --runner ray starts an instance of its own; the two runners
    give the same figures."""
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # a cluster that is not there
    _, default = _sweep(tmp_path, "default")
    _, on_ray = _sweep(tmp_path, "ray", "--runner", "ray", "-j", "2")
    _same_results(default, on_ray)


def test_a_ray_start_that_times_out_is_tried_again_then_said_in_a_line(monkeypatch):
    """Ray's node start gives its raylet 30 s to register and then raises a plain
    Exception (seen on a loaded machine): the runner tries again, and after its last
    try says so in a line, never a traceback."""
    import corral.ray_support
    from corral.sim import parallel

    class SlowRay:
        def __init__(self, fails: int) -> None:
            self.fails, self.inits, self.shutdowns = fails, 0, 0

        def is_initialized(self) -> bool:
            return False

        def init(self, **_: object) -> None:
            self.inits += 1
            if self.inits <= self.fails:
                raise Exception("The current node timed out during startup.")

        def shutdown(self) -> None:
            self.shutdowns += 1

    slow = SlowRay(fails=parallel.STARTS - 1)
    monkeypatch.setattr(corral.ray_support, "import_ray", lambda *_: slow)
    assert parallel.start_ray(None, 2) is True
    assert slow.inits == parallel.STARTS and slow.shutdowns == parallel.STARTS - 1
    never = SlowRay(fails=parallel.STARTS)
    monkeypatch.setattr(corral.ray_support, "import_ray", lambda *_: never)
    with pytest.raises(CorralError, match=rf"tried {parallel.STARTS} times\): The current node"):
        parallel.start_ray(None, 2)
