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
from corral.runtime.jobspec.config import hash_token
from corral.runtime.storage.store import AttemptRow, JobRow, Store
from tests.runtime.harness import PY, auth, make_config
from tests.runtime.virtual_loop import virtual_loop


def test_a_job_that_checkpoints_and_leaves_by_itself_is_queued_again(tmp_path: Path) -> None:
    """It used to stay RUNNING to the policy with no process, holding the queue
    (seen live: a parked job told to stop by a heartbeat answer after it resumed)."""
    loop = virtual_loop(tmp_path)
    job = loop.queue(command=["train", "200", "10"], gpus=1)
    later = loop.queue(command=["sleep", "5"], gpus=1)
    loop.run(5)
    (process,) = loop.executor.running()
    assert process.job == job
    loop.executor.signal(ProcessRef(process.pid, process.start), signal.SIGTERM)
    loop.run(60)
    row = loop.row(job)
    assert (row.status, row.preemptions, row.failures) == ("SUCCEEDED", 1, 0), row.reason
    attempts = loop.attempts(job)
    assert [a.cause for a in attempts] == ["preempted", "succeeded"]
    assert attempts[1].steps_start > 0  # it resumed from its checkpoint
    assert loop.row(later).status == "SUCCEEDED"
    loop.close()


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
    loop = virtual_loop(tmp_path, policy="tests.sim.test_engine:_StaleWakeup", v100s=4)
    loop.queue(command=["sleep", "30"], gpus=1)
    loop.run(5)
    assert loop.scheduler.next_wakeup is None
    policy = loop.scheduler.policy
    passes = len(policy.passes)  # type: ignore[attr-defined]
    loop.run(5)
    assert len(policy.passes) == passes  # type: ignore[attr-defined]
    loop.close()


def test_a_kill_that_found_no_process_is_sent_again_until_the_attempt_ends(
    tmp_path: Path,
) -> None:
    """A kill reaches only the processes there are: one sent while the launcher was
    still starting the job (a GPU failed at once, a cancel just after the start)
    found none, was never sent again, and the job ran on, unkilled (seen under load:
    a job told to stop when its GPU failed ran its whole 60 s). Here the first kill
    is lost; the loop kills again and the cancel completes."""
    loop = virtual_loop(tmp_path)
    job = loop.queue(command=["hang"], gpus=1)  # (ignores SIGTERM: the kill is what ends it)
    loop.run(2)
    real_signal = loop.executor.signal
    lost: list[int] = []

    def first_kill_lost(ref: ProcessRef, sig: int) -> None:
        if sig == signal.SIGKILL and not lost:
            lost.append(sig)
            return
        real_signal(ref, sig)

    loop.executor.signal = first_kill_lost  # type: ignore[method-assign]
    with loop.store.session() as s:
        s.get(JobRow, job).request = "cancel"
    loop.run(loop.config.stop_grace + 10)
    assert lost and loop.row(job).status == "CANCELLED"
    loop.close()
