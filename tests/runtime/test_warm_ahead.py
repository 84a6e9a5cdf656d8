"""Warm workers started while a user's jobs wait (virtual time, and the local
executor's part against a stand-in for the worker's process): on the GPUs the
user's running jobs hold first, then free ones, of a type the jobs may run on;
never more than the user's GPU cap; never for jobs a warm worker cannot run
(several GPUs, a memory limit), for held jobs, or with ``workers.warm`` off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.runtime.execution.executor import Executor, GpuSlot, LaunchRequest, LocalExecutor
from corral.runtime.execution.identity import RunAs
from corral.runtime.execution.warm_worker import Warm, WarmWorkers
from corral.runtime.jobspec.config import GpuGroup, LimitsConfig, WorkersConfig
from tests.runtime.test_held_jobs import ask
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop

TASK = ["python", "-m", "corral.train.run_task", "examples.tasks:tiny"]
"""A job given as a task: what a warm worker runs."""


def recording(loop: VirtualLoop, most_seen: list[int | None]) -> list[tuple[str | None, int]]:
    """The loop's executor, made to say which (user, GPU) warm workers it was asked
    for (a user's uid stands for the user: the test runs without Unix accounts)."""
    asked: list[tuple[str | None, int]] = []

    def warm_up(run_as: RunAs | None, slot: GpuSlot, most: int | None = None) -> bool:
        asked.append((None if run_as is None else run_as.name, slot.id))
        most_seen.append(most)
        return True

    loop.executor.warm_up = warm_up  # type: ignore[method-assign]
    return asked


def busy_loop(tmp_path: Path, **overrides: Any) -> VirtualLoop:
    """Two V100s and two K80s, each held by a long job of alice's or bob's."""
    overrides.setdefault("workers", WorkersConfig(warm=True))
    loop = virtual_loop(
        tmp_path,
        "fifo",
        gpus=[GpuGroup(type="V100", count=2), GpuGroup(type="K80", count=2)],
        **overrides,
    )
    for user, kind in (("alice", "V100"), ("bob", "V100"), ("alice", "K80"), ("bob", "K80")):
        loop.queue(user, command=["sleep", "1000"], gpus=1, gpu_type=kind)
    loop.run(2)
    return loop


def test_waiting_task_jobs_get_warm_workers_where_their_user_runs_first(tmp_path: Path) -> None:
    loop = busy_loop(tmp_path)
    holders = dict(loop.scheduler.holders)
    alice_gpus = sorted(g for g, job in holders.items() if job in (1, 3))
    assert len(holders) == 4 and len(alice_gpus) == 2
    loop.queue("alice", command=TASK, gpus=1, gpu_type="V100")
    loop.queue("alice", command=TASK, gpus=1)  # any type
    loop.queue("bob", command=["sleep", "5"], gpus=1)  # not a task: no warm worker
    loop.queue("bob", command=TASK, gpus=2)  # two GPUs: none either
    loop.queue("bob", command=TASK, gpus=1, memory=1024)  # a memory limit: none
    most: list[int | None] = []
    asked = recording(loop, most)
    loop.run(1)
    wanted = {gpu for user, gpu in asked if user is None}
    assert wanted == set(alice_gpus), asked  # alice's own GPUs (no Unix users here)
    assert set(most) == {None}  # no cap configured
    loop.close()


def test_a_user_never_has_more_warm_workers_than_gpus_they_may_hold(tmp_path: Path) -> None:
    loop = busy_loop(tmp_path, limits=LimitsConfig(user_gpus=1))
    for _ in range(3):
        loop.queue("alice", command=TASK, gpus=1)
    most: list[int | None] = []
    asked = recording(loop, most)
    loop.run(1)
    assert asked and set(most) == {1}
    assert len({gpu for _, gpu in asked}) == 1  # one GPU's worker asked, pass after pass
    loop.close()


def test_held_jobs_and_warm_off_start_no_worker(tmp_path: Path) -> None:
    loop = busy_loop(tmp_path, workers=WorkersConfig(warm=False))
    loop.queue("alice", command=TASK, gpus=1)
    asked = recording(loop, [])
    loop.run(1)
    assert asked == []
    loop.close()
    on = busy_loop(tmp_path / "on")
    held = on.queue("alice", command=TASK, gpus=1)
    ask(on, held, "hold")  # as `corral hold` records it, before the loop has seen the job
    asked = recording(on, [])
    on.run(1)
    assert on.row(held).held == "user" and asked == []
    on.close()


class FakeProcess:
    """A warm worker's process that runs until killed (nothing is started)."""

    pid = 4242

    def __init__(self) -> None:
        self.ended: int | None = None

    def poll(self) -> int | None:
        return self.ended

    def kill(self) -> None:
        self.ended = -9

    def wait(self, timeout: float | None = None) -> int | None:
        return self.ended


def stand_in_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[LocalExecutor, list[tuple[int | None, str]]]:
    """The local executor's warm workers alone, each worker a stand-in process; and
    the (uid, device) of each worker started."""
    started: list[tuple[int | None, str]] = []

    def start(self: WarmWorkers, key: tuple[int | None, str], *rest: Any) -> None:
        started.append(key)
        self.workers[key] = Warm(FakeProcess(), tmp_path / f"{key[1]}.sock")  # type: ignore[arg-type]

    monkeypatch.setattr(WarmWorkers, "start", start)
    executor = LocalExecutor.__new__(LocalExecutor)
    executor.warm = WarmWorkers(tmp_path / "warm", idle=60.0)
    return executor, started


def test_the_local_executor_starts_a_users_worker_once_and_within_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor, started = stand_in_executor(tmp_path, monkeypatch)
    alice = RunAs("alice", 1001, 1001, (), "/home/alice")
    bob = RunAs("bob", 1002, 1002, (), "/home/bob")
    gpu = [GpuSlot(k, "n", "V100") for k in range(3)]
    assert executor.warm_up(alice, gpu[0], most=2) and executor.warm_up(alice, gpu[0], most=2)
    assert started == [(1001, "v0")]  # once
    assert executor.warm_up(alice, gpu[1], most=2)
    assert not executor.warm_up(alice, gpu[2], most=2)  # a third would pass alice's cap
    assert executor.warm_up(bob, gpu[2], most=2)  # another user's own workers
    assert started == [(1001, "v0"), (1001, "v1"), (1002, "v2")]
    assert not Executor.warm_up(executor, alice, gpu[0])  # (the default: none kept)


def test_a_cold_start_leaves_a_worker_for_next_time_only_within_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task job that starts cold starts its user's worker on its GPU for the next
    one, but not past the user's cap: jobs moving from GPU to GPU would otherwise
    leave the user workers on every GPU (found by the fault schedules)."""
    executor, started = stand_in_executor(tmp_path, monkeypatch)
    alice = RunAs("alice", 1001, 1001, (), "/home/alice")
    gpu = [GpuSlot(k, "n", "V100") for k in range(3)]

    def cold_start(slot: GpuSlot, most: int | None) -> str:
        request = LaunchRequest(TASK, {}, None, (slot,), tmp_path, tmp_path / "log",
                                run_as=alice, warm_argv=TASK[2:], warm_most=most)  # fmt: skip
        started_in, how = executor._launch_warm(request, None, {})  # type: ignore[arg-type]
        assert started_in is None  # (no worker was ready: it starts as before)
        return how

    assert "warming up" in cold_start(gpu[0], 2) and "warming up" in cold_start(gpu[1], 2)
    assert "as many GPUs as they may hold" in cold_start(gpu[2], 2)
    assert started == [(1001, "v0"), (1001, "v1")]
    assert "warming up" in cold_start(gpu[2], None)  # no cap
    assert started[-1] == (1001, "v2")


def blocked_loop(tmp_path: Path) -> VirtualLoop:
    """Two V100s under FIFO: alice's long job on one, a 2-GPU job of bob's at the head
    of the queue keeping the other free while the jobs behind it wait."""
    loop = virtual_loop(tmp_path, "fifo", v100s=2, workers=WorkersConfig(warm=True))
    loop.queue("alice", command=["sleep", "1000"], gpus=1)
    loop.run(1)
    loop.queue("bob", command=["sleep", "5"], gpus=2)
    loop.run(1)
    return loop


def test_a_free_gpu_is_warmed_for_one_user_not_for_everyone_waiting(tmp_path: Path) -> None:
    loop = blocked_loop(tmp_path)
    (alice_gpu,) = [g for g, job in loop.scheduler.holders.items() if job == 1]
    for user in ("alice", "alice", "bob", "bob"):
        loop.queue(user, command=TASK, gpus=1)
    # (Unix accounts named only now, once no job launches any more: the recording
    # executor tells the users apart by them)
    loop.scheduler.identities = {
        name: RunAs(name, uid, uid, (), f"/home/{name}")
        for name, uid in (("alice", 1001), ("bob", 1002))
    }
    asked = recording(loop, [])
    loop.run(1)
    by_gpu: dict[int, set[str | None]] = {}
    for user, gpu in asked:
        by_gpu.setdefault(gpu, set()).add(user)
    (free,) = set(by_gpu) - {alice_gpu}
    assert by_gpu == {alice_gpu: {"alice"}, free: {"alice"}}  # the longest waiting: alice
    loop.close()


def test_a_warm_worker_that_cannot_start_never_stops_the_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = blocked_loop(tmp_path)
    task = loop.queue("alice", command=TASK, gpus=1)

    def broken(run_as: RunAs | None, slot: GpuSlot, most: int | None = None) -> bool:
        raise OSError("no room for a worker")

    loop.executor.warm_up = broken  # type: ignore[method-assign]
    loop.run(8)  # bob's 2-GPU job cannot start while alice's runs; the pass goes on
    assert loop.row(task).status == "PENDING" and loop.scheduler.errors == 0
    assert "did not start: no room for a worker" in capsys.readouterr().err
    loop.close()
