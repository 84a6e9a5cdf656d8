"""The command line's exit codes say what happened, so scripts can tell failures
apart: 0 done, 1 the operation failed, 2 usage or input, 3 not found, 4 service
unreachable, 5 permission denied; ``submit --wait`` exits with the job's code."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.testing.service_process import ServiceProcess
from tests.runtime.harness import TOKENS

PY = sys.executable


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    made = ServiceProcess(
        tmp_path_factory.mktemp("exit-codes"), "fifo", users=TOKENS,
        gpus=[{"type": "V100", "count": 1}],
    )  # fmt: skip
    made.start()
    yield made
    made.close()


def corral(service: ServiceProcess, *args: str, token: str | None = None) -> tuple[int, str]:
    env = {
        **os.environ,
        "CORRAL_URL": service.url,
        "CORRAL_TOKEN": token or TOKENS["alice"],
    }
    done = subprocess.run(
        [PY, "-m", "corral.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )
    return done.returncode, done.stdout + done.stderr


def test_each_kind_of_failure_has_its_exit_code(service: ServiceProcess) -> None:
    assert corral(service, "--version")[0] == 0
    code, said = corral(service, "show", "9999")
    assert code == 3 and "9999" in said
    code, said = corral(service, "queue", token="not-a-token")
    assert code == 5 and "token" in said.lower()
    code, said = corral(service, "submit", "--gpus", "-1", "--", "true")
    assert code == 2, said
    code, said = corral(service, "queue", "--nosuchflag")
    assert code == 2, said
    env_url = ServiceProcess.__new__(ServiceProcess)
    env_url.url = "http://127.0.0.1:9"  # nothing listens there
    code, said = corral(env_url, "queue")
    assert code == 4 and "cannot reach" in said
    # a request the service refuses in the job's state: the operation failed
    code, said = corral(service, "submit", "--wait", "--max-retries", "0", "--", PY, "-c", "pass")
    assert code == 0, said
    job = int(said.split("submitted job ")[1].split()[0])
    code, said = corral(service, "resume", str(job))
    assert code == 1 and "409" in said


def test_submit_wait_exits_with_the_jobs_code(service: ServiceProcess, tmp_path: Path) -> None:
    code, said = corral(
        service, "submit", "--wait", "--max-retries", "0", "--", PY, "-c", "import sys; sys.exit(7)"
    )
    assert code == 7, said
    assert "FAILED (exit code 7)" in said


def test_completion_is_offered() -> None:
    done = subprocess.run([PY, "-m", "corral.cli", "--help"], capture_output=True, text=True)
    assert "--install-completion" in done.stdout


def _json_out(service: ServiceProcess, *args: str, token: str | None = None) -> object:
    """Run a command with --json and parse its stdout alone (stderr is kept apart)."""
    import json

    env = {**os.environ, "CORRAL_URL": service.url, "CORRAL_TOKEN": token or TOKENS["alice"]}
    cut = args.index("--") if "--" in args else len(args)  # the flag goes before a command
    done = subprocess.run(
        [PY, "-m", "corral.cli", *args[:cut], "--json", *args[cut:]],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_verbs_that_print_a_result_print_json_when_asked(service: ServiceProcess) -> None:
    import json

    code, said = corral(service, "submit", "--wait", "--", PY, "-c", "print('hello there')")
    assert code == 0, said
    done = int(said.split("submitted job ")[1].split()[0])
    lines = _json_lines(service, "logs", str(done))
    assert lines, "no log lines"
    pieces = [json.loads(line) for line in lines]
    assert pieces and all(p["job"] == done and p["attempt"] >= 1 for p in pieces)
    assert "hello there" in "".join(p["text"] for p in pieces)
    # a job that waits behind a long one on the single GPU, so it can be changed
    corral(service, "submit", "--", PY, "-c", "import time; time.sleep(60)")
    job = _json_out(service, "submit", "--", PY, "-c", "pass")
    job_id = int((job[0] if isinstance(job, list) else job)["id"])  # type: ignore[index]
    priority = _json_out(service, "set-priority", str(job_id), "--", "-2")
    assert isinstance(priority, dict) and priority["priority"] == -2
    cancelled = _json_out(service, "cancel", str(job_id))
    assert isinstance(cancelled, dict) and cancelled["status"] == "CANCELLED"
    nodes = _json_out(service, "nodes")
    name = nodes[0]["name"]  # type: ignore[index]
    node = _json_out(service, "drain", name, "--reason", "test", token=TOKENS["root"])
    assert isinstance(node, dict) and node["state"] in ("draining", "drained")
    node = _json_out(service, "undrain", name, token=TOKENS["root"])
    assert isinstance(node, dict) and node["state"] == "up"


def _json_lines(service: ServiceProcess, *args: str) -> list[str]:
    env = {**os.environ, "CORRAL_URL": service.url, "CORRAL_TOKEN": TOKENS["alice"]}
    done = subprocess.run(
        [PY, "-m", "corral.cli", *args, "--json"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_acting_on_another_users_job_exits_5_whatever_the_verb(service: ServiceProcess) -> None:
    """cancel, hold, suspend and requeue of alice's job by bob: each refused with 5
    (requeue, asked as a selection, once exited 0 with the job 'left alone')."""
    code, said = corral(service, "submit", "--", PY, "-c", "import time; time.sleep(60)")
    assert code == 0, said
    job = said.split("submitted job ")[1].split()[0]
    for verb in ("cancel", "hold", "suspend", "requeue"):
        code, said = corral(service, verb, job, token=TOKENS["bob"])
        assert code == 5, (verb, code, said)
    assert corral(service, "cancel", job)[0] == 0


def test_a_newline_in_a_command_forges_no_line_of_show(service: ServiceProcess) -> None:
    """A user's command holding a newline and a terminal escape is shown to an admin
    escaped, on its own line: no forged 'corral: job 1 CANCELLED by admin'."""
    forged = "x\nFAKE corral: job 1 CANCELLED by admin\x1b[2J"
    code, said = corral(service, "submit", "--hold", "--", "echo", forged)
    assert code == 0, said
    job = said.split("submitted job ")[1].split()[0]
    code, shown = corral(service, "show", job, token=TOKENS["root"])
    assert code == 0, shown
    assert not any(line.startswith("FAKE") for line in shown.splitlines()), shown
    assert "\\nFAKE corral" in shown and "\x1b" not in shown and "\\x1b[2J" in shown
    corral(service, "cancel", job)


def test_a_lock_out_or_too_many_jobs_exits_6() -> None:
    """429 (a lock-out after wrong tokens, or too many jobs queued) is its own case for
    a script: wait and try again, as the README's table says."""
    from corral.api.client import Answer, error_of
    from corral.api.http_wire import Headers

    answer = Answer(429, "Too Many Requests", Headers(), b'{"detail": "locked out for 4 s"}')
    error = error_of(answer)
    assert error.exit_code == 6 and "locked out for 4 s" in str(error)
