"""Only the loop writes its book: what a heartbeat reports reaches the loop through
its inbox, at its next pass, and what a heartbeat is answered with is read from
the answers the loop publishes whole after each pass (virtual time)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event, select

from corral.runtime.storage.store import JobRow, Store
from corral.testing.virtual import VirtualClock, VirtualExecutor, run_for, virtual_scheduler
from tests.runtime.harness import make_config
from tests.runtime.virtual_loop import queue, virtual_loop


def test_a_reported_memory_reaches_the_loop_at_its_next_pass_and_only_for_a_running_job(
    tmp_path: Path,
) -> None:
    loop = virtual_loop(tmp_path, "fifo", v100s=2)
    store, clock, scheduler = loop.store, loop.clock, loop.scheduler
    running = queue(store, "alice", clock, command=["sleep", "100"], gpus=1)
    waiting = queue(store, "bob", clock, command=["sleep", "100"], gpus=2)
    run_for(scheduler, clock, 2)
    assert running in scheduler.attempts and waiting not in scheduler.attempts

    posting = threading.Thread(
        target=lambda: [scheduler.report_memory(job, 3e9) for job in (running, waiting)]
    )
    posting.start()
    posting.join()
    memory = scheduler.book.having("gpu_memory")
    assert memory == {}  # posted, not written: the loop has not passed yet
    scheduler.step()
    assert memory == {running: 3e9}  # a job that holds nothing is not kept
    store.dispose()


def test_the_published_answers_are_whole_values_no_reader_can_change(tmp_path: Path) -> None:
    config = make_config(tmp_path, policy="fifo", policy_options={})
    store = Store(config.store_url)
    clock = VirtualClock()
    scheduler = virtual_scheduler(config, store, clock, VirtualExecutor(config, clock, store))
    before = scheduler.answers
    job = queue(store, "alice", clock, command=["sleep", "100"], gpus=1)
    scheduler.step()
    scheduler.book[job].batch_size = 256  # as a policy's plan would set it
    run_for(scheduler, clock, 1)
    after = scheduler.answers
    assert after is not before and after.batch_sizes == {job: 256} and before.batch_sizes == {}
    with pytest.raises(TypeError):
        after.batch_sizes[job] = 1  # type: ignore[index]
    store.dispose()


def test_a_drained_node_is_posted_and_read_by_the_loop_at_its_next_pass(tmp_path: Path) -> None:
    """The API stores the node's state and posts the change; the loop's memory of
    usable GPUs changes only when the loop reads its inbox."""
    from sqlalchemy import select

    from corral.runtime.storage.store import NodeRow

    loop = virtual_loop(tmp_path, "fifo", v100s=2)
    store, clock, scheduler = loop.store, loop.clock, loop.scheduler
    run_for(scheduler, clock, 1)
    assert scheduler.usable.all()
    with store.session() as s:
        node = s.scalars(select(NodeRow)).one()
        node.state, node.reason = "drained", "maintenance"
    posting = threading.Thread(target=scheduler.nodes_changed)
    posting.start()
    posting.join()
    assert scheduler.usable.all() and not scheduler.nodes_dirty  # posted, nothing written
    scheduler.step()
    assert not scheduler.usable.any()
    job = queue(store, "alice", clock, command=["sleep", "5"], gpus=1)
    run_for(scheduler, clock, 3)
    assert job not in scheduler.attempts  # no GPU may be used on a drained node
    store.dispose()


def test_work_left_and_each_gpus_jobs_are_published_after_every_pass(tmp_path: Path) -> None:
    """What a listing and the nodes' view show is the loop's own figure, as of its
    last pass: the API reads the published answers, never the policy's live state."""
    loop = virtual_loop(tmp_path, "fifo", v100s=2)
    store, clock, scheduler = loop.store, loop.clock, loop.scheduler
    running = queue(store, "alice", clock, command=["sleep", "100"], gpus=1, duration=100)
    waiting = queue(store, "bob", clock, command=["sleep", "100"], gpus=2, duration=60)
    run_for(scheduler, clock, 10)
    answers = scheduler.answers
    assert answers.remaining == scheduler.remaining_open()
    assert set(answers.remaining) == {running, waiting}
    picked = answers.remaining.pick([waiting, 10**6, running])  # (one not held: left out)
    assert picked == {job: answers.remaining[job] for job in (running, waiting)}
    assert answers.remaining[waiting][0] == pytest.approx(60)
    assert 85 <= answers.remaining[running][0] <= 95  # 100 s, about 10 of them run
    gpu = next(iter(answers.sharers))
    assert dict(answers.sharers) == {gpu: (running,)}
    with pytest.raises(TypeError):
        answers.remaining[running] = (0.0, "x")  # type: ignore[index]
    run_for(scheduler, clock, 300)  # (both ran 100 s: one after the other)
    assert scheduler.answers.remaining == {} and scheduler.answers.sharers == {}
    store.dispose()


def test_a_jobs_policy_view_is_answered_by_the_loop_on_its_own_thread(tmp_path: Path) -> None:
    """A job's page asks the loop (through its inbox) for the policy's view of the
    job; the policy is read on the loop's thread only, and a loop that does not
    answer in time leaves the view empty rather than holding the page."""
    loop = virtual_loop(tmp_path, "tiresias-las", v100s=1)
    store, clock, scheduler = loop.store, loop.clock, loop.scheduler
    job = queue(store, "alice", clock, command=["sleep", "100"], gpus=1)
    run_for(scheduler, clock, 5)
    direct = scheduler.ask_view(job)  # no loop thread yet: read at once
    assert direct and "queue" in " ".join(direct).lower(), direct

    readers: list[str] = []
    view = type(scheduler.policy).view

    def recorded(policy: object, state: object, i: int) -> dict[str, str]:
        readers.append(threading.current_thread().name)
        return view(policy, state, i)  # type: ignore[arg-type]

    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run, args=(stop, False), name="the-loop")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(scheduler.policy), "view", recorded)
        loop.start()
        try:
            for _ in range(3):
                assert scheduler.ask_view(job) == direct
            assert readers and set(readers) == {"the-loop"}, readers
        finally:
            stop.set()
            scheduler.wake.set()
            loop.join(10)
    assert not loop.is_alive()
    assert scheduler.ask_view(job) == direct  # the loop stopped: read at once again

    stuck = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
    stuck.start()
    scheduler.loop_thread = stuck  # a loop in a pass that outlasts the page's wait
    assert scheduler.ask_view(job, timeout=0.2) == {}
    store.dispose()


