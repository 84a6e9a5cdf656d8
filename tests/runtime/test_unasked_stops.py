"""Stops the scheduler did not ask for: a job that checkpoints and leaves by itself
(an operator's SIGTERM, its own word) is queued again and resumes, and a parked
job's heartbeats never tell it to leave (virtual time for the loop; the API's
heartbeat route for the answer)."""

from __future__ import annotations

import signal
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from corral.api.app import create_app
from corral.runtime.execution.executor import ProcessRef
from corral.runtime.execution.exits import PARK
from corral.runtime.jobspec.config import GpuGroup, hash_token
from corral.runtime.storage.store import AttemptRow, JobRow, Store
from corral.testing.virtual import VirtualClock, VirtualExecutor, run_for, virtual_scheduler
from tests.runtime.harness import PY, auth, make_config
from tests.runtime.test_poisoned_records import queue


def test_a_job_that_checkpoints_and_leaves_by_itself_is_queued_again(tmp_path: Path) -> None:
    """It used to stay RUNNING to the policy with no process, holding the queue
    (seen live: a parked job told to stop by a heartbeat answer after it resumed)."""
    config = make_config(
        tmp_path, policy="fifo", policy_options={}, gpus=[GpuGroup(type="V100", count=1)]
    )
    store = Store(config.store_url)
    clock = VirtualClock()
    executor = VirtualExecutor(config, clock, store)
    scheduler = virtual_scheduler(config, store, clock, executor)
    job = queue(store, "alice", clock, command=["train", "200", "10"], gpus=1)
    later = queue(store, "alice", clock, command=["sleep", "5"], gpus=1)
    run_for(scheduler, clock, 5)
    (process,) = executor.running()
    assert process.job == job
    executor.signal(ProcessRef(process.pid, str(process.pid)), signal.SIGTERM)
    run_for(scheduler, clock, 60)
    with store.session() as s:
        row = s.get(JobRow, job)
        assert row is not None
        assert (row.status, row.preemptions, row.failures) == ("SUCCEEDED", 1, 0), row.reason
        attempts = s.scalars(
            select(AttemptRow).where(AttemptRow.job_id == job).order_by(AttemptRow.number)
        ).all()
        assert [a.cause for a in attempts] == ["preempted", "succeeded"]
        assert attempts[1].steps_start > 0  # it resumed from its checkpoint
        after = s.get(JobRow, later)
        assert after is not None and after.status == "SUCCEEDED"
    store.dispose()


def test_a_parked_attempts_heartbeat_does_not_tell_it_to_stop(tmp_path: Path) -> None:
    config = make_config(tmp_path / "state")
    store = Store(config.store_url)
    client = TestClient(create_app(config, store))
    job = client.post(
        "/v1/jobs", json={"command": [PY, "-c", "pass"], "gpus": 1}, headers=auth("alice")
    ).json()
    with store.session() as s:
        s.add(
            AttemptRow(
                job_id=job["id"],
                number=1,
                phase="main",
                gpus=[0],
                start_time=0.0,
                dir=str(tmp_path),
                token_sha256=hash_token("attempt-token"),
                stop=PARK,
            )
        )
    url = f"/v1/jobs/{job['id']}/heartbeat"
    beat = {"Authorization": "Bearer attempt-token"}
    answer = client.post(url, json={"attempt": 1, "step": 3}, headers=beat).json()
    assert answer["stop"] is False and answer["why"] is None
    with store.session() as s:
        (att,) = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job["id"])).all()
        att.stop = "preempt"  # started elsewhere: now it is asked to leave
    answer = client.post(url, json={"attempt": 1, "step": 3}, headers=beat).json()
    assert answer["stop"] is True and answer["why"] == "preempt"
    store.dispose()


def test_a_wakeup_at_now_does_not_make_the_live_loop_pass_again_at_once(tmp_path: Path) -> None:
    """Live, as in the simulator, a wake-up at or before the pass's instant means
    the next event: the loop does not run the policy again at the next tick."""
    config = make_config(tmp_path, policy="tests.sim.test_engine:_StaleWakeup", policy_options={})
    store = Store(config.store_url)
    clock = VirtualClock()
    scheduler = virtual_scheduler(config, store, clock)
    queue(store, "alice", clock, command=["sleep", "30"], gpus=1)
    run_for(scheduler, clock, 5)
    assert scheduler.next_wakeup is None
    policy = scheduler.policy
    passes = len(policy.passes)  # type: ignore[attr-defined]
    run_for(scheduler, clock, 5)
    assert len(policy.passes) == passes  # type: ignore[attr-defined]
    store.dispose()
