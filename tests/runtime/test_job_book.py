"""The loop's job book: one record per job, phases changed through one checked
door, indexes that follow the records, and nothing kept about jobs that are over."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.model.cluster import Cluster, Node
from corral.model.state import FUTURE, PENDING, RUNNING
from corral.runtime.execution.executor import ExitRecord
from corral.runtime.execution.exits import Cause, classify
from corral.runtime.loop.job_book import PHASE_MOVES, IllegalMove, JobBook, Phase, Waiting
from corral.runtime.loop.live_state import LiveJobs
from corral.runtime.storage.store import STRICT_TRANSITIONS_ENV, JobRow
from corral.train.session import PRERUN_EXIT
from tests.runtime.virtual_loop import virtual_loop


def a_book() -> JobBook:
    return JobBook(LiveJobs(Cluster("c", [Node("n", "V100", 4)])))


def test_phases_move_the_policy_state_with_them() -> None:
    book = a_book()
    book.add(1, 0.0, 2)
    status = book.live.state.status
    i = book.live.index[1]
    book.block(1, Waiting(dependency={"afterok": [7]}))
    assert book[1].phase is Phase.BLOCKED and status[i] == FUTURE and 1 in book.blocked
    book.arrive(1, 0.0)
    assert status[i] == PENDING and 1 not in book.blocked  # leaving a phase clears its data
    book.place(1, (0, 1))
    assert book.placed == {1: (0, 1)} and status[i] == RUNNING
    book.launched(1)
    assert book.placed == {} and book[1].phase is Phase.RUNNING
    book.back_off(1, 99.0)
    assert book.backoff == {1: 99.0} and status[i] == FUTURE
    book.close(1)
    assert book[1].phase is Phase.ENDED and book.backoff == {} and book.check() == []


def test_an_illegal_move_is_an_error_under_strict_checking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(STRICT_TRANSITIONS_ENV, "1")
    book = a_book()
    book.add(1, 0.0, 1)
    book.close(1)
    with pytest.raises(IllegalMove, match="ended -> queued"):
        book.arrive(1, 0.0)


def test_an_illegal_move_live_is_logged_and_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(STRICT_TRANSITIONS_ENV, raising=False)
    said: list[tuple[int, str]] = []
    book = JobBook(a_book().live, lambda job, message: said.append((job, message)))
    book.add(1, 0.0, 1)
    book.arrive(1, 0.0)
    book.launched(1)  # queued -> running skips its placement
    assert said == [(1, "phase queued -> running is outside the loop's table")]
    assert book.illegal == ["job 1: phase queued -> running is outside the loop's table"]


def test_the_table_lets_a_job_end_once_and_from_anywhere() -> None:
    for phase, allowed in PHASE_MOVES.items():
        assert Phase.ENDED in allowed, phase  # cancel works whatever the job is doing
        assert Phase.NEW not in allowed  # only a rebuilt state makes jobs NEW again
    assert PHASE_MOVES[Phase.ENDED] == {Phase.ENDED}


def test_indexes_follow_the_records_and_go_with_them() -> None:
    book = a_book()
    book.add(1, 0.0, 1)
    book.add(2, 0.0, 1)
    book[1].packed_on = 2
    book[1].gpu_memory = 3e9
    book[2].beating = True
    assert book.packed_on == {1: 2} and book.having("gpu_memory") == {1: 3e9}
    assert dict(book.having("beating")) == {2: True}
    book[2].beating = False
    book[1].packed_on = None
    assert book.packed_on == {} and book.having("beating") == {}
    with pytest.raises(TypeError):
        book.packed_on[3] = 1  # type: ignore[index]  # (read-only: set the record's field)
    book.close(1)
    assert book.sweep() == 1 and 1 not in book and book.having("gpu_memory") == {}


def test_check_finds_a_phase_that_disagrees_with_the_policy_state() -> None:
    book = a_book()
    book.add(1, 0.0, 1)
    book.arrive(1, 0.0)
    book.live.hold(book.live.index[1])  # behind the book's back
    assert book.check() == ["job 1: phase queued but state status 0"]


def test_the_loop_keeps_nothing_about_jobs_that_are_over(tmp_path: Path) -> None:
    """A long-running service must not grow with every job it has run: before the
    book, a job's reason, spec, expected-duration source and sharing times stayed in
    the loop's memory after it ended (300 of each after 300 jobs)."""
    loop = virtual_loop(tmp_path, "fifo", v100s=4)
    jobs = [loop.queue(command=["sleep", "2"], gpus=1) for _ in range(300)]
    held = loop.queue(command=["sleep", "2"], gpus=1, dependency={"afterok": [jobs[-1] + 10**6]})
    loop.run(5)
    assert len(loop.scheduler.book) > 4  # queued and running ones are held
    loop.run(400)
    assert all(loop.row(job).status == "SUCCEEDED" for job in jobs)
    assert loop.row(held).status == "CANCELLED"  # its dependency can never be met
    assert len(loop.scheduler.book) == 0 and loop.scheduler.book.check() == []
    loop.close()


