"""The executor's round keepers: at most ``keep`` per GPU, ended with their job and the service."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from corral.runtime.execution.executor import LaunchRequest, LocalExecutor, RunningKeeper
from corral.runtime.execution.standby import Idle
from corral.runtime.jobspec.config import GpuGroup


def fake_keeper(used: float) -> RunningKeeper:
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    return RunningKeeper(process, used)


def test_keepers_beyond_the_limit_end_least_recently_used_first() -> None:
    executor = LocalExecutor([GpuGroup(type="V100", count=2)])
    made = {(job, 0): fake_keeper(used=job) for job in (1, 2, 3)} | {(1, 1): fake_keeper(0.5)}
    executor.keepers.update(made)
    try:
        executor._evict(0, 1)  # one may stay on GPU 0: the most recently used
        assert set(executor.keepers) == {(3, 0), (1, 1)}
        for key in ((1, 0), (2, 0)):
            assert made[key].process.wait(10) < 0  # ended by a signal
        executor.release_keepers(1)  # its job is over: its keeper on GPU 1 goes
        assert set(executor.keepers) == {(3, 0)}
        assert made[(1, 1)].process.wait(10) < 0
        executor.close(jobs_running=False)
        assert not executor.keepers
        assert made[(3, 0)].process.wait(10) < 0
    finally:
        for keeper in made.values():
            keeper.process.kill()
            keeper.process.wait()


class FakePool:
    """Standby workers that become ready when the test says so."""

    def __init__(self) -> None:
        self.ready: list[object] = []
        self.assigned: list[tuple[list[str], bool]] = []

    def take(self) -> object | None:
        return self.ready.pop() if self.ready else None

    def assign(self, worker, folder, log, conf, env, argv, tethered=False) -> int:
        self.assigned.append((argv, tethered))
        return worker.process.pid

    def refill(self) -> None:
        return None


def test_a_keeper_wanted_while_no_worker_was_ready_starts_when_one_is(tmp_path: Path) -> None:
    from corral.runtime.execution.executor import KeeperRequest
    from corral.runtime.execution.launcher import Confinement

    executor = LocalExecutor([GpuGroup(type="V100", count=1)])
    pool = FakePool()
    executor.pool = pool  # type: ignore[assignment]
    want = KeeperRequest(5, 0, ["corral.train.round_keeper"], tmp_path / "k.sock", tmp_path, 1)
    assert not executor._keeper(want, Confinement(), {})  # none ready: the task runs itself
    executor.tend()
    assert pool.assigned == [] and not executor.keepers
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        pool.ready.append(Idle(sleeper, None))  # type: ignore[arg-type]
        executor.tend()  # a worker is ready: the keeper starts, tethered to the service
        assert pool.assigned == [(["corral.train.round_keeper"], True)]
        assert set(executor.keepers) == {(5, 0)}
        assert executor._keeper(want, Confinement(), {})  # the job's next task finds it
        executor.release_keepers(5)
        assert not executor.keepers and not executor._wanted
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_ended_launcher_is_reaped_at_the_next_pass_without_a_poll(tmp_path: Path) -> None:
    """A launcher whose attempt the loop never polls again (set aside, say) is reaped by
    the executor's tending at each pass, not left a zombie while the service runs."""
    executor = LocalExecutor([GpuGroup(type="V100", count=1)])
    try:
        folder = tmp_path / "attempt-1"
        folder.mkdir()
        request = LaunchRequest(
            ["true"], {"PATH": os.environ["PATH"]}, str(tmp_path), tuple(executor.slots()),
            folder, folder / "log.txt",
        )  # fmt: skip
        ref = executor.launch(request)
        deadline = time.monotonic() + 30
        while not (folder / "exit.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        state = Path(f"/proc/{ref.pid}/stat").read_text().split(") ")[1][0]
        assert state == "Z"  # ended, not yet reaped
        executor.tend()
        assert not Path(f"/proc/{ref.pid}").exists()
    finally:
        executor.close(jobs_running=False)
