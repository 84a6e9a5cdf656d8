"""Warm preemption live: under LAS on one GPU, two task jobs preempt each other
several times; with ``workers: {park: 1}`` a preempted job is parked (paused,
its state resident) and resumes in place, so each job runs as one attempt with
no checkpoint read back, and ends with exactly the weights of an uninterrupted
run. A parked job that is suspended (or cancelled) checkpoints from its parked
state and exits; resumed, it starts from that checkpoint and still ends right."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.runtime.loop.parking import PARKED
from corral.testing.service_process import ServiceProcess, wait_for
from corral.train import checkpoint
from corral.train.task import load_factory
from tests.runtime.harness import TERMINAL, TOKENS

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

STEPS = 300
FACTORY = "corral.examples.tasks:digits"


def task(seed: int) -> dict[str, Any]:
    # step_time stretches the job (it does not change what is computed), so the
    # jobs take turns several times under LAS' 1.5 s quantum
    return {"factory": FACTORY, "steps": STEPS, "kwargs": {"seed": seed, "step_time": 0.015}}


def assert_as_if_never_stopped(state_dir: Path, job: int, seed: int) -> None:
    saved = checkpoint.load(state_dir / "state-jobs" / str(job) / "checkpoint")
    assert saved is not None and saved["step"] == STEPS
    alone = load_factory(FACTORY)(seed=seed)
    for step in range(STEPS):
        alone.step(step)
    expected = alone.model.state_dict()
    assert all(torch.equal(saved["state"]["model"][k], expected[k]) for k in expected)


def service(tmp_path: Path) -> ServiceProcess:
    return ServiceProcess(
        tmp_path,
        "las",
        {"quantum": 1.5},
        users=TOKENS,
        gpus=[{"type": "V100", "count": 1}],
        workers={"park": 1},
        stop_grace=20,
    )


def start_two_jobs(svc: ServiceProcess) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start the service; submit a job, then once it trains a second, which
    preempts (parks) the first."""
    svc.start()
    client = svc.client
    first = client.submit({"name": "a", "task": task(1), "gpus": 1})
    wait_for(lambda: client.job(first["id"])["steps"] > 5, 60, "the first job to train")
    second = client.submit({"name": "b", "task": task(2), "gpus": 1})
    wait_for(lambda: client.job(first["id"])["reason"] == PARKED, 30, "the first job parked")
    return first, second


def wait_ended(client: Any, *jobs: dict[str, Any], timeout: float = 180) -> None:
    """Wait for the jobs to end; on a timeout, say what each had been through."""
    try:
        for job in jobs:
            wait_for(lambda j=job: client.job(j["id"])["status"] in TERMINAL, timeout)
    except TimeoutError:
        seen = {
            j["id"]: [(e["kind"], e["detail"].get("cause")) for e in client.job(j["id"])["events"]]
            for j in jobs
        }
        raise TimeoutError(f"the jobs did not end in {timeout} s; their events: {seen}") from None


def test_preempted_task_jobs_are_parked_and_resume_in_place(tmp_path: Path) -> None:
    svc = service(tmp_path)
    try:
        client = svc.client
        first, second = start_two_jobs(svc)
        wait_ended(client, first, second)
        for job, seed in ((first, 1), (second, 2)):
            done = client.job(job["id"])
            assert done["status"] == "SUCCEEDED", done
            kinds = [e["kind"] for e in done["events"]]
            # every preemption is a park (resumed in place) or, before the job's
            # first heartbeat, a cold stop; the first job is always parked, the
            # second only if it was preempted once it trained (on a loaded machine
            # it may be stopped cold once and then finish within LAS' quantum)
            parks = kinds.count("park")
            # a parked attempt stopped where it was (its pause grace ran out) ends
            # "preempted" too, but was counted once, when it was parked
            parked = {e["detail"]["attempt"] for e in done["events"] if e["kind"] == "park"}
            ended_preempted = [
                e["detail"]["attempt"]
                for e in done["events"]
                if e["kind"] == "attempt_end" and e["detail"]["cause"] == "preempted"
            ]
            cold = sum(n not in parked for n in ended_preempted)
            stopped_parked = sum(n in parked for n in ended_preempted)
            assert done["preemptions"] == parks + cold, done["events"]
            # each park is undone by an unpark, except that a job parked as it took
            # its last step may end parked (it exits with its work done)
            last_park = len(kinds) - 1 - kinds[::-1].index("park") if parks else -1
            ended_parked = (
                parks > 0
                and "unpark" not in kinds[last_park:]
                and done["events"][last_park]["detail"]["attempt"] not in ended_preempted
            )
            assert kinds.count("unpark") == parks - ended_parked - stopped_parked, kinds
            if job is first:
                assert parks >= 1 and cold == 0, kinds
            assert_as_if_never_stopped(tmp_path, job["id"], seed)
        # the first job had sent heartbeats before it was first preempted, so
        # every preemption parked it: one attempt, resumed in place each time
        # (at least once: on a loaded machine the second job's cold start can
        # take the rest of the first job's run, so it is preempted only once)
        done = client.job(first["id"])
        assert done["preemptions"] >= 1, done
        assert [a["cause"] for a in done["attempts"]] == ["succeeded"], done["attempts"]
        # the second may be stopped the old way only before its first heartbeat
        # (a cold start importing PyTorch takes longer than LAS' quantum)
        kinds = [e["kind"] for e in client.job(second["id"])["events"]]
        stopped_at = [k for k, kind in enumerate(kinds) if kind == "stop"]
        parked_at = kinds.index("park") if "park" in kinds else len(kinds)
        assert not stopped_at or max(stopped_at) < parked_at, kinds
    finally:
        svc.close()


