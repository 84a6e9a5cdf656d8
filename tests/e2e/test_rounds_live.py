"""Policies that plan rounds, live: ``corral serve --policy hare`` (and sched-allox,
sched-homo) on 4 virtual GPUs of two types runs jobs given as tasks as rounds of
one-GPU tasks in real processes; every job SUCCEEDS, the tasks of a round run on
both GPU types, and a job's result equals running each of its rounds on one
device. The loop's side at full size is in ``tests/runtime/test_round_policy.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.errors import CorralError
from corral.policies.rounds.planners import ROUND_PLANNERS
from corral.testing.service_process import ServiceProcess, wait_for
from corral.train import checkpoint
from corral.train.rounds import run_part, state_path
from corral.train.task import load_factory
from tests.runtime.harness import TERMINAL, TOKENS

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

FACTORY = "corral.examples.tasks:digits"
ROUND_STEPS = 6
JOBS: list[tuple[int, str | None]] = [
    (2, None),
    (3, None),
    (1, None),
    (2, "K80"),
    (3, None),
    (2, None),
]
"""(tasks per round, GPU type it is bound to)."""
CASES = {"hare": (JOBS[:3], 2), "sched-allox": (JOBS[:2], 1), "sched-homo": (JOBS[:2], 1)}
"""Policy -> (jobs, rounds each): enough for each planner's placement to show with real
processes. The loop's side (every job, every round, restarts) is run at full size in
virtual time: ``tests/runtime/test_round_policy.py``."""
V100 = {0, 1}
"""The service's GPUs are numbered type by type: V100 0-1, K80 2-3."""


def reference(folder: Path, seed: int, rounds: int) -> dict[str, Any]:
    """The job run with each round on one device (one task per round)."""
    for r in range(rounds):
        task = load_factory(FACTORY)(seed=seed, batch=16)
        run_part(task, folder, r, 0, 1, ROUND_STEPS, rounds)
    return torch.load(state_path(folder, rounds), weights_only=False)["model"]


def assert_as_on_one_device(folder: Path, job: int, seed: int, rounds: int) -> None:
    """The job's result (its checkpoint) is the one-device run's, up to float sums."""
    saved = checkpoint.load(folder / "state-jobs" / str(job) / "checkpoint")
    assert saved is not None and saved["step"] == ROUND_STEPS * rounds
    expected = reference(folder / f"alone-{job}", seed=seed, rounds=rounds)
    for key, value in expected.items():
        assert torch.allclose(saved["state"]["model"][key], value, rtol=1e-5, atol=1e-7), key


def submit_jobs(client: Any, jobs: list[tuple[int, str | None]], rounds: int) -> list[int]:
    """The jobs as digits tasks run as rounds (job k seeded k); their ids."""
    ids = []
    for k, (tasks, gpu_type) in enumerate(jobs):
        spec: dict[str, Any] = {
            "name": f"r{k}",
            "gpus": tasks,
            "task": {
                "factory": FACTORY,
                "steps": ROUND_STEPS * rounds,
                "round_steps": ROUND_STEPS,
                "kwargs": {"seed": k, "batch": 16},
            },
        }
        if gpu_type:
            spec["gpu_type"] = gpu_type
        ids.append(client.submit(spec)["id"])
    return ids


@pytest.mark.long  # (hare's rounds run live in make test with keepers, below)
@pytest.mark.parametrize("name", list(ROUND_PLANNERS))
def test_round_policy_runs_task_jobs_as_rounds_live(name: str, tmp_path: Path) -> None:
    jobs_asked, rounds_each = CASES[name]
    service = ServiceProcess(tmp_path, name, {}, users=TOKENS, workers={"standby": 1})
    try:
        service.start()
        client = service.client
        ids = submit_jobs(client, jobs_asked, rounds_each)
        wait_for(lambda: all(client.job(j)["status"] in TERMINAL for j in ids), 240, "jobs")
        jobs = [client.job(j) for j in ids]
        assert [j["status"] for j in jobs] == ["SUCCEEDED"] * len(jobs_asked), jobs
        assert not service.events("policy_error")
        tasks = [t for t in client.history() if t["id"] not in ids]
        assert len(tasks) == rounds_each * sum(n for n, _ in jobs_asked)
        assert all(t["status"] == "SUCCEEDED" for t in tasks), tasks
        rounds: dict[tuple[str, int], set[bool]] = {}
        for t in tasks:
            detail = client.job(t["id"])
            job_name, round_name, _ = t["name"].split(".")
            (attempt,) = detail["attempts"]
            (gpu,) = attempt["gpus"]
            rounds.setdefault((job_name, int(round_name[1:])), set()).add(gpu in V100)
            if job_name == "r3":  # bound to K80
                assert gpu not in V100
        mixed = [key for key, on in rounds.items() if len(on) == 2]
        if name == "hare":  # intra-job parallelism across types
            assert mixed, rounds
        elif name == "sched-allox":  # a round runs on one type, unless wider than each
            wide = {f"r{k}" for k, (n, _) in enumerate(jobs_asked) if n > 2}
            assert mixed and {job for job, _ in mixed} <= wide, mixed
        for k, job in enumerate(jobs):
            assert_as_on_one_device(tmp_path, job["id"], seed=k, rounds=rounds_each)
    finally:
        service.close()
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log, log[-3000:]