def test_job_pages_asked_as_fast_as_the_api_answers_wake_the_loop_twice_a_second(
    tmp_path: Path,
) -> None:
    """A user polling a job's page as fast as the API answers must not keep the loop
    passing back to back: the pages' questions wake it at most every half second."""
    loop = virtual_loop(tmp_path, "tiresias-las", v100s=1)
    scheduler = loop.scheduler
    job = queue(loop.store, "alice", loop.clock, command=["sleep", "100"], gpus=1)
    run_for(scheduler, loop.clock, 5)
    wakes: list[float] = []

    class Counted(threading.Event):
        def set(self) -> None:
            wakes.append(time.monotonic())
            super().set()

    scheduler.wake = Counted()
    stuck = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
    stuck.start()
    scheduler.loop_thread = stuck  # a loop thread that answers nothing: each ask times out
    began = time.monotonic()
    for _ in range(40):
        scheduler.ask_view(job, timeout=0.02)
    took = time.monotonic() - began
    assert len(wakes) <= took / 0.5 + 2, (len(wakes), took)  # (40 without the limit)
    loop.store.dispose()


def test_a_route_that_stored_a_request_is_answered_by_the_pass_that_carries_it_out(
    tmp_path: Path,
) -> None:
    """A cancel or suspend is stored (it outlives a restart), then the route waits
    on the loop's inbox: its answer comes at the end of the pass that read the store
    after the write, so the job is already as that request left it, with no wait
    for a second pass; a loop failing its passes leaves the route to its timeout,
    and the next pass that completes answers it."""
    from types import SimpleNamespace

    from corral.api.jobs import ask_scheduler
    from corral.model.status import JobStatus
    from corral.runtime.jobspec.config import UserConfig

    loop = virtual_loop(tmp_path, "fifo", v100s=1, tick=30.0)  # (a tick that never comes)
    store, clock, scheduler = loop.store, loop.clock, loop.scheduler
    running = queue(store, "alice", clock, command=["sleep", "100"], gpus=1)
    waiting = queue(store, "alice", clock, command=["sleep", "100"], gpus=1)
    run_for(scheduler, clock, 2)
    assert running in scheduler.attempts
    alice = UserConfig(name="alice", token="t" * 32)
    ctx = SimpleNamespace(store=store, scheduler=scheduler)
    assert not scheduler.after_a_pass()  # no loop thread: nothing to wait for

    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop, False), name="the-loop")
    thread.start()
    try:
        passes = scheduler.passes
        view = ask_scheduler(ctx, waiting, alice, "cancel", {JobStatus.PENDING})  # type: ignore[arg-type]
        assert view.status == JobStatus.CANCELLED
        view = ask_scheduler(ctx, running, alice, "suspend", {JobStatus.RUNNING})  # type: ignore[arg-type]
        assert view.status in (JobStatus.SUSPENDED, JobStatus.RUNNING)  # its stop is asked
        assert scheduler.book.peek(running).phase.name == "HELD"
        assert scheduler.passes - passes <= 3  # one pass each (and one the stop may wake)

        failing = pytest.MonkeyPatch()
        failing.setattr(type(scheduler), "_pass", lambda self: 1 / 0)
        try:
            began = time.monotonic()
            assert not scheduler.after_a_pass(timeout=0.3)  # no pass completes
            assert time.monotonic() - began >= 0.3
            late = threading.Thread(target=scheduler.after_a_pass, args=(10.0,))
            late.start()
            time.sleep(0.2)
        finally:
            failing.undo()
        scheduler.wake.set()
        late.join(5)
        assert not late.is_alive()  # the first pass to complete answered it
        assert scheduler.awaiting == []
    finally:
        stop.set()
        scheduler.wake.set()
        thread.join(10)
    loop.close()


def test_a_long_queues_reasons_are_written_together_and_each_jobs_is_its_own(
    tmp_path: Path,
) -> None:
    """A thousand queued jobs whose reasons change in one pass (their first: Submitted
    becomes Resources) cost a few statements, not a read and a write each (at ten
    thousand jobs that held the loop for seconds); the job on the GPU keeps none."""
    loop = virtual_loop(tmp_path, "fifo", v100s=1)
    store, clock, scheduler = loop.store, loop.clock, loop.scheduler
    running = queue(store, "alice", clock, command=["sleep", "1000"], gpus=1, duration=1000)
    run_for(scheduler, clock, 2)
    waiting = [
        queue(store, "bob", clock, command=["sleep", "5"], gpus=1, duration=5) for _ in range(1000)
    ]
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    scheduler.step()
    assert len(statements) < 60, len(statements)
    with store.session() as s:
        reasons = {job: why for job, why in s.execute(select(JobRow.id, JobRow.reason))}
    assert reasons[running] is None
    assert {reasons[job] for job in waiting} == {"Resources"}
    assert scheduler.answers.remaining[waiting[-1]] == (5.0, "duration")  # (the owner's)
    store.dispose()
