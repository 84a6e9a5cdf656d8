"""The executor's round keepers: at most ``keep`` per GPU, ended with their job and the service."""

from __future__ import annotations

import subprocess
from pathlib import Path

from corral.runtime.config import GpuGroup
from corral.runtime.executor import LocalExecutor, RunningKeeper


def fake_keeper(used: float) -> RunningKeeper:
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    return RunningKeeper(process, Path("/nonexistent.sock"), used)


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