def test_jobs_that_cannot_run_as_rounds_are_refused_with_the_reason(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path, "hare", {}, users=TOKENS)
    try:
        service.start()
        client = service.client
        with pytest.raises(CorralError, match="give the job as a task"):
            client.submit({"command": ["true"]})
        task = {"factory": FACTORY, "steps": 5, "kwargs": {"batch": 8}}
        with pytest.raises(CorralError, match="5 is not a whole number of rounds of 2"):
            client.submit({"gpus": 2, "task": task})
        job = client.submit({"gpus": 2, "task": {**task, "steps": 40}})
        with pytest.raises(CorralError, match="not suspended; cancel the job instead"):
            client.action(job["id"], "suspend")
        client.action(job["id"], "cancel")
        wait_for(lambda: client.job(job["id"])["status"] == "CANCELLED", 30, "the cancel")
        tasks = [t for t in client.history() if t["id"] != job["id"]]
        assert len(tasks) >= 2  # its first round's two tasks (a later round's, if it got far)
        wait_for(
            lambda: all(client.job(t["id"])["status"] in TERMINAL for t in tasks),
            30,
            "its tasks to end with it",
        )
    finally:
        service.close()
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.long  # two minutes; rounds live in the tests above
def test_a_job_run_as_rounds_carries_on_after_the_service_is_killed(tmp_path: Path) -> None:
    """Killed with ``-9`` mid-job (its keepers die with it, and a task whose keeper
    went runs itself), restarted, the job ends exactly as on one device. (Without
    keepers, the loop's side is checked in virtual time in
    ``tests/runtime/test_round_policy.py``.)"""
    workers = {"standby": 1, "keep": 2}
    service = ServiceProcess(tmp_path, "hare", {}, users=TOKENS, workers=workers)
    try:
        service.start()
        client = service.client
        rounds = 4
        task = {"factory": FACTORY, "steps": ROUND_STEPS * rounds, "round_steps": ROUND_STEPS}
        job = client.submit({"name": "k", "gpus": 2, "task": {**task, "kwargs": {"batch": 16}}})
        wait_for(
            lambda: any(t["name"].startswith("k.r1.") for t in client.history()),
            120,
            "its second round",
        )
        service.kill9()
        service.start()
        wait_for(lambda: client.job(job["id"])["status"] in TERMINAL, 180, "the job to end")
        assert client.job(job["id"])["status"] == "SUCCEEDED"
        names = sorted(t["name"] for t in client.history() if t["id"] != job["id"])
        assert names == sorted(f"k.r{r}.{k}" for r in range(rounds) for k in range(2))
        assert_as_on_one_device(tmp_path, job["id"], seed=0, rounds=rounds)
    finally:
        service.close()


def test_round_keepers_hold_jobs_between_their_tasks_live(tmp_path: Path) -> None:
    """With ``workers: {keep: 4}``, hare's tasks run in their job's keeper on their GPU
    (most of them on the state it already holds), the results stay exact, and the
    keepers end with their jobs."""
    jobs_asked, rounds_each = JOBS[:2], 3
    service = ServiceProcess(tmp_path, "hare", {}, users=TOKENS, workers={"standby": 1, "keep": 4})
    try:
        service.start()
        client = service.client
        ids = submit_jobs(client, jobs_asked, rounds_each)
        wait_for(lambda: all(client.job(j)["status"] in TERMINAL for j in ids), 240, "jobs")
        assert [client.job(j)["status"] for j in ids] == ["SUCCEEDED"] * len(ids)
        tasks = [t for t in client.history() if t["id"] not in ids]
        assert all(t["status"] == "SUCCEEDED" for t in tasks), tasks
        reports = []
        for t in tasks:
            lines = client.logs(t["id"]).text.splitlines()
            reports.append(json.loads(next(x for x in lines if x.startswith('{"round"'))))
        later = [r for r in reports if r["round"] > 0]  # (at first, workers are warming up)
        kept = [r for r in later if "kept" in r]  # ran in a keeper
        assert len(kept) >= len(later) // 2, reports
        assert any(r["kept"] for r in kept), reports  # on the state the keeper held
        for k in range(len(jobs_asked)):
            assert_as_on_one_device(tmp_path, ids[k], seed=k, rounds=rounds_each)
        folders = list((tmp_path / "state" / "jobs").glob("*/keeper-*"))
        assert folders  # keepers ran, and each has ended (its exit record written)
        wait_for(lambda: all((f / "exit.json").exists() for f in folders), 30, "keepers to end")
    finally:
        service.close()
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log, log[-3000:]
