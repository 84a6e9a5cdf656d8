"""An executor call that fails for one job is that job's trouble, never the pass's
(virtual time): the other jobs run on, no pass fails, the failure is recorded once,
and the call is made again until it works (a dead Ray actor, a process table the
service cannot read, a signal refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from corral.runtime.storage.store import EventRow, JobRow
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop


def troubles(loop: VirtualLoop, job: int) -> list[str]:
    with loop.store.session() as s:
        events = s.scalars(
            select(EventRow).where(EventRow.kind == "executor_error", EventRow.job_id == job)
        ).all()
        return [e.detail["call"] for e in events]


def break_calls(loop: VirtualLoop, job: int, calls: set[str]) -> set[str]:
    """Make the executor's ``calls`` raise for ``job``'s process while the returned set
    holds their names (empty it to mend them)."""
    broken = set(calls)
    executor = loop.executor
    real = {name: getattr(executor, name) for name in ("poll", "signal", "kill")}
    target = loop.scheduler.attempts[job].ref

    def failing(name: str) -> Any:
        def call(ref: Any, *args: Any) -> Any:
            if name in broken and ref == target:
                raise RuntimeError(f"the {name} of this job's process failed")
            return real[name](ref, *args)

        return call

    for name in real:
        setattr(executor, name, failing(name))
    return broken


def test_a_poll_that_fails_for_one_job_stops_nobody_and_is_tried_again(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path, v100s=2)
    sick = loop.queue(command=["sleep", "10"], gpus=1)
    well = loop.queue(command=["sleep", "10"], gpus=1)
    loop.run(1)
    broken = break_calls(loop, sick, {"poll"})
    later = loop.queue(command=["sleep", "5"], gpus=1)
    loop.run(30)
    assert loop.row(well).status == "SUCCEEDED"
    # the sick job's process may have ended, but nobody can tell: its GPU stays held
    assert loop.row(sick).status == "RUNNING"
    assert loop.row(later).status == "SUCCEEDED"  # (on the other GPU, once it was free)
    assert troubles(loop, sick) == ["poll"]  # recorded once, not every pass
    assert loop.scheduler.errors == 0 and not loop.scheduler.resync_due
    broken.clear()  # the executor answers again
    loop.run(15)
    assert loop.row(sick).status == "SUCCEEDED"
    loop.close()


def test_a_stop_whose_signals_fail_is_sent_again_until_it_lands(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path, v100s=2, stop_grace=2)
    sick = loop.queue(command=["sleep", "60"], gpus=1)
    other = loop.queue(command=["sleep", "5"], gpus=1)
    loop.run(1)
    broken = break_calls(loop, sick, {"signal", "kill"})
    with loop.store.session() as s:
        row = s.get(JobRow, sick)
        assert row is not None
        row.request = "cancel"
    loop.run(10)
    assert loop.row(other).status == "SUCCEEDED"
    assert loop.row(sick).status == "RUNNING"  # (asked to stop; nothing reached it)
    assert sorted(troubles(loop, sick)) == ["kill", "signal"]
    broken.clear()
    loop.run(5)  # the kill is sent again every few seconds: now it lands
    assert loop.row(sick).status == "CANCELLED"
    assert loop.scheduler.errors == 0
    loop.close()
