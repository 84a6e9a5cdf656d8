"""Only the loop writes its book: what a heartbeat reports reaches the loop through
its inbox, at its next pass, and what a heartbeat is answered with is read from
the answers the loop publishes whole after each pass (virtual time)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.storage.store import Store
from corral.testing.virtual import VirtualClock, VirtualExecutor, run_for, virtual_scheduler
from tests.runtime.harness import make_config
from tests.runtime.virtual_loop import queue


def test_a_reported_memory_reaches_the_loop_at_its_next_pass_and_only_for_a_running_job(
    tmp_path: Path,
) -> None:
    config = make_config(
        tmp_path, policy="fifo", policy_options={}, gpus=[GpuGroup(type="V100", count=2)]
    )
    store = Store(config.store_url)
    clock = VirtualClock()
    scheduler = virtual_scheduler(config, store, clock, VirtualExecutor(config, clock, store))
    running = queue(store, "alice", clock, command=["sleep", "100"], gpus=1)
    waiting = queue(store, "bob", clock, command=["sleep", "100"], gpus=2)
    run_for(scheduler, clock, 2)
    assert running in scheduler.attempts and waiting not in scheduler.attempts

    posting = threading.Thread(
        target=lambda: [scheduler.report_memory(job, 3e9) for job in (running, waiting)]
    )
    posting.start()
    posting.join()
    assert scheduler.gpu_memory == {}  # posted, not written: the loop has not passed yet
    scheduler.step()
    assert scheduler.gpu_memory == {running: 3e9}  # a job that holds nothing is not kept
    store.dispose()


def test_the_published_answers_are_whole_values_no_reader_can_change(tmp_path: Path) -> None:
    config = make_config(tmp_path, policy="fifo", policy_options={})
    store = Store(config.store_url)
    clock = VirtualClock()
    scheduler = virtual_scheduler(config, store, clock, VirtualExecutor(config, clock, store))
    before = scheduler.answers
    scheduler.batch_sizes[7] = 256  # as a policy's plan would set it
    run_for(scheduler, clock, 1)
    after = scheduler.answers
    assert after is not before and after.batch_sizes == {7: 256} and before.batch_sizes == {}
    with pytest.raises(TypeError):
        after.batch_sizes[7] = 1  # type: ignore[index]
    store.dispose()
