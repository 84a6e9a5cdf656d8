"""The command line: runs, reports, and refuses bad input without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli import app
from corral.errors import CorralError

runner = CliRunner()
TIRESIAS = Path(__file__).parent / "fixtures" / "tiny_tiresias.csv"


def test_policies_lists_every_policy():
    result = runner.invoke(app, ["policies"])
    assert result.exit_code == 0
    names = ("fifo", "sjf", "srtf", "las", "tiresias-las", "tiresias-gittins", "gandiva")
    names += ("philly", "consolidate", "spread", "random", "count", "model-aware", "relaxed")
    for name in names:
        assert name in result.output


def test_policies_piped_prints_full_names_and_json():
    from corral.policies import POLICIES
    from corral.policies.rounds.planners import ROUND_PLANNERS

    # a pipe, not a terminal: one tab-separated line per policy, nothing cut
    piped = subprocess.run(
        [sys.executable, "-m", "corral.cli", "policies"], capture_output=True, text=True, check=True
    )
    names = {line.split("\t")[1] for line in piped.stdout.splitlines()[1:]}
    assert set(POLICIES) | set(ROUND_PLANNERS) <= names
    assert "gavel-max-min-fairness-agnostic" in names
    listed = json.loads(runner.invoke(app, ["policies", "--json"]).output)
    by_name = {p["name"]: p for p in listed["policies"]}
    assert by_name["gavel"]["options"]["round"] == 360.0
    assert by_name["srtf"]["oracle"] is True
    assert by_name["srtf"]["live"].startswith("yes; durations come from")
    assert by_name["las"]["live"] == "yes"
    assert by_name["hare"]["live"].startswith("yes; ") and "task-level" in by_name["hare"]["live"]
    assert {p["name"] for p in listed["placements"]} >= {"consolidate", "count"}


def test_sim_writes_jobs_and_summary(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "sim",
            "--trace",
            str(TIRESIAS),
            "--cluster",
            "uniform:4x4:V100",
            "--policy",
            "las",
            "--policy-opt",
            "quantum=60",
            "--check",
            "--no-progress",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    for key in (
        "policy",
        "jobs",
        "jobs_finished",
        "avg_jct_s",
        "median_jct_s",
        "p99_jct_s",
        "weighted_jct_s",
        "makespan_s",
        "avg_queueing_s",
        "gpu_utilization",
        "offered_load",
        "preemptions",
        "events",
        "wall_s",
    ):
        assert key in summary
    assert summary["jobs"] == summary["jobs_finished"] == 12
    header = (out / "jobs.csv").read_text().splitlines()[0]
    assert header.startswith("job_id,submit,first_start,finish,jct,queueing,gpus")


def test_compare_writes_a_self_contained_report(tmp_path):
    out = tmp_path / "cmp"
    result = runner.invoke(
        app,
        [
            "compare",
            "--policies",
            "fifo,srtf,las",
            "--trace",
            "synthetic:jobs=150,load=1.0",
            "--cluster",
            "uniform:4x4:V100",
            "--no-progress",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    for name in ("fifo", "srtf", "las"):
        assert (out / name / "summary.json").exists()
    lines = (out / "comparison.csv").read_text().splitlines()
    assert len(lines) == 4 and lines[2].startswith("srtf (oracle)")
    page = (out / "report.html").read_text()
    assert page.count("data-chart=") == 5  # interactive charts, inline
    # preemptions: FIFO never preempts, LAS does (share of jobs preempted at least once)
    assert 'id="preemptions"' in page and "preemptions of a job (at least; log scale)" in page
    assert 'src="http' not in page and "<script src" not in page
    # people's units, a table that scrolls within the page, the trace as it was named
    assert "avg JCT (h)" in page and "makespan (d)" in page and 'class="scroll"' in page
    assert "<b>trace</b>: synthetic:jobs=150,load=1.0" in page


def test_compare_writes_markdown_for_papers_and_names_bundled_traces_by_name(tmp_path):
    out = tmp_path / "md"
    args = ["compare", "--policies", "fifo,las", "--trace", "philly", "--max-jobs", "300"]
    args += ["--cluster", "uniform:4x4:V100", "--no-progress", "--out", str(out)]
    result = runner.invoke(app, [*args, "--format", "md"])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    assert "- trace: philly: 300 jobs from 82,247 rows, sha256 " in text
    assert "corral/data" not in text
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert lines[0].startswith("| policy | finished | avg JCT (h)")
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| fifo", "| las"]
    assert not (out / "report.html").exists()
    bad = runner.invoke(app, [*args, "--format", "pdf"])
    assert bad.exit_code != 0 and "--format" in str(bad.exception)


def test_compare_in_parallel_processes_matches_one_at_a_time(tmp_path):
    args = ["compare", "--policies", "fifo,las,tiresias-las", "--trace"]
    args += ["synthetic:jobs=120,load=1.2", "--cluster", "uniform:3x4:V100", "--no-progress"]
    tables = []
    for workers in ("1", "2"):
        out = tmp_path / workers
        result = runner.invoke(app, [*args, "--parallel", workers, "--out", str(out)])
        assert result.exit_code == 0, result.output
        rows = (out / "comparison.csv").read_text().splitlines()
        # every column but the last (wall seconds) must agree
        tables.append([row.rsplit(",", 1)[0] for row in rows])
    assert tables[0] == tables[1]
    assert [row.split(",")[0] for row in tables[1][1:]] == ["fifo", "las", "tiresias-las"]
    bad = runner.invoke(app, [*args, "--parallel", "0", "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "--parallel" in bad.output


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from corral.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def test_bad_input_is_a_message_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,x,0,1,m,5,1\n"
    )
    result = _cli(
        "sim",
        "--trace",
        str(bad),
        "--cluster",
        "uniform:1x4:V100",
        "--no-progress",
        "--out",
        str(tmp_path / "o"),
    )
    assert result.returncode == 2
    assert "bad.csv:2: field 'num_gpu'" in result.stderr
    assert "Traceback" not in result.stderr
    for args in (["--cluster", "moon"], ["--policy", "magic"], ["--cluster-scale", "-1"]):
        result = _cli(
            "sim", "--trace", str(TIRESIAS), "--no-progress", "--out", str(tmp_path / "o"), *args
        )
        assert (
            result.returncode == 2
            and "error:" in result.stderr
            and "Traceback" not in result.stderr
        )


def test_skip_bad_counts_and_continues(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(TIRESIAS.read_text() + "99,x,0,1,m,5,1\n")
    result = _cli(
        "sim",
        "--trace",
        str(bad),
        "--skip-bad",
        "--cluster",
        "uniform:4x4:V100",
        "--no-progress",
        "--out",
        str(tmp_path / "o"),
    )
    assert result.returncode == 0, result.stderr
    assert "skipped 1 malformed row" in result.stderr


def test_tiresias_preset_gandiva_job_types_and_failures_from_the_command_line(tmp_path):
    common = ["--trace", "tiresias-60", "--cluster", "uniform:2x4:P100", "--check"]
    common += ["--no-progress"]
    result = runner.invoke(
        app,
        [
            "compare",
            *("--policies", "tiresias-las,tiresias-gittins", "--preset", "tiresias-sim"),
            *common,
            *("--out", str(tmp_path / "t")),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "t" / "tiresias-gittins" / "summary.json").read_text())
    assert summary["placement"] == "count" and summary["jobs_finished"] == 60
    result = runner.invoke(
        app,
        [
            "sim",
            *("--policy", "gandiva", "--job-types", "gavel", "--switch-cost", "gandiva"),
            *common,
            *("--out", str(tmp_path / "g")),
        ],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app,
        [
            "sim",
            *("--policy", "philly", "--failure-rate", "0.3", "--max-retries", "1"),
            *common,
            *("--out", str(tmp_path / "p")),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["failed_attempts"] > 0
    assert summary["jobs_finished"] + summary["jobs_failed"] == 60
    for bad, message in (
        (["--preset", "nope"], "unknown preset"),
        (["--failure-rate", "2"], "failure rate"),
        (["--job-types", "imaginary"], "--job-types"),
    ):
        result = _cli("sim", *common, *bad, "--out", str(tmp_path / "x"))
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr


def test_sim_and_compare_show_the_shared_options_with_their_help():
    for command, own in (("sim", "--policy"), ("compare", "--policies")):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0
        assert own in result.output
        assert "Philly: keep only this virtual cluster" in result.output
        assert "chance that one attempt of a job fails" in result.output


def test_heterogeneous_policies_and_round_planners_from_the_command_line(tmp_path):
    out = tmp_path / "het"
    result = runner.invoke(
        app,
        [
            "compare",
            "--policies",
            "gavel,allox,themis,hare,sched-allox,sched-homo",
            "--trace",
            "gavel-synthetic:jobs=20,rate=20,weights=1",
            "--cluster",
            "gavel:4:4:4",
            "--no-progress",
            "--check",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    lines = (out / "comparison.csv").read_text().splitlines()
    assert len(lines) == 7 and lines[4].startswith("hare,20,")
    summary = json.loads((out / "hare" / "summary.json").read_text())
    assert summary["jobs_finished"] == 20 and summary["weighted_jct_s"] > 0
    bad = runner.invoke(app, ["sim", "--policy", "harey", "--trace", "synthetic:jobs=5"])
    assert "unknown policy 'harey'; did you mean 'hare'?" in str(bad.exception)  # exits 2
    typo = runner.invoke(
        app, ["compare", "--policies", "fifo,tiresias-lass", "--trace", "synthetic:jobs=5"]
    )
    assert "did you mean 'tiresias-las'?" in str(typo.exception)


def test_user_profiles_change_speeds_and_bad_ones_name_the_line(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submit_time,num_gpus,duration,job_type\na,0,1,100,my-net\n")
    profiles = tmp_path / "profiles.csv"
    profiles.write_text(
        "job_type,gpu_type,num_gpus,steps_per_second\nmy-net,V100,1,10\nmy-net,A100,1,40\n"
    )
    out = tmp_path / "run"
    args = ["sim", "--trace", str(trace), "--cluster", "uniform:1x1:A100", "--no-progress"]
    result = runner.invoke(app, [*args, "--profiles", str(profiles), "--out", str(out)])
    assert result.exit_code == 0, result.output
    # 100 s on the reference V100 at 10 steps/s is 1,000 steps: 25 s on an A100
    summary = json.loads((out / "summary.json").read_text())
    assert summary["avg_jct_s"] == pytest.approx(25.0)
    profiles.write_text("job_type,gpu_type,num_gpus,steps_per_second\nmy-net,V100,1,-3\n")
    bad = runner.invoke(app, [*args, "--profiles", str(profiles), "--out", str(out)])
    assert "profiles.csv:2: field 'steps_per_second'" in str(bad.exception)


def test_sim_charges_the_switch_cost_this_machine_measured(tmp_path):
    from corral.perf.switching import write_profile

    profile = tmp_path / "switching.json"
    model = {"parameters": 1, "cold_median_s": 3.0, "warm_median_s": 0.25}
    write_profile(profile, "CPU", 20, {"resnet50": model})
    common = ["--trace", "tiresias-60", "--cluster", "uniform:2x4:P100", "--policy", "las"]
    common += ["--no-progress", "--check"]
    runs = {}
    for name, cost in (
        ("measured", ["measured", "--switch-profile", str(profile)]),
        ("s", ["0.25"]),
    ):
        result = runner.invoke(
            app, ["sim", *common, "--switch-cost", *cost, "--out", str(tmp_path / name)]
        )
        assert result.exit_code == 0, result.output
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text())
    assert (
        "measured, 250.00 ms (warm switch of resnet50 on CPU"
        in runner.invoke(
            app,
            [
                "sim",
                *common,
                "--switch-cost",
                "measured",
                "--switch-profile",
                str(profile),
                "--out",
                str(tmp_path / "again"),
            ],
        ).output
    )
    assert runs["measured"]["preemptions"] > 0 and runs["measured"]["switch_overhead_gpu_s"] > 0
    for run in runs.values():
        del run["wall_s"]
        del run["provenance"]  # the commands differ (and each says so)
    assert runs["measured"] == runs["s"]  # the profile's figure, charged as given in seconds
    result = _cli(
        "sim",
        *common,
        "--switch-cost",
        "measured-cold",
        "--switch-profile",
        str(tmp_path / "none.json"),
        "--out",
        str(tmp_path / "x"),
    )
    assert result.returncode == 2 and "no switching profile at" in result.stderr
    assert "Traceback" not in result.stderr


def test_text_another_user_wrote_never_drives_the_terminal() -> None:
    from corral.queue_listing import printable

    shown = printable("evil\x1b]0;owned\x07\x1b[2J name\x9b31m\nnext\tline")
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    # (a line break and a tab too: a value never forges a line of its own)
    assert shown == "evil\\x1b]0;owned\\x07\\x1b[2J name\\x9b31m\\nnext\\tline"


@pytest.mark.parametrize(
    ("command", "option", "says"),
    [
        (["sim", "--policy", "las"], "quantm=60", "did you mean 'quantum'"),
        (["sim", "--policy", "las"], "las.quantm=60", "did you mean 'quantum'"),
        (["sim", "--policy", "las"], "fifo.quantum=1", "'fifo' is not a policy of this run"),
        (["compare", "--policies", "las,fifo"], "quantm=60", "no policy of this run (las, fifo)"),
        (["sweep", "--policies", "las,fifo", "--loads", "1"], "quantm=60", "did you mean"),
    ],
)
def test_a_misspelled_policy_option_is_an_error(
    command: list[str], option: str, says: str, tmp_path: Path
) -> None:
    """A wrong experiment that looks right is the worst outcome: never ignored."""
    args = [*command, "--trace", "tiresias-60", "--cluster", "uniform:4x4:V100"]
    result = runner.invoke(app, [*args, "--policy-opt", option, "--out", str(tmp_path / "o")])
    assert isinstance(result.exception, CorralError), result.output  # main() prints it, exit 2
    assert says in str(result.exception)
    assert not (tmp_path / "o").exists()  # refused before anything ran


def test_a_misspelled_option_in_the_service_config_names_its_line(tmp_path: Path) -> None:
    from corral.runtime.jobspec.config import load_config

    config = tmp_path / "corral.yaml"
    config.write_text(
        "policy: las\npolicy_options:\n  quantm: 5\n"
        "gpus: [{type: V100, count: 2}]\nusers: [{name: a, token: aaaaaaaaaaaaaaaa1}]\n"
    )
    with pytest.raises(CorralError, match=r"corral.yaml:2: .*did you mean 'quantum'"):
        load_config(config)


HEAVY = ("pandas", "numpy", "scipy", "sqlalchemy", "fastapi", "pydantic", "yaml")
"""What the service's verbs must not import: each costs a user hundredths to tenths
of a second on every command (pandas alone took corral's startup from 0.1 s to 0.6 s;
pydantic, through Typer 0.29's option coercion and the spec checked before sending,
and yaml about 0.08 s together). A YAML job spec is read with both, by that path only."""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["submit", "--gpus", "1", "--", "true"],
        ["queue"],
        ["history"],
        ["show", "1"],
        ["cancel", "1"],
        ["nodes"],
    ],
    ids=lambda argv: argv[0],
)
def test_the_service_verbs_import_no_data_libraries(argv: list[str]) -> None:
    """Run as from a shell (a fresh interpreter) against an address with no service:
    what was imported by the time the command answered is what a user waits for."""
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['corral', *{argv!r}]\n"
        "try:\n"
        "    runpy.run_module('corral.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    env = {"CORRAL_URL": "http://127.0.0.1:9", "CORRAL_TOKEN": "x", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    loaded = [line for line in done.stdout.splitlines() if line.startswith("LOADED")]
    assert loaded == ["LOADED []"], (done.stdout[-2000:], done.stderr[-2000:])


def test_submit_sends_the_spec_as_given_with_begin_read_in_local_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The service checks the spec (the command line no longer does, to start fast);
    ``--begin`` is read here, in the user's own time zone, as sbatch reads it."""
    from corral.api.client import Client

    sent: list[dict] = []

    def submit(self: Client, spec: dict) -> dict:
        sent.append(spec)
        return {"id": 7, "name": spec.get("name", "job")}

    monkeypatch.setattr(Client, "submit", submit)
    monkeypatch.chdir(tmp_path)
    before = time.time()
    argv = ["submit", "--gpus", "2", "--begin", "now+30m", "--name", "b", "--", "echo", "hi"]
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == 0, done.output
    assert "submitted job 7 (b)" in done.output
    spec = sent[0]
    assert spec["gpus"] == 2 and spec["command"] == ["echo", "hi"]
    assert spec["workdir"] == str(tmp_path)
    assert before + 1800 <= spec["begin"] <= time.time() + 1800
    local = datetime(2030, 1, 2, 8, 0).timestamp()  # the local clock's 08:00
    CliRunner().invoke(app, ["submit", "--begin", "2030-01-02T08:00", "--", "true"])
    assert sent[1]["begin"] == local
    bad = CliRunner().invoke(app, ["submit", "--begin", "soon", "--", "true"])
    assert isinstance(bad.exception, CorralError) and bad.exception.exit_code == 2
    assert str(bad.exception).startswith("--begin: 'soon': give now+30m")
    assert len(sent) == 2  # (nothing sent for the bad one)
    # sbatch's own words for the units: now+COUNT[seconds|minutes|hours|days|weeks]
    for words, seconds in (("now+1hour", 3600), ("now+2days", 172800), ("now+90", 90)):
        CliRunner().invoke(app, ["submit", "--begin", words, "--", "true"])
        assert abs(sent[-1]["begin"] - time.time() - seconds) < 60