def test_a_pre_run_that_passes_as_it_is_cancelled_ends_cancelled(tmp_path: Path) -> None:
    """A stop that ends the job (cancel, timeout, suspend) stands over a pre-run's
    passing exit: before, such a job went back to PENDING in the store while the loop
    had closed it, and stayed so."""
    passed = ExitRecord(PRERUN_EXIT, None, "")
    log = tmp_path / "log.txt"
    assert classify("cancel", passed, "prerun", log)[0] is Cause.CANCELLED
    assert classify("timeout", passed, "prerun", log)[0] is Cause.TIMEOUT
    assert classify("suspend", passed, "prerun", log)[0] is Cause.SUSPENDED
    assert classify("preempt", passed, "prerun", log)[0] is Cause.PRERUN_OK
    assert classify(None, passed, "prerun", log)[0] is Cause.PRERUN_OK


def test_a_job_that_exits_0_in_the_grace_of_a_cancel_or_timeout_ends_so(tmp_path: Path) -> None:
    """Found by the fault schedules (gandiva, a cancel of a job whose checkpoint took
    five seconds): its work ended in the grace, with exit 0, and it was recorded
    SUCCEEDED, a cancelled job's end taken back. As Slurm's, a cancel or a time
    limit stands; a preempted or suspended job that finished meanwhile did succeed."""
    ok = ExitRecord(0, None, "")
    log = tmp_path / "log.txt"
    assert classify("cancel", ok, "main", log)[0] is Cause.CANCELLED
    assert classify("timeout", ok, "main", log)[0] is Cause.TIMEOUT
    assert classify("preempt", ok, "main", log)[0] is Cause.SUCCEEDED
    assert classify("suspend", ok, "main", log)[0] is Cause.SUCCEEDED
    assert classify(None, ok, "main", log)[0] is Cause.SUCCEEDED


def test_a_request_for_a_job_whose_end_is_under_way_is_ignored(tmp_path: Path) -> None:
    """Found by the job book's table (tiresias-las, one schedule of 200): a job past its
    wall time is closed while its process leaves; a suspend then arriving moved it from
    ended to held (the release before let the policy's state take it back, unseen).
    Now only a cancel still counts for such a job; the rest are recorded and ignored."""
    loop = virtual_loop(tmp_path, "fifo", v100s=1, stop_grace=30.0)
    job = loop.queue(command=["hang"], gpus=1, wall_time=5)
    loop.run(6)  # past its wall time: asked to stop, ignoring SIGTERM for its grace
    assert loop.scheduler.book[job].phase is Phase.ENDED
    with loop.store.session() as s:
        row = s.get(JobRow, job)
        assert row is not None and row.status == "RUNNING"
        row.request = "suspend"
    loop.run(60)
    assert loop.row(job).status == "TIMEOUT"
    assert loop.scheduler.faults == 0 and loop.scheduler.errors == 0
    loop.close()
