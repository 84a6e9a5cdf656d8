"""End to end: ``corral serve`` on 127.0.0.1 with 4 virtual GPUs of two types,
real PyTorch jobs, the CLI, preemption, and ``kill -9`` of the service."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from corral.cli import app
from corral.testing.service_process import ServiceProcess
from tests.runtime.harness import PY, TERMINAL, TOKENS, check_history, wait_for

pytest.importorskip("torch")
pytest.importorskip("sklearn")


class Service(ServiceProcess):
    """A ``corral serve`` process with this test module's users and settings."""

    def __init__(
        self, folder: Path, policy: str, options: dict[str, Any], store: str | None = None
    ) -> None:
        super().__init__(
            folder,
            policy,
            options,
            users=TOKENS,
            store=store,
            stop_grace=20,
            retry={"backoff": 0.5, "backoff_max": 2},
        )

    def wait_done(self, ids: list[int], timeout: float) -> list[dict[str, Any]]:
        def done() -> bool:
            return all(self.client.job(j)["status"] in TERMINAL for j in ids)

        wait_for(done, timeout, f"jobs {ids} to end")
        return [self.client.job(j) for j in ids]

    def result(self, job_id: int) -> dict[str, Any]:
        path = self.folder / "state-jobs" / str(job_id) / "checkpoint" / "result.json"
        return json.loads(path.read_text())


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[Any]:
    made: list[Service] = []

    def make(policy: str, store: str | None = None, **options: Any) -> Service:
        service = Service(tmp_path, policy, options, store=store)
        service.start()
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


def example(module: str, steps: int, step_time: float = 0.02) -> list[str]:
    return [
        PY,
        "-m",
        f"corral.examples.{module}",
        "--steps",
        str(steps),
        "--step-time",
        str(step_time),
        "--log-every",
        "50",
    ]


def attempt_log(service: ServiceProcess, job_id: int, attempt: dict[str, Any]) -> str:
    return service.client.logs(job_id, attempt=attempt["number"]).text


def digits(steps: int, step_time: float = 0.02) -> list[str]:
    return example("digits_cnn", steps, step_time)


def transformer(steps: int, step_time: float = 0.02) -> list[str]:
    return example("tiny_transformer", steps, step_time)