def test_typer_builds_only_the_command_asked_and_help_still_lists_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short command builds one command, not all of them (Typer reads every
    command's signature to build each); help, a group, or a mistyped name keep
    the whole app."""
    from corral.cli.app import only_the_command_asked

    everything = (list(app.registered_commands), list(app.registered_groups))

    def kept(*argv: str) -> tuple[list[str], int]:
        monkeypatch.setattr(app, "registered_commands", list(everything[0]))
        monkeypatch.setattr(app, "registered_groups", list(everything[1]))
        only_the_command_asked(["corral", *argv])
        names = [info.name or info.callback.__name__ for info in app.registered_commands]
        return names, len(app.registered_groups)

    assert kept("submit", "--gpus", "1", "--", "true") == (["submit"], 0)
    assert kept("trace-stats", "philly") == (["trace-stats"], 0)
    assert kept("--help")[0] == kept()[0] and len(kept("--help")[0]) == len(everything[0])
    assert len(kept("submitt")[0]) == len(everything[0])  # (click suggests 'submit')
    assert kept("store", "status") == (kept()[0], len(everything[1]))
    listed = _cli("--help")
    assert listed.returncode == 0 and "submit" in listed.stdout and "store" in listed.stdout
    one = _cli("queue", "--help")
    assert one.returncode == 0 and "Usage: " in one.stdout and "queue" in one.stdout


def test_a_jobs_output_shown_on_a_terminal_cannot_drive_it() -> None:
    """``corral logs`` on a terminal: escape sequences and C1 controls of a job's output
    are shown as escapes; line breaks, tabs, carriage returns and UTF-8 pass."""
    from corral.cli.service import terminal_safe

    shown = terminal_safe(b"ok\x1b]0;owned\x07\x1b[2J\r\nnext\t\xc2\x9b31m \xc3\xa9")
    assert shown == b"ok\\x1b]0;owned\\x07\\x1b[2J\r\nnext\t\\xc2\\x9b31m \xc3\xa9"
