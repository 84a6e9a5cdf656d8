"""Philly's original job log (``cluster_job_log``): read as a trace, analysed as the
ATC'19 paper does, and its failure rates by size driving the simulator's failures.
The fixture is written in the release's own format (its README's example job
first); the figures below are worked out by hand from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from corral.errors import CorralError, InputError
from corral.model.cluster_specs import load_cluster
from corral.model.state import DONE, FAILED
from corral.policies import make_policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig, parse_failure_rates
from corral.traces.loading import TraceOptions, detect_format, load_trace
from corral.traces.philly_analysis import analyse
from corral.traces.philly_log import read_philly_log
from corral.traces.rows import LoadReport
from corral.traces.synthetic import SyntheticSpec, generate

LOG = str(Path(__file__).parents[1] / "fixtures" / "traces" / "philly_cluster_job_log.json")


def test_the_log_loads_as_a_trace_with_what_it_left_out_counted() -> None:
    assert detect_format(LOG) == "philly-log"
    report = LoadReport(LOG)
    table = load_trace(LOG, 0, TraceOptions(), report)
    df = table.df.set_index("job_id")
    assert len(df) == 7 and report.rows == 10
    first = df.loc["application_1506638472019_14199"]
    assert (first.num_gpus, first.duration, first.submit_time) == (8, 74 + 7200, 0.0)
    assert df.loc["application_1506638472019_14204"].num_gpus == 16  # two servers of 8
    assert df.loc["application_1506638472019_14202"].duration == 900  # three attempts
    assert df.loc["application_1506638472019_14208"].submit_time == 3801
    notes = " | ".join(report.notes)
    for said in ("1 job(s) never scheduled", "1 job(s) still running", "1 job(s) with no attempt"):
        assert said in notes
    assert "Passed 3, Killed 2, Unsuccessful 2" in notes


def test_the_atc19_tables_and_failure_rates() -> None:
    a = analyse(read_philly_log(LOG))
    assert a.jobs == 9  # scheduled: the job with no attempts has no size
    status = {r.status: r for r in a.by_status}
    assert [status[s].jobs for s in ("Passed", "Killed", "Unsuccessful")] == [5, 2, 2]
    total = 58192 + 3600 + 230400 + 2400 + 3600 + 3600 + 60
    assert status["Killed"].gpu_share == pytest.approx(6000 / total)
    assert status["Unsuccessful"].gpu_hours == pytest.approx(3660 / 3600)
    size = {r.size: r for r in a.by_size}
    assert [size[s].jobs for s in ("1", "2-4", "5-8", ">8")] == [5, 2, 1, 1]
    assert size["1"].attempt_failure_rate == pytest.approx(2 / 6)
    assert size["2-4"].attempt_failure_rate == pytest.approx(3 / 4)
    assert size["2-4"].unsuccessful_share == pytest.approx(0.5)
    assert a.failure_rates() == "1:0.3333,2-4:0.7500,5-8:0.5000,9-:0.0000"
    spread = {(r.size, r.servers): r.median_queue_minutes for r in a.locality}
    assert spread == {("2-4", 1): 1.0, ("2-4", 2): 10.0, ("5-8", 1): 0.5, (">8", 2): 25.0}
    assert parse_failure_rates(a.failure_rates())[-1] == (9, 1 << 30, 0.0)


def bad_log(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cluster_job_log"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            '[\n {"jobid": "a", "status": "Pass", "submitted_time": "2017-10-07 01:00:00",'
            ' "attempts": []},\n {"jobid": "b", "status": "Pass",\n  "submitted_time":'
            ' "07/10/2017", "attempts": []}\n]',
            r"cluster_job_log:3: field 'submitted_time': '07/10/2017' is not a time",
        ),
        (
            '[{"jobid": "a", "status": "Done", "submitted_time": "2017-10-07 01:00:00",'
            ' "attempts": []}]',
            r":1: field 'status': 'Done': expected Pass, Killed or Failed",
        ),
        (
            '[{"jobid": "a", "status": "Pass", "submitted_time": "2017-10-07 01:00:00",'
            ' "attempts": [{"start_time": "2017-10-07 01:00:0x", "detail": []}]}]',
            r"field 'attempts\[0\].start_time'",
        ),
        (
            '[\n{"jobid": "a", "status": "Pass", "submitted_time": "2017-10-07 01:00:00",'
            ' "attempts": []},\n{"jobid": "a", "status": "Pass", "submitted_time":'
            ' "2017-10-07 01:00:00", "attempts": []}]',
            r":3: field 'jobid': 'a' repeats line 2's job",
        ),
        ('[\n{"jobid": "a",\n "status": }]', r"cluster_job_log:3: not valid JSON"),
    ],
)
def test_bad_jobs_are_named_by_line_and_field(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(InputError, match=where):
        read_philly_log(bad_log(tmp_path, text))


def test_failures_by_gang_size() -> None:
    """Only the sizes given a chance fail: here multi-GPU attempts, never single ones."""
    jobs = generate(SyntheticSpec.parse("synthetic:jobs=300,load=0.7", 3), 64)
    rates = parse_failure_rates("1:0,2-:0.5")
    config = SimConfig(failure_rates=rates, max_retries=2, check_invariants=True, seed=3)
    result = Simulator(jobs, load_cluster("uniform:8x8:V100"), make_policy("fifo"), config).run()
    failures, gpus = result.state.failures, jobs.df["num_gpus"].to_numpy()
    assert failures[gpus == 1].sum() == 0
    assert failures[gpus > 1].sum() > 0.3 * (gpus > 1).sum()
    status = result.state.status
    assert set(status.tolist()) <= {DONE, FAILED}  # every job ended, done or out of retries
    assert (result.state.failures[status == FAILED] == 3).all()
    with pytest.raises(CorralError, match="'2-4:x' is not SIZES:CHANCE"):
        parse_failure_rates("1:0.1,2-4:x")
    with pytest.raises(CorralError, match="'3-5' overlaps"):
        parse_failure_rates("2-4:0.1,3-5:0.2")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_trace_stats_and_sim_from_the_command_line(tmp_path: Path) -> None:
    done = run_cli("trace-stats", LOG, "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["jobs"] == 7 and stats["atc19"]["failure_rates"].startswith("1:0.3333")
    shown = run_cli("trace-stats", LOG)
    assert "Unsuccessful" in shown.stdout and "--failure-rates 1:0.3333" in shown.stdout
    # the paper's tables count every scheduled job; the difference from the replay is named
    assert stats["atc19"]["jobs_scheduled"] == 9
    assert "count the 9 jobs that were scheduled" in shown.stdout
    assert "replays 7 of them (the other 2 are left out" in shown.stdout
    ran = run_cli(
        "sim", "--trace", LOG, "--cluster", "uniform:4x8:V100", "--policy", "fifo",
        "--failure-rates", stats["atc19"]["failure_rates"], "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    refused = run_cli("sim", "--trace", LOG, "--failure-rates", "1:2", "--out", str(tmp_path))
    assert refused.returncode == 2 and "--failure-rates" in refused.stderr
    assert "Traceback" not in refused.stderr