@pytest.mark.long  # five minutes; tiresias live: test_every_policy_live.py; resumption: below
def test_ten_mixed_jobs_under_tiresias(make_service: Any, tmp_path: Path) -> None:
    service = make_service("tiresias-las", queues=2, thresholds=[8])
    assert service.users["alice"] == TOKENS["alice"]
    runner = CliRunner()
    env = {"CORRAL_URL": service.url, "CORRAL_TOKEN": TOKENS["alice"]}
    spec = tmp_path / "cnn.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "cnn-yaml",
                "command": digits(250),
                "gpus": 1,
                "gpu_type": "V100",
                "total_steps": 250,
            }
        )
    )
    submitted = runner.invoke(app, ["submit", str(spec)], env=env)
    assert submitted.exit_code == 0, submitted.output
    ids = [int(submitted.output.split()[2])]
    plain = runner.invoke(
        app,
        [
            "submit",
            "--gpus",
            "1",
            "--name",
            "plain",
            "--",
            PY,
            "-c",
            "import time; time.sleep(4); print('plain done')",
        ],
        env=env,
    )
    assert plain.exit_code == 0, plain.output
    ids.append(int(plain.output.split()[2]))
    specs = [
        {"name": "cnn-1", "command": digits(250), "gpus": 1},
        {"name": "cnn-2", "command": digits(250), "gpus": 1, "gpu_type": "V100"},
        {"name": "cnn-3", "command": digits(250), "gpus": 1},
        {"name": "cnn-gang", "command": digits(150), "gpus": 4},
        {"name": "tf-1", "command": transformer(200), "gpus": 2, "gpu_type": "K80"},
        {"name": "tf-2", "command": transformer(200), "gpus": 2},
        {"name": "tf-3", "command": transformer(150), "gpus": 1, "gpu_type": "K80"},
        {"name": "plain-2", "command": [PY, "-c", "import time; time.sleep(3)"], "gpus": 2},
    ]
    ids += [service.client.submit(s)["id"] for s in specs]
    queue = runner.invoke(app, ["queue"], env=env)
    assert queue.exit_code == 0 and "cnn-gang" in queue.output
    nodes = runner.invoke(app, ["nodes", "--json"], env=env)
    assert {n["gpu_type"] for n in json.loads(nodes.output)} == {"V100", "K80"}

    jobs = service.wait_done(ids, timeout=400)
    assert [j["status"] for j in jobs] == ["SUCCEEDED"] * 10, [
        (j["name"], j["reason"]) for j in jobs
    ]
    assert sum(j["preemptions"] for j in jobs) > 0, "tiresias should have preempted"
    attempts = service.attempts()
    check_history(attempts)
    slots = {0: "V100", 1: "V100", 2: "K80", 3: "K80"}
    for job in jobs:
        for a in job["attempts"]:
            if job["gpu_type"]:
                assert {slots[g] for g in a["gpus"]} == {job["gpu_type"]}
            assert len(a["gpus"]) == job["gpus"]
        if job["name"].startswith(("cnn", "tf")):
            steps = int(job["command"][job["command"].index("--steps") + 1])
            result = service.result(job["id"])
            assert result["final_step"] == steps
            if job["name"].startswith("cnn"):
                assert result["test_accuracy"] > 0.85
            else:
                assert result["test_loss"] < 0.8 * result["uniform_loss"]
    # Every job stopped at an iteration boundary resumes from exactly that step.
    # (That some job does is shown deterministically by the next test: here, on
    # a loaded machine, all preemptions may fall before training has begun.)
    for job in jobs:
        if not job["name"].startswith(("cnn", "tf")):
            continue
        for a, b in itertools.pairwise(job["attempts"]):
            stopped = re.search(r"stopping at step (\d+)", attempt_log(service, job["id"], a))
            if a["cause"] == "preempted" and stopped:
                assert f"resumed from step {stopped[1]} " in attempt_log(service, job["id"], b)
    logs = runner.invoke(app, ["logs", str(ids[1])], env=env)
    assert "plain done" in logs.output
    show = runner.invoke(app, ["show", str(ids[0])], env=env)
    assert "SUCCEEDED" in show.output and "attempts" in show.output
    node = json.loads(nodes.output)[0]["name"]
    refused = runner.invoke(app, ["drain", node], env=env)
    assert refused.exit_code != 0 and "only an admin" in str(refused.exception)
    admin = {**env, "CORRAL_TOKEN": TOKENS["root"]}
    drained = runner.invoke(app, ["drain", node, "--reason", "maintenance"], env=admin)
    assert drained.exit_code == 0 and f"node {node} is drained" in drained.output
    back = runner.invoke(app, ["undrain", node], env=admin)
    assert back.exit_code == 0 and f"node {node} is up" in back.output


