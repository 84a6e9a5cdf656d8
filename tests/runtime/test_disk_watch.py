"""The disks under the service's state and jobs' folders (:mod:`corral.runtime.loop.disk_watch`):
launches wait below the floor and go on above it, each change said once; the
reserve is let go when the state's disk is full and taken again with room."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from corral.runtime.loop.disk_watch import CHECK_EVERY, MIB, DiskWatch

FLOOR, WARN, RESERVE = 100 * MIB, 400 * MIB, 8 * MIB


def watch(tmp_path: Path, free: list[int]) -> tuple[DiskWatch, io.StringIO, CollectorRegistry]:
    out, registry = io.StringIO(), CollectorRegistry()
    made = DiskWatch(
        tmp_path, None, FLOOR, WARN, RESERVE, registry, free_of=lambda _p: free[0], out=out
    )
    return made, out, registry


def test_launches_wait_below_the_floor_each_change_said_once(tmp_path: Path) -> None:
    free = [10 * WARN]
    disks, out, registry = watch(tmp_path, free)
    now = 0.0
    readings = []
    for amount in [10 * WARN, 300 * MIB, 250 * MIB, 50 * MIB, 40 * MIB, 60 * MIB, 500 * MIB]:
        free[0] = amount
        for _ in range(3):  # (several passes in each state: one line each change)
            now += CHECK_EVERY
            readings.append(disks.launches_paused(now))
    assert readings == [False] * 9 + [True] * 9 + [False] * 3
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines  # low, then full (waiting), then room again
    assert "below disk_warn" in lines[0] and "new launches wait" in lines[1]
    assert "room again" in lines[2]
    text = generate_latest(registry).decode()
    assert "corral_launches_paused 0.0" in text and "corral_disk_free_bytes" in text


def test_a_disk_is_read_only_every_few_seconds(tmp_path: Path) -> None:
    free = [10 * MIB]
    disks, _out, _ = watch(tmp_path, free)
    assert disks.launches_paused(0.0)
    free[0] = 10 * WARN
    assert disks.launches_paused(CHECK_EVERY / 2)  # (not read again yet)
    assert not disks.launches_paused(CHECK_EVERY)


def test_the_reserve_is_taken_as_the_disk_fills_and_let_go_when_it_is_full(
    tmp_path: Path,
) -> None:
    free = [100 * WARN]
    disks, out, _ = watch(tmp_path, free)
    reserve = tmp_path / "disk-reserve"
    disks.launches_paused(0.0)
    assert not reserve.exists()  # a roomy disk: none taken
    free[0] = 3 * WARN
    disks.launches_paused(CHECK_EVERY)
    assert reserve.stat().st_size == RESERVE
    free[0] = FLOOR - 1
    disks.launches_paused(2 * CHECK_EVERY)
    assert not reserve.exists() and "let go of the 8 MiB" in out.getvalue()


def test_the_loop_holds_launches_while_a_disk_is_full_and_fails_none() -> None:
    """In virtual time, the real loop: a job placed while the disk is below the floor
    is not launched (nor failed); once there is room it runs and succeeds."""
    from corral.testing import fault_schedules as fs

    free = [FLOOR // 2]
    with fs.world("fifo") as w:
        w.scheduler.disks.free_of = lambda _p: free[0]
        start = w.clock()
        w.apply(fs.Op(0.0, "submit", ("alice", {"command": ["sleep", "2"], "gpus": 1})))
        w.run_until(start + 20)
        assert w.executor.launches == [] and w.waiting() != {}
        free[0] = 10 * WARN
        w.run_until(start + 40)
        w.drain()
        assert len(w.executor.launches) == 1 and w.waiting() == {}
        (process,) = w.executor.processes.values()
        assert process.exit_code == 0 and process.started >= start + 20


def test_a_store_failing_every_pass_is_said_once_not_a_traceback_a_second(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The loop's retries of a store that fails (a full disk) print one line, then one a
    minute with a count: the log once took a traceback a second."""
    import threading

    from sqlalchemy.exc import OperationalError

    from corral.testing import fault_schedules as fs

    with fs.world("fifo") as w:
        loop = w.scheduler

        def failing() -> None:
            raise OperationalError("INSERT", {}, Exception("database or disk is full"))

        loop.step = failing  # type: ignore[method-assign]
        stop = threading.Event()
        threading.Timer(2.5, stop.set).start()
        loop.run(stop, recover=False)
    said = capsys.readouterr().err
    assert said.count("the store failed a pass") == 1 and "disk is full" in said, said
    assert "Traceback" not in said and loop.errors >= 2


def test_on_a_small_disk_the_floors_are_shares_of_it(tmp_path: Path) -> None:
    """A 16 MiB state disk with the default floor of 256 MiB would never launch a job:
    there the floor is 5% of the disk, the warning 10%."""
    disks = DiskWatch(
        tmp_path, None, 256 * MIB, 1024 * MIB, 64 * MIB, CollectorRegistry(),
        free_of=lambda _p: 12 * MIB, size_of=lambda _p: 16 * MIB,
    )  # fmt: skip
    assert (disks.floor, disks.warn) == (int(0.8 * MIB), int(1.6 * MIB))
    assert not disks.launches_paused(0.0)
