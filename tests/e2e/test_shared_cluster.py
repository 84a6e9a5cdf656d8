"""A cluster shared by several people: one server per store, jobs confined and
isolated, bounded input, and errors as messages (``corral serve`` on loopback)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.runtime.execution.executor import group_alive
from corral.runtime.execution.identity import cannot_run_python, lookup
from corral.testing.service_process import ServiceProcess
from tests.runtime.harness import TERMINAL, TOKENS, wait_for

PY = sys.executable


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Any]:
    made: list[ServiceProcess] = []

    def make(policy: str = "fifo", folder: Path | None = None, **settings: Any) -> ServiceProcess:
        settings.setdefault("retry", {"backoff": 0.2, "backoff_max": 1})
        settings.setdefault("stop_grace", 5)
        service = ServiceProcess(folder or tmp_path, policy, users=TOKENS, **settings)
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


def wait_done(service: ServiceProcess, job_id: int, timeout: float = 60) -> dict[str, Any]:
    wait_for(lambda: service.admin.job(job_id)["status"] in TERMINAL, timeout, f"job {job_id}")
    return service.admin.job(job_id)


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
                state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
                if marker.encode() in cmdline and state not in ("Z", "X"):
                    found.append(int(entry.name))
    return found


# --------------------------------------------------------- one server per store
def test_a_second_server_on_the_same_store_exits_at_once_naming_the_holder(
    services: Any, tmp_path: Path
) -> None:
    first = services()
    first.start()
    job = first.client.submit({"command": ["sleep", "30"], "name": "held"})
    wait_for(lambda: first.client.job(job["id"])["status"] == "RUNNING", 30, "job running")
    events_before = len(first.events())
    second = services(name="second")  # same folder: same state_dir and store, another port
    second.launch()
    assert second.proc is not None
    assert second.proc.wait(30) == 2
    log = second.log.read_text()
    assert "another corral service holds this store" in log
    assert f"pid {first.proc.pid}" in log and first.url in log
    assert "Traceback" not in log
    after = [(e.kind, e.detail) for e in first.events()]
    assert len(after) == events_before, after  # the refused server wrote nothing
    same_port = services(name="third", port=first.port)  # same store and port
    same_port.launch()
    assert same_port.proc is not None and same_port.proc.wait(30) == 2
    assert len(first.events()) == events_before
    elsewhere = services(folder=tmp_path / "other", port=first.port)  # own store, port taken
    elsewhere.launch()
    assert elsewhere.proc is not None and elsewhere.proc.wait(30) == 2
    assert "cannot listen" in elsewhere.log.read_text()
    assert not (tmp_path / "other" / "state" / "corral.db").exists()  # bound before opening
    starts = [e for e in first.events("start") if e.job_id == job["id"]]
    assert len(starts) == 1


def test_a_standby_takes_over_when_the_holder_dies(services: Any) -> None:
    first = services()
    first.start()
    job = first.client.submit({"command": ["sleep", "4"], "name": "survivor"})
    wait_for(lambda: first.client.job(job["id"])["status"] == "RUNNING", 30, "job running")
    standby = services(name="standby")
    standby.launch("--standby")
    wait_for(lambda: "standby: waiting" in standby.log.read_text(), 30, "the standby to wait")
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{standby.url}/v1/health", timeout=1)
    first.kill9()
    standby.wait_ready(60)
    done = wait_done(standby, job["id"])
    assert done["status"] == "SUCCEEDED" and len(done["attempts"]) == 1  # adopted, not rerun


# ------------------------------------------------------------------ isolation
def test_state_and_config_are_private_and_jobs_run_outside_them(
    services: Any, tmp_path: Path
) -> None:
    service = services(env={"CORRAL_TEST_SECRET": "s3cret-of-the-service"})
    service.config.chmod(0o644)
    service.start()
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE(service.config.stat().st_mode) == 0o600
    code = "import os, json; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"
    job = service.client.submit({"command": [PY, "-c", code], "env": {"API_KEY": "alice-key"}})
    done = wait_done(service, job["id"])
    assert done["status"] == "SUCCEEDED"
    seen = httpx.get(
        f"{service.url}/v1/jobs/{job['id']}/logs",
        headers={"Authorization": f"Bearer {TOKENS['alice']}"},
    ).json()
    state = (tmp_path / "state").resolve()
    assert not Path(seen["cwd"]).resolve().is_relative_to(state)
    assert Path(seen["cwd"]).name == str(job["id"])
    assert "CORRAL_TEST_SECRET" not in seen["env"]  # the service's environment stays its own
    assert seen["env"]["API_KEY"] == "alice-key"
    bob = httpx.get(
        f"{service.url}/v1/jobs/{job['id']}", headers={"Authorization": f"Bearer {TOKENS['bob']}"}
    ).json()
    # private_data (the default): not even the variables' names, nor the command
    assert "alice-key" not in str(bob) and bob["spec"]["env"] == "(hidden)"
    assert "API_KEY" not in str(bob) and bob["command"] == ["(hidden)"]
    assert service.admin.job(job["id"])["spec"]["env"] == {"API_KEY": "alice-key"}
    assert service.client.job(job["id"])["spec"]["env"] == {"API_KEY": "alice-key"}
    log = service.log.read_text()
    assert "not isolated" in log or "run as root" in log


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as other users only under root")
def test_as_root_jobs_run_as_their_users_unix_account(
    enterable_dir: Path, services: Any, tmp_path: Path
) -> None:  # (the folder set up first, so removed after the services end)
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' account")
    accounts = {"alice": "nobody", "bob": "nobody", "root": "nobody"}
    refused = services(name="refused", unix_users=accounts)  # jobs_dir beside a private tmp
    refused.launch()
    assert refused.proc is not None and refused.proc.wait(30) == 2
    assert "who cannot enter" in refused.log.read_text()
    jobs = enterable_dir  # where the admin would put it: every unix_user may enter
    if cannot_run_python(lookup("nobody")) is not None:  # a Python under /root, say
        strict = services(name="strict", unix_users=accounts, jobs_dir=str(jobs))
        strict.launch()
        assert strict.proc is not None and strict.proc.wait(30) == 2
        assert "cannot run this service's Python" in strict.log.read_text()
    service = services(unix_users=accounts, jobs_dir=str(jobs), require_reachable_python=False)
    service.start()
    # the service's Python may live where 'nobody' cannot go: probe with the shell
    probe = (
        'echo uid $(id -u) cwd $(pwd); for f in "$@"; do '
        'if cat "$f" >/dev/null 2>&1; then echo READ "$f"; else echo DENIED "$f"; fi; done'
    )
    db = tmp_path / "state" / "corral.db"
    job = service.client.submit(
        {"command": ["sh", "-c", probe, "probe", str(service.config), str(db)], "name": "probe"}
    )
    done = wait_done(service, job["id"])
    assert done["status"] == "SUCCEEDED", done
    text = service.client.logs(job["id"], 0, None).text
    assert f"uid {nobody.pw_uid} cwd {jobs}/{job['id']}" in text
    assert "READ" not in text and text.count("DENIED") == 2
    assert "not isolated" not in service.log.read_text()
    service.close()
    shutil.rmtree(jobs, ignore_errors=True)


# ---------------------------------------------------------- nothing escapes
def test_processes_a_job_leaves_behind_end_before_its_gpus_are_free(services: Any) -> None:
    service = services()
    service.start()
    job = service.client.submit({"command": ["sh", "-c", "sleep 47.31 & sleep 1"]})
    done = wait_done(service, job["id"])
    assert done["status"] == "SUCCEEDED"
    assert processes_with("sleep 47.31") == []
    assert "left running" in (done["attempts"][0]["detail"] or "")


def test_a_killed_launcher_takes_its_job_with_it_and_the_next_attempt_never_overlaps(
    services: Any,
) -> None:
    service = services()
    service.start()
    job = service.client.submit(
        {"command": ["sh", "-c", "sleep 61.7 & sleep 62.3; true"], "max_retries": 1}
    )
    first = wait_for(
        lambda: [a for a in service.attempts() if a.job_id == job["id"] and a.pid], 30, "launch"
    )[0]
    wait_for(lambda: processes_with("sleep 61.7"), 10, "the job's processes")
    os.kill(first.pid, 9)  # the launcher, not the job
    second = wait_for(
        lambda: [a for a in service.attempts() if a.job_id == job["id"] and a.number == 2], 60
    )[0]
    assert not group_alive(first.pid)  # every process of attempt 1 ended before attempt 2
    assert second.start_time >= (service.attempts()[0].end_time or 0)


# -------------------------------------------------------------- bounded input
def test_oversized_and_non_finite_input_is_refused_and_nothing_is_stored(services: Any) -> None:
    service = services()
    service.start()
    headers = {"Authorization": f"Bearer {TOKENS['alice']}", "Content-Type": "application/json"}
    post = lambda body: httpx.post(f"{service.url}/v1/jobs", content=body, headers=headers)  # noqa: E731
    big = '{"command": ["echo", "' + "x" * 10_000_000 + '"]}'
    assert post(big).status_code == 413
    long_command = '{"command": ["echo", "' + "x" * 20_000 + '"]}'
    answer = post(long_command)
    assert answer.status_code == 422 and "command" in answer.text
    big_env = '{"command": ["true"], "env": {"K": "' + "v" * 100_000 + '"}}'
    assert post(big_env).status_code == 422
    for bad in ("NaN", "Infinity", "-Infinity", "1e999"):
        answer = post('{"command": ["true"], "weight": ' + bad + "}")
        assert answer.status_code == 422, (bad, answer.text)
        assert "weight" in answer.text
    assert service.admin.jobs("all", False) == []
    assert "Traceback" not in service.log.read_text()


def test_a_user_may_not_flood_the_queue(services: Any) -> None:
    service = services(max_jobs_per_user=3)
    service.start()
    for _ in range(3):
        service.client.submit({"command": ["sleep", "30"]})
    answer = httpx.post(
        f"{service.url}/v1/jobs",
        json={"command": ["true"]},
        headers={"Authorization": f"Bearer {TOKENS['alice']}"},
    )
    assert answer.status_code == 429 and "max_jobs_per_user" in answer.text
    assert len(service.admin.jobs("all", False)) == 3


# -------------------------------------------------- errors are messages
def corral(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "corral.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def test_bad_files_and_settings_give_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "latin.yaml").write_bytes(b"name: caf\xe9\ncommand: [true]\n")
    base = "port: 0\ngpus: [{type: V100, count: 1}]\n"
    (tmp_path / "twins.yaml").write_text(
        base + "users: [{name: a, token: same-token-1}, {name: b, token: same-token-1}]\n"
    )
    (tmp_path / "mysql.yaml").write_text(
        base + "store: mysql://u@h/db\nusers: [{name: a, token: a-token-1}]\n"
    )
    locked = tmp_path / "locked"
    locked.write_text("a file, not a folder")
    (tmp_path / "unwritable.yaml").write_text(
        base + f"state_dir: {locked}/state\nusers: [{{name: a, token: a-token-1}}]\n"
    )
    cases = {
        ("submit", "missing.yaml"): "missing.yaml: cannot read it",
        ("submit", "latin.yaml"): "latin.yaml:1: not UTF-8",
        ("serve", "-c", "twins.yaml"): "have the same token",
        ("serve", "-c", "mysql.yaml"): "corral runs on SQLite",
        ("serve", "-c", "unwritable.yaml"): "state_dir: cannot use",
    }
    for args, message in cases.items():
        done = corral(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout


def test_negative_priority_and_state_all_from_the_cli(services: Any) -> None:
    service = services()
    service.start()
    env = {**os.environ, "CORRAL_URL": service.url, "CORRAL_TOKEN": TOKENS["alice"]}
    run = lambda *a: subprocess.run(  # noqa: E731
        [PY, "-m", "corral.cli", *a], capture_output=True, text=True, env=env, timeout=60
    )
    quick = service.client.submit({"command": ["true"], "name": "quick"})
    wait_done(service, quick["id"])
    slow = service.client.submit({"command": ["sleep", "30"], "name": "slow"})
    done = run("set-priority", str(slow["id"]), "-5")
    assert done.returncode == 0, done.stderr
    assert service.client.job(slow["id"])["priority"] == -5
    listed = run("queue", "--state", "all", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {"quick", "slow"} <= {j["name"] for j in json.loads(listed.stdout)}


def test_a_plain_job_in_a_prerun_runs_once(services: Any) -> None:
    service = services(prerun={"min_gpus": 2, "steps": 2})
    service.start()
    job = service.client.submit({"command": ["true"], "gpus": 2})
    done = wait_done(service, job["id"])
    assert done["status"] == "SUCCEEDED"
    assert len(done["attempts"]) == 1 and done["attempts"][0]["phase"] == "prerun"


def test_a_preempted_job_says_preempted(services: Any) -> None:
    service = services("las", stop_grace=2, policy_options={"quantum": 1.0})
    service.start()
    first = service.client.submit({"command": ["sleep", "60"], "gpus": 4})
    wait_for(lambda: service.client.job(first["id"])["status"] == "RUNNING", 30)
    time.sleep(1.5)
    service.client.submit({"command": ["sleep", "60"], "gpus": 4})
    wait_for(
        lambda: service.client.job(first["id"])["reason"] == "Preempted", 30, "Preempted reason"
    )


def test_cpus_and_memory_limit_the_job(services: Any) -> None:
    """Without delegated cgroups v2: CPU affinity, and the memory held by a v1 memory
    group where that controller is mounted and the service is root (as on this test
    machine), else by RLIMIT_DATA."""
    service = services()
    service.start()
    probe = (
        "import os, resource; print('cpus', len(os.sched_getaffinity(0)), "
        "'data', resource.getrlimit(resource.RLIMIT_DATA)[0])"
    )
    job = service.client.submit({"command": [PY, "-c", probe], "cpus": 1, "memory": "512M"})
    done = wait_done(service, job["id"])
    assert done["status"] == "SUCCEEDED", done
    text = service.client.logs(job["id"], 0, None).text
    in_cgroup = Path("/sys/fs/cgroup/corral").is_dir()
    v1_memory = os.geteuid() == 0 and Path("/sys/fs/cgroup/memory/cgroup.procs").exists()
    if in_cgroup or v1_memory:
        assert "cpus 1 data -1" in text or in_cgroup, text  # (a cgroup holds it, no rlimit)
    if not in_cgroup and not v1_memory:
        assert f"cpus 1 data {512 * 2**20}" in text, text
    else:
        assert "cpus 1" in text, text
    hog = service.client.submit(
        {
            "command": [PY, "-c", "x = bytearray(400 * 2**20); print('allocated')"],
            "memory": "256M",
            "max_retries": 0,
        }
    )
    ended = wait_done(service, hog["id"])
    assert ended["status"] == "FAILED" and ended["attempts"][0]["cause"] == "oom", ended
