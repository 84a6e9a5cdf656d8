"""Held jobs as Slurm shows them (virtual time): ``hold`` keeps a waiting job
PENDING with the reason JobHeldUser (JobHeldAdmin when an admin holds another's
job) and out of the policy's reach until ``release``; a restart keeps it held; a
job that started before the hold came is left running."""

from __future__ import annotations

from pathlib import Path

from corral.runtime.storage.store import JobRow
from corral.testing.virtual import virtual_scheduler
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop


def ask(loop: VirtualLoop, job: int, request: str) -> None:
    """Record an API request as the routes do."""
    with loop.store.session() as s:
        row = s.get(JobRow, job)
        assert row is not None
        row.request = request


def shown(loop: VirtualLoop, job: int) -> tuple[str, str | None, str | None]:
    row = loop.row(job)
    return row.status, row.held, row.reason


def test_a_held_job_waits_pending_until_released_and_a_restart_keeps_it_held(
    tmp_path: Path,
) -> None:
    loop = virtual_loop(tmp_path, v100s=2)
    held = loop.queue(command=["sleep", "3"], gpus=1)
    ask(loop, held, "hold")
    loop.run(1)
    assert shown(loop, held) == ("PENDING", "user", "JobHeldUser")
    other = loop.queue(command=["sleep", "3"], gpus=1)
    loop.run(20)  # a free GPU all along: the held job never starts, the other does
    assert shown(loop, held) == ("PENDING", "user", "JobHeldUser")
    assert loop.attempts(held) == [] and loop.row(other).status == "SUCCEEDED"
    # the service restarts: the job is still held, not queued
    loop.scheduler = virtual_scheduler(loop.config, loop.store, loop.clock, loop.executor)
    loop.run(20)
    assert shown(loop, held) == ("PENDING", "user", "JobHeldUser") and not loop.attempts(held)
    ask(loop, held, "release")
    loop.run(10)
    assert shown(loop, held) == ("SUCCEEDED", None, None) or loop.row(held).status == "SUCCEEDED"
    assert len(loop.attempts(held)) == 1
    loop.close()


def test_an_admins_hold_is_not_undone_by_the_users(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path)
    job = loop.queue(command=["sleep", "3"], gpus=1)
    ask(loop, job, "hold_admin")
    loop.run(1)
    ask(loop, job, "hold")  # the user's own hold does not lower it to JobHeldUser
    loop.run(1)
    assert shown(loop, job) == ("PENDING", "admin", "JobHeldAdmin")
    ask(loop, job, "release")  # (the API lets only an admin ask this)
    loop.run(10)
    assert loop.row(job).status == "SUCCEEDED"
    loop.close()


def test_a_job_that_started_before_its_hold_is_left_running_and_a_held_one_cancels(
    tmp_path: Path,
) -> None:
    loop = virtual_loop(tmp_path)
    running = loop.queue(command=["sleep", "5"], gpus=1)
    waiting = loop.queue(command=["sleep", "5"], gpus=1)
    loop.run(1)
    assert loop.row(running).status == "RUNNING"
    ask(loop, running, "hold")
    ask(loop, waiting, "hold")
    loop.run(1)
    assert shown(loop, running)[:2] == ("RUNNING", None)
    assert shown(loop, waiting) == ("PENDING", "user", "JobHeldUser")
    ask(loop, waiting, "cancel")
    loop.run(10)
    assert shown(loop, running)[0] == "SUCCEEDED"
    assert shown(loop, waiting) == ("CANCELLED", None, "cancelled by request")
    assert loop.attempts(waiting) == []
    loop.close()


def test_a_held_job_suspended_then_released_is_resumed_and_runs(tmp_path: Path) -> None:
    """Found by the fault schedules (tiresias-las, seed 40): a held job that was then
    suspended and released went into the policy's queue while stored SUSPENDED, and
    the plan's start of it broke the life cycle (SUSPENDED -> STARTING) at every pass
    until the job was set aside. Release now resumes it too, as it resumes any
    suspended job."""
    loop = virtual_loop(tmp_path, v100s=1)
    job = loop.queue(command=["sleep", "3"], gpus=1)
    ask(loop, job, "hold")
    loop.run(1)
    ask(loop, job, "suspend")
    loop.run(2)
    assert shown(loop, job) == ("SUSPENDED", "user", "Suspended")
    ask(loop, job, "release")
    loop.run(10)
    assert loop.row(job).status == "SUCCEEDED" and loop.scheduler.faults == 0
    assert loop.scheduler.errors == 0
    loop.close()


def test_a_held_job_suspended_and_resumed_stays_held_until_released(tmp_path: Path) -> None:
    """Found by the fault schedules: resume of a held job that had been suspended
    while it waited started it, though nobody had released it."""
    loop = virtual_loop(tmp_path, v100s=2)
    held = loop.queue(command=["sleep", "3"], gpus=1)
    ask(loop, held, "hold")
    loop.run(1)
    ask(loop, held, "suspend")
    loop.run(1)
    assert loop.row(held).status == "SUSPENDED"
    ask(loop, held, "resume")
    loop.run(10)
    assert shown(loop, held) == ("PENDING", "user", "JobHeldUser") and not loop.attempts(held)
    ask(loop, held, "release")
    loop.run(10)
    assert loop.row(held).status == "SUCCEEDED" and len(loop.attempts(held)) == 1
    loop.close()