def test_preempted_job_matches_an_uninterrupted_run(make_service: Any, tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    subprocess.run(
        digits(300, 0.0),
        env={**os.environ, "CORRAL_CHECKPOINT_DIR": str(reference)},
        check=True,
        capture_output=True,
    )
    expected = json.loads((reference / "result.json").read_text())

    service = make_service("las", quantum=1.0)
    long = service.client.submit({"name": "long", "command": digits(300), "gpus": 4})
    follow = subprocess.Popen(
        [PY, "-m", "corral.cli", "logs", "-f", str(long["id"])],
        env={**os.environ, "CORRAL_URL": service.url, "CORRAL_TOKEN": TOKENS["alice"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for(lambda: service.client.job(long["id"])["steps"] >= 60, 120, "progress")
    short = service.client.submit(
        {"name": "short", "gpus": 4, "command": [PY, "-c", "import time; time.sleep(1)"]}
    )
    jobs = service.wait_done([long["id"], short["id"]], timeout=240)
    assert [j["status"] for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    first, *rest = jobs[0]["attempts"]
    assert first["cause"] == "preempted" and rest
    assert first["exit_code"] == 75  # checkpointed and stopped at an iteration boundary
    assert rest[0]["steps_start"] >= 60  # resumed from the checkpoint, not from scratch
    got = service.result(long["id"])
    assert got["final_step"] == expected["final_step"] == 300
    assert abs(got["train_loss"] - expected["train_loss"]) < 1e-3
    assert abs(got["test_accuracy"] - expected["test_accuracy"]) < 0.02
    check_history(service.attempts())
    followed, _ = follow.communicate(timeout=60)  # `logs -f` ends with the job
    assert "stopping at step" in followed and "--- attempt 2 ---" in followed
    assert "resumed from step" in followed and '"final_step": 300' in followed


@pytest.mark.parametrize(
    "store_url",
    ["sqlite", pytest.param("postgresql", marks=pytest.mark.long)],  # (the store on PostgreSQL
    indirect=True,  # is tested in make test by tests/runtime/test_store_*.py)
)
def test_kill_9_and_restart_loses_nothing(store_url: str | None, make_service: Any) -> None:
    # store_url comes first so that its database outlives the service (teardown is LIFO)
    service = make_service("fifo", store=store_url)
    ids = [
        service.client.submit({"name": f"cnn-{k}", "command": digits(250, 0.05), "gpus": 1})["id"]
        for k in range(6)
    ]
    wait_for(lambda: sum(service.client.job(j)["steps"] > 20 for j in ids) >= 4, 120, "progress")
    running = [j for j in ids if service.client.job(j)["status"] == "RUNNING"]
    service.kill9()
    time.sleep(1.0)
    service.start()
    jobs = service.wait_done(ids, timeout=300)
    assert [j["status"] for j in jobs] == ["SUCCEEDED"] * 6
    # FIFO never preempts, so nothing was restarted: the running jobs were
    # adopted (or, had they ended while the service was down, their exit read)
    assert [len(j["attempts"]) for j in jobs] == [1] * 6
    adopted = {e.job_id for e in service.events("adopted")}
    assert adopted <= set(running) and len(adopted) >= 3
    for job in jobs:
        assert service.result(job["id"])["final_step"] == 250
    check_history(service.attempts())


def test_a_sigterm_stops_the_service_whole_and_its_running_job_goes_on(
    make_service: Any,
) -> None:
    """An operator's ``systemctl stop`` (SIGTERM): the service closes what it holds and
    says so, exits 0 rather than dying of the signal, and a job that was running goes
    on and is adopted by the next start."""
    service = make_service("fifo")
    go = service.folder / "go"  # (the job runs until the test has seen it adopted)
    work = [PY, "-c", f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.1)"]
    job = service.client.submit({"name": "through", "command": work, "gpus": 1})["id"]
    wait_for(lambda: service.client.job(job)["status"] == "RUNNING", 60, "the job to run")
    service.stop()
    assert service.proc is not None and service.proc.returncode == 0, service.log.read_text()
    assert "corral: stopped; 1 running job(s) go on" in service.log.read_text()
    service.start()
    wait_for(lambda: job in {e.job_id for e in service.events("adopted")}, 60, "the adoption")
    go.touch()
    (done,) = service.wait_done([job], timeout=120)
    assert done["status"] == "SUCCEEDED" and len(done["attempts"]) == 1, done
    service.stop()
    assert service.log.read_text().rstrip().endswith("corral: stopped")


def test_the_child_signal_wakes_the_loop_without_taking_a_lock() -> None:
    """The SIGCHLD handler runs in the main thread, perhaps while it is inside the very
    ``Event.set`` the wake takes (found hung in a full run): held, the handler must
    return at once, and the loop is woken all the same, by another thread."""
    import threading

    from corral.service import wake_on_signal

    event = threading.Event()
    handler = wake_on_signal(event.set)
    with event._cond:  # (the lock Event.set takes, held as by an interrupted set)
        done = threading.Event()
        caller = threading.Thread(target=lambda: (handler(17, None), done.set()))
        caller.start()
        assert done.wait(5), "the handler waited on the lock"
        assert not event.is_set()  # (not set under the held lock)
    assert event.wait(5)  # set once the lock is free, by the relay
