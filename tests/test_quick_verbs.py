"""``corral submit`` in its everyday form is answered without Typer or Rich, and sends
exactly what the full command line sends; whatever it does not take goes to the
full command line untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from corral.cli import app
from corral.quick_verbs import parse_submit, quick_submit


class Recorder(BaseHTTPRequestHandler):
    """A stand-in for the service: records each submission, answers as the service
    does, or with a 422 for a job named 'refused'."""

    bodies: ClassVar[list[dict[str, Any]]] = []
    paths: ClassVar[list[str]] = []

    def do_PUT(self) -> None:  # a priority: the job as it now is
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        type(self).bodies.append(body)
        self._answer({"id": int(self.path.split("/")[3]), **body}, 200)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        type(self).bodies.append(body)
        type(self).paths.append(self.path)
        if self.path.startswith("/v1/nodes/"):  # a node's new state
            name, verb = self.path.split("/")[3:5]
            state = {"drain": "drained", "resume": "up"}[verb]
            self._answer({"name": name, "state": state, "reason": body.get("reason")}, 200)
            return
        if self.path.startswith("/v1/jobs/actions/"):  # a bulk verb: job 9 is bob's
            done = [j for j in body.get("ids", []) if j != 9] or [1, 2]
            skipped = {"9": "belongs to bob"} if 9 in body.get("ids", []) else {}
            answer: Any = {"action": self.path.rsplit("/", 1)[1], "done": done, "skipped": skipped}
            self._answer(answer, 200)
            return
        if self.path.count("/") == 4:  # one job's verb: /v1/jobs/ID/VERB
            self._answer({"id": int(self.path.split("/")[3]), "status": "CANCELLED",
                          "reason": "cancelled by request"}, 200)  # fmt: skip
            return
        if body.get("name") == "refused":
            answer, status = {"detail": [{"loc": ["body", "gpus"], "msg": "too many"}]}, 422
        else:
            answer, status = {"id": len(self.bodies), "name": body.get("name", "job")}, 201
        self._answer(answer, status)

    def _answer(self, answer: Any, status: int, total: int | None = None) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if total is not None:
            self.send_header("X-Total-Count", str(total))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        """The queue: ``listed`` jobs, one of them named with a control character; one
        job by id (job 50 is an array's first task)."""
        if self.path.startswith(("/v1/jobs/77/logs", "/v1/jobs/78/logs")):  # attempt 2 of 2
            data = b"step 1\nstep 2 \x1b[31mred\n"
            self.send_response(200)
            for header, value in (
                ("X-Attempt", "2"),
                ("X-Next-Offset", str(len(data))),
                ("X-Finished", "1"),
                ("Content-Length", str(len(data))),
            ):
                self.send_header(header, value)  # fmt: skip
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path.startswith("/v1/history"):  # the same rows, whatever asked
            self._answer(type(self).pages.get("/v1/history", []), 200)
            return
        if self.path in type(self).pages:
            self._answer(type(self).pages[self.path], 200)
            return
        if self.path.partition("?")[0].rstrip("/").split("/")[-1].isdigit():
            job = int(self.path.partition("?")[0].rstrip("/").split("/")[-1])
            self._answer({"id": job, "array_job": 50 if job == 50 else None}, 200)
            return
        query = dict(p.split("=", 1) for p in self.path.partition("?")[2].split("&") if p)
        jobs = [
            {"id": k, "name": "x\x1b[2J" if k == 3 else f"job-{k}", "user": "alice",
             "status": "PENDING" if k % 3 else "RUNNING", "gpus": 1 + k % 2,
             "gpu_type": "V100" if k % 5 == 0 else None, "position": k if k % 3 else None,
             "reason": "Resources" if k % 3 else None, "steps": k, "total_steps": 100 * (k % 2),
             "remaining": {"seconds": 60.0 * k, "source": "history"} if k % 4 else None,
             "submit_time": 1.8e9 + k}
            for k in range(1, type(self).listed + 1)
        ]  # fmt: skip
        shown: Any = jobs[: int(query.get("limit", len(jobs)))]
        if query.get("layout") == "columns":
            fields = query["fields"].replace("%2C", ",").split(",")
            shown = {field: [job[field] for job in shown] for field in fields}
        self._answer(shown, 200, total=len(jobs))

    listed: ClassVar[int] = 0
    pages: ClassVar[dict[str, Any]] = {}
    """Answers by path (a job shown, the nodes)."""

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("CORRAL_URL", url)
    monkeypatch.setenv("CORRAL_TOKEN", "alice-token-1")
    Recorder.bodies, Recorder.paths = [], []
    yield url
    server.shutdown()


def quick_probe(words: list[str], heavy: set[str]) -> str:
    """A program that runs ``corral WORDS`` through the quick path's entry point, then
    prints on stderr which of the ``heavy`` modules it imported."""
    return (
        "import sys\n"
        "from corral.quick_verbs import main\n"
        f"sys.argv = ['corral', *{words!r}]\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        f"    heavy = {sorted(heavy)!r}\n"
        "    print(sorted(m for m in sys.modules if m in heavy), file=sys.stderr)\n"
    )


TAKEN = [
    ["--gpus", "2", "--", "python", "train.py", "--lr", "0.1"],
    ["--gpus=4", "-J", "bert", "--gpu-type", "V100", "--", "python", "-c", "pass"],
    ["--hold", "--priority", "-5", "--time", "1-00:00:00", "--", "sleep", "1"],
    ["-t", "30", "--mem", "16G", "-c", "4", "--vc", "team-a", "--", "sleep", "1"],
    ["--no-requeue", "--exclusive", "--max-retries", "0", "--", "./run", "--gpus", "9"],
    ["--json", "--name", "x", "--total-steps", "100", "--duration", "2h", "--", "true"],
    ["--array", "0-9%2", "--hold", "--", "sleep", "1"],
    ["-d", "afterok:12:13", "-o", "logs/%j.out", "--error", "err/%j", "-D", "sub", "--", "true"],
    ["--dependency=singleton", "--begin", "now+1hour", "-p", "gpu", "-N", "2", "--", "true"],
    ["--ntasks-per-node", "4", "--mail-type", "END", "--signal", "B:USR1@60", "--", "x"],
    ["--chdir", "/tmp", "--mail-user", "me@example.org", "--target-loss", "0.5", "--", "x"],
]


@pytest.mark.parametrize("words", TAKEN)
def test_the_quick_path_sends_what_the_full_command_line_sends(
    words: list[str], service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert parse_submit(words) is not None
    full = CliRunner().invoke(app, ["submit", *words])
    assert full.exit_code == 0, full.output
    assert quick_submit(words) == 0
    by_full, by_quick = Recorder.bodies
    if "begin" in by_quick:  # (now+1hour: read a moment apart)
        assert abs(by_quick["begin"] - by_full["begin"]) < 30
        by_full["begin"] = by_quick["begin"]
    assert by_quick == by_full
    assert by_quick["command"] == words[words.index("--") + 1 :]


SCRIPT = """#!/bin/bash
#SBATCH -J prep --gres=gpu:0 -c 2
#SBATCH --mem-per-cpu=1G
#SBATCH -o logs/%x-%j.out
#SBATCH --begin=now+1hour
#SBATCH --export=ALL,STAGE=prep
#SBATCH -D sub
python prep.py
"""

SCRIPTS = [
    ["job.sh"],
    ["--gpus", "2", "--mem", "8G", "job.sh"],  # the command line's over the script's
    ["--hold", "--export=NONE", "-J", "other", "--json", "job.sh"],
]


@pytest.mark.parametrize("words", SCRIPTS)
def test_a_batch_script_is_sent_as_the_full_command_line_sends_it(
    words: list[str], service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "job.sh").write_text(SCRIPT)
    assert parse_submit(words) is not None
    full = CliRunner().invoke(app, ["submit", *words])
    assert full.exit_code == 0, full.output
    assert quick_submit(words) == 0
    by_full, by_quick = Recorder.bodies
    by_full["begin"] = by_quick["begin"] = round(by_quick["begin"] - by_full["begin"])  # (now)
    assert by_quick == by_full
    assert by_quick["script"] == SCRIPT and by_quick["workdir"] == str(tmp_path / "sub")
    assert by_quick["output"] == str(tmp_path / "sub" / "logs" / "%x-%j.out")


@pytest.mark.parametrize(
    "words",
    [
        ["--gpus", "1", "python", "x.py"],  # no '--': the first word may be a spec
        ["script.sh", "--gpus", "2"],  # words after a script: options to the full one
        ["bad.sh"],  # a directive refused: the full command line names it
        ["--wait", "script.sh"],
        ["--wait", "--", "sleep", "1"],
        ["--gpus", "two", "--", "sleep", "1"],  # (the full command line names the error)
        ["-HJ", "x", "--", "sleep", "1"],
        ["--help"],
        ["--gpus", "1", "--"],
        ["--", "job.yaml"],
        ["--", "script.sh"],  # a file here: a batch script, its directives read
        ["--gpus"],
    ],
)
def test_words_the_quick_path_does_not_take_go_to_the_full_command_line(
    words: list[str], service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "script.sh").write_text("#!/bin/sh\n#SBATCH --gpus=2\nsleep 1\n")
    (tmp_path / "bad.sh").write_text("#!/bin/sh\n#SBATCH --gpus=2 --frobnicate\nsleep 1\n")
    assert parse_submit(words) is None
    assert quick_submit(words) is None and Recorder.bodies == []  # nothing sent


def test_a_refusal_is_said_as_the_full_command_line_says_it(
    service: str, capsys: pytest.CaptureFixture[str]
) -> None:
    words = ["--name", "refused", "--", "sleep", "1"]
    full = subprocess.run(
        [sys.executable, "-m", "corral.cli", "submit", *words],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert quick_submit(words) == full.returncode == 2
    said = capsys.readouterr().err
    assert said == full.stderr and said.startswith("error: ") and "gpus" in said


def test_the_corral_command_submits_without_typer_rich_or_numpy(
    service: str, tmp_path: Path
) -> None:
    """The installed command's path, in a process of its own: what it imported. Nor
    ``http.client`` (with the ``email`` package), ``ssl`` or ``urllib.parse``: a
    third of a submission's time before :mod:`corral.api.http_wire`; nor ``json``
    and ``socket`` with the ``re`` and ``enum`` they import (a fifth of what was
    left, before :mod:`corral.wire_json` and ``_socket``)."""
    probe = (
        "import sys\n"
        "from corral.quick_verbs import main\n"
        "sys.argv = ['corral', 'submit', '--gpus', '1', '--', 'sleep', '1']\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    heavy = {'typer', 'rich', 'numpy', 'pandas', 'pydantic', 'corral.cli',\n"
        "             'http.client', 'email', 'ssl', 'urllib.parse', 'typing', 'json',\n"
        "             're', 'enum', 'socket', 'functools'}\n"
        "    print(sorted(m for m in sys.modules if m in heavy), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "submitted job 1 (job)\n"
    assert done.stderr.strip() == "[]"
    # a batch script too (its directives read without pydantic)
    (tmp_path / "job.sh").write_text(SCRIPT)
    script = probe.replace("'--gpus', '1', '--', 'sleep', '1'", "'job.sh'")
    stdlib = "'http.client', 'email', 'ssl', 'urllib.parse', 'typing', 'json',\n"
    script = script.replace(stdlib, "")
    script = script.replace("             're', 'enum', 'socket', 'functools'}", "}")
    (tmp_path / "sub").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr.strip() == "[]", done.stderr
    assert done.stdout == "submitted job 2 (prep)\n"
    # words it does not take run the full command line (help narrower than its pages)
    probe = probe.replace("'submit', '--gpus', '1', '--', 'sleep', '1'", "'nodes', '--help'")
    narrow = {**os.environ, "COLUMNS": "60"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=narrow)
    assert "Usage" in done.stdout and "corral.cli" in done.stderr


BULK = [
    ["cancel", "12"],  # one job: its own route, its state after
    ["cancel", "50"],  # an array's id: all its tasks, in one request
    ["hold", "12", "13", "14"],
    ["cancel", "-u", "alice", "-t", "PD"],
    ["release", "--name=bert", "--json"],
    ["suspend", "-n", "123"],  # (a name that is a number is the option's value)
    ["cancel", "9", "10"],  # bob's job 9 left alone: exit 5, as the full command line
    ["requeue", "7"],
]


@pytest.mark.parametrize("words", BULK)
def test_the_quick_bulk_verbs_send_and_say_what_the_full_command_line_does(
    words: list[str], service: str
) -> None:
    quick = subprocess.run(
        [sys.executable, "-m", "corral.quick_verbs", *words], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    sent = (list(Recorder.paths), list(Recorder.bodies))
    Recorder.paths, Recorder.bodies = [], []
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # (piped: 250 wide)
    full = subprocess.run(
        [sys.executable, "-m", "corral.cli", *words],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert sent == (Recorder.paths, Recorder.bodies)
    assert (quick.returncode, quick.stdout, quick.stderr) == (
        full.returncode, full.stdout, full.stderr,
    )  # fmt: skip


def test_the_quick_bulk_verbs_pass_what_they_do_not_take() -> None:
    from corral.quick_verbs import bulk_words

    assert bulk_words(["12_3"]) is None  # (an array's task: the full command line)
    assert bulk_words(["--help"]) is None
    assert bulk_words(["-u"]) is None
    assert bulk_words(["1", "-u", "al"]) == ([1], {"user": "al"})


@pytest.mark.parametrize(
    ("listed", "words"),
    [
        (620, []),  # plain columns: no Typer, no Rich
        (620, ["-t", "PD,R", "-u", "alice", "-o", "id,name,left,steps,submit"]),
        (620, ["--limit", "600", "--mine"]),  # cut: said on stderr
        (12, []),  # a screenful: the full command line's table, drawn without Rich
        (12, ["--width", "60"]),  # too wide for the terminal: Rich wraps it
        (12, ["--json", "--limit=5"]),
        (12, ["-o", "id,nope"]),  # refused, as the full command line refuses it
    ],
)
def test_the_quick_queue_prints_what_the_full_command_line_prints(
    listed: int, words: list[str], service: str
) -> None:
    Recorder.listed = listed
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if words[:1] == ["--width"]:
        env["COLUMNS"], words = words[1], []
    full = subprocess.run(
        [sys.executable, "-m", "corral.cli", "queue", *words],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    probe = quick_probe(["queue", *words], {"typer", "rich", "re", "functools", "typing"})
    quick = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env
    )
    *said, imported = quick.stderr.splitlines()
    assert (quick.returncode, quick.stdout) == (full.returncode, full.stdout)
    assert "\n".join(said).split() == full.stderr.split()  # (the full one wraps at 80)
    if "COLUMNS" in env:  # Rich only to wrap
        assert "rich" in imported
    elif "--json" in words:  # json, with its re and functools
        assert "rich" not in imported and "typer" not in imported
    else:
        assert imported == "[]"
    if listed > 500 and not words:
        assert "x\\x1b[2J" in quick.stdout and quick.stdout.startswith("620 jobs\n")


SHOWN = {
    "id": 77, "name": "prep", "user": "alice", "status": "RUNNING", "reason": None,
    "command": ["/bin/bash", "/home/alice/prep.sh"], "gpus": 0, "gpu_type": None,
    "assigned_gpus": [], "spec": {"cpus": 2, "output": "/home/alice/prep-77.out"},
    "priority": 0, "failures": 1, "max_retries": 2, "preemptions": 0, "steps": 0,
    "total_steps": None, "throughput": None, "loss": None, "submit_time": 1.8e9,
    "first_start": 1.8e9 + 5, "end_time": None, "remaining": None,
    "policy_view": {}, "attempts": [
        {"number": 1, "phase": "main", "gpus": [], "start_time": 1.8e9 + 5,
         "end_time": 1.8e9 + 9, "cause": "user_error", "detail": "exit code 1 \x1b[2J"},
        {"number": 2, "phase": "main", "gpus": [], "start_time": 1.8e9 + 15,
         "end_time": None, "cause": None, "detail": None},
    ],
}  # fmt: skip
NODES = [
    {"name": "gpu-a", "gpu_type": "V100", "virtual": True, "gpus": 2, "gpus_in_use": 1,
     "state": "up", "jobs": [3], "reason": None},
    {"name": "gpu-b", "gpu_type": "K80", "virtual": False, "gpus": 4, "gpus_in_use": 0,
     "state": "drained", "jobs": [], "reason": "fan"},
]  # fmt: skip


@pytest.mark.parametrize(
    "words",
    [
        ["show", "77"],
        ["show", "--json", "77"],
        ["nodes"],
        ["nodes", "--json"],
        ["logs", "77"],
        ["logs", "--json", "--attempt", "2", "77"],
        ["logs", "-f", "78"],  # (the job ended: following ends)
        ["history"],
        ["history", "--all-users", "-S", "2026-11-01", "-s", "F,CA", "--since", "2d"],
        ["history", "--json", "-u", "bob"],
        ["history", "-S", "yesterday"],  # (refused, as the full command line refuses it)
        ["set-priority", "6", "-5"],
        ["set-priority", "--json", "6", "10"],
        ["drain", "gpu-a", "--reason", "fan"],
        ["undrain", "--json", "gpu-a"],
    ],
)
def test_show_and_nodes_print_on_the_quick_path_what_the_full_command_line_prints(
    words: list[str], service: str
) -> None:
    ended = {**SHOWN, "id": 78, "status": "SUCCEEDED"}
    Recorder.pages = {"/v1/jobs/77": SHOWN, "/v1/jobs/78": ended, "/v1/nodes": NODES}
    Recorder.pages["/v1/history"] = [
        {"id": k, "name": f"job-{k}", "user": ("alice", "bob")[k % 2], "status": "FAILED",
         "gpus": k % 3, "submit_time": 1.8e9 + k, "wait": 3.0 * k, "elapsed": 60.0 * k,
         "gpu_hours": k / 7, "attempts": 1 + k % 2, "exit_code": None if k % 4 else 1}
        for k in range(1, 13)
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # (piped: 250 wide)
    full = subprocess.run(
        [sys.executable, "-m", "corral.cli", *words],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    probe = quick_probe(words, {"typer", "rich", "pydantic", "corral.cli"})
    quick = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env
    )
    assert (quick.returncode, quick.stdout) == (full.returncode, full.stdout)
    assert quick.stderr.splitlines()[-1] == "[]"  # (what it imported of those)
    if words == ["show", "77"]:
        assert "  gpus      0 (CPU-only, 2 CPUs)\n" in quick.stdout
        assert "exit code 1 \\x1b[2J" in quick.stdout  # (escaped: it cannot clear a screen)
    if words[0] == "history" and "--json" not in words:
        assert quick.stderr.splitlines()[:-1] == full.stderr.splitlines()
        if words == ["history"]:
            assert "per user" in quick.stdout and "│  1.71 │" in quick.stdout  # (right)
        elif "yesterday" in words:
            assert "yesterday" in full.stderr and quick.returncode == full.returncode == 2
    if words == ["set-priority", "6", "-5"]:
        assert quick.stdout == "job 6: priority -5\n"
    if words[0] == "drain":
        assert quick.stdout == "node gpu-a is drained\n" and Recorder.bodies[-1] == {
            "reason": "fan"
        }
    if words[0] == "logs":  # the note on its --output, and the log as written
        assert quick.stderr.splitlines()[:-1] == full.stderr.splitlines()
        assert "writes its output to /home/alice/prep-77.out" in full.stderr
        assert "step 2 " in quick.stdout  # (raw where piped, as Slurm's file is)
    if words == ["nodes"]:
        row = next(line for line in quick.stdout.splitlines() if "gpu-b" in line)
        assert row.split("│")[1:-1] == [" gpu-b ", " K80" + " " * 12, " 4    ", " 0      ",
                                         " drained ", "      ", " fan    "]  # fmt: skip


@pytest.mark.parametrize(
    "words", [["77", "88"], ["--url", "77"], ["--bogus", "77"], [], ["77", "--url"]]
)
def test_show_words_the_quick_path_does_not_take_go_to_the_full_command_line(
    words: list[str],
) -> None:
    from corral.quick_verbs import quick_show

    assert quick_show(words) is None


def test_a_reader_that_goes_ends_the_command_quietly(service: str) -> None:
    """``corral show 77 | head -1``: the reader closes the pipe; the command ends with
    128 + SIGPIPE and says nothing (no traceback), as C programs do."""
    Recorder.pages = {"/v1/jobs/77": SHOWN}
    read, write = os.pipe()
    os.close(read)  # (gone before anything is written: the first write fails)
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import sys; sys.argv = ['corral', 'show', '77'];"
             "from corral.quick_verbs import main; main()"],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
