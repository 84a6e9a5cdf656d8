"""Gandiva's time-slicing of any number of jobs on a GPU set, live in virtual
time: three jobs on one GPU take turns one at a time, and a restarted service
goes on with the turns where its events left them (it resumes every process
it adopts; the next turn pauses all but one)."""

from __future__ import annotations

from pathlib import Path

from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.storage.store import JobRow, Store
from corral.testing.virtual import VirtualClock, VirtualExecutor, run_for, virtual_scheduler
from tests.runtime.harness import make_config
from tests.runtime.virtual_loop import queue

QUANTUM = 2.0


def running_now(executor: VirtualExecutor) -> list[int]:
    """The jobs whose processes run unpaused."""
    return sorted(p.job for p in executor.running() if not p.paused)


def test_three_jobs_take_turns_and_go_on_after_a_restart(tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        policy="gandiva",
        policy_options={"quantum": QUANTUM, "packing": 0},
        gpus=[GpuGroup(type="V100", count=1)],
    )
    store = Store(config.store_url)
    clock = VirtualClock()
    executor = VirtualExecutor(config, clock, store)
    scheduler = virtual_scheduler(config, store, clock, executor)
    jobs = [
        queue(store, "alice", clock, name=name, command=["train", "2000", "50"], gpus=1)
        for name in "abc"
    ]
    seen: set[int] = set()
    for _ in range(40):  # 20 virtual seconds: ten quanta
        run_for(scheduler, clock, 0.5, tick=0.5)
        now = running_now(executor)
        if len(executor.running()) == 3:
            assert len(now) == 1, f"jobs {now} run at once on one GPU"
            seen.update(now)
    assert seen == set(jobs), "every job had its turn"
    # the service restarts: a new loop adopts the three processes
    scheduler = virtual_scheduler(config, store, clock, executor)
    assert sorted(scheduler.turns) and len(next(iter(scheduler.turns.values())).members) == 3
    seen.clear()
    for _ in range(40):
        run_for(scheduler, clock, 0.5, tick=0.5)
        now = running_now(executor)
        if len(executor.running()) == 3:
            assert len(now) == 1, f"after the restart, jobs {now} run at once"
            seen.update(now)
    assert seen == set(jobs)
    for _ in range(600):
        run_for(scheduler, clock, 1.0, tick=0.5)
        with store.session() as s:
            states = [s.get(JobRow, j).status for j in jobs]  # type: ignore[union-attr]
        if all(x == "SUCCEEDED" for x in states):
            break
    assert states == ["SUCCEEDED"] * 3