@pytest.mark.long  # parking itself is the first test of this file
def test_a_parked_job_suspended_checkpoints_from_its_parked_state(tmp_path: Path) -> None:
    svc = service(tmp_path)
    try:
        client = svc.client
        first, second = start_two_jobs(svc)
        client.action(first["id"], "suspend")
        wait_for(lambda: client.job(first["id"])["status"] == "SUSPENDED", 30, "suspended")
        parked = client.job(first["id"])
        assert [a["cause"] for a in parked["attempts"]] == ["suspended"], parked["attempts"]
        client.action(first["id"], "resume")
        wait_ended(client, first, second)
        done = client.job(first["id"])
        assert done["status"] == "SUCCEEDED", done
        assert_as_if_never_stopped(tmp_path, first["id"], 1)
        assert client.job(second["id"])["status"] == "SUCCEEDED"
    finally:
        svc.close()


@pytest.mark.long  # parking itself is the first test of this file
def test_a_service_killed_while_a_job_is_parked_stops_it_and_it_ends_right(
    tmp_path: Path,
) -> None:
    svc = service(tmp_path)
    try:
        client = svc.client
        first, second = start_two_jobs(svc)
        svc.kill9()
        svc.start()
        # the second job is cancelled so the first runs alone: two jobs that both
        # restart cold would take turns at LAS' 1.5 s quantum, shorter than a cold
        # start, and neither would get far (see benchmarks/live_preemption.py)
        client.action(second["id"], "cancel")
        wait_for(lambda: client.job(first["id"])["status"] in TERMINAL, 180, "the first to end")
        done = client.job(first["id"])
        assert done["status"] == "SUCCEEDED", done
        # the parked attempt was stopped (checkpointed from its parked state),
        # and each preemption counted once: at its park, or at its stop if it
        # was not parked
        assert done["attempts"][0]["cause"] == "preempted", done["attempts"]
        counted, parked = 0, False
        for event in done["events"]:
            if event["kind"] == "park":
                counted, parked = counted + 1, True
            elif event["kind"] == "unpark":
                parked = False
            elif event["kind"] == "attempt_end":
                counted += event["detail"]["cause"] == "preempted" and not parked
                parked = False
        assert done["preemptions"] == counted, done["events"]
        assert_as_if_never_stopped(tmp_path, first["id"], 1)
    finally:
        svc.close()


@pytest.mark.long  # parking itself is the first test of this file
def test_task_jobs_get_through_a_quantum_shorter_than_their_cold_start(tmp_path: Path) -> None:
    """Not parked: two task jobs under LAS with a 1 s quantum, shorter than a cold
    start (PyTorch's import alone takes longer here). A job preempted before its
    first heartbeat dies still importing; its next start is charged twice that
    long, so the jobs get through instead of preempting each other forever."""
    svc = ServiceProcess(
        tmp_path, "las", {"quantum": 1.0}, users=TOKENS, gpus=[{"type": "V100", "count": 1}]
    )
    try:
        svc.start()
        client = svc.client
        short = {**task(1), "steps": 100}
        first = client.submit({"name": "a", "task": short, "gpus": 1})
        second = client.submit(
            {"name": "b", "task": {**short, "kwargs": task(2)["kwargs"]}, "gpus": 1}
        )
        wait_ended(client, first, second, timeout=240)
        for job in (first, second):
            assert client.job(job["id"])["status"] == "SUCCEEDED"
    finally:
        svc.close()
