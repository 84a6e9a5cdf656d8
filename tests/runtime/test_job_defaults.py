"""What the loop gives each launch by default: its GPUs' share of the host's memory
(``job_memory``: auto, at least 2 GiB a GPU) unless the job gave ``--mem``, and the
process limit ``job_max_processes``."""

from __future__ import annotations

from corral.runtime.loop.launching import JOB_MEMORY_LEAST, JOB_MEMORY_SHARE, host_memory
from corral.testing import fault_schedules as fs


def test_each_launch_carries_the_default_limits() -> None:
    with fs.world("fifo") as w:
        start = w.clock()
        w.apply(fs.Op(0.0, "submit", ("alice", {"command": ["sleep", "1"], "gpus": 2})))
        w.apply(fs.Op(0.0, "submit", ("alice", {"command": ["sleep", "1"], "gpus": 1,
                                                "memory": "1G"})))  # fmt: skip
        w.run_until(start + 10)
        w.drain()
        first, second = w.executor.launches
        share = max(host_memory() * JOB_MEMORY_SHARE / 8, JOB_MEMORY_LEAST)  # (8 GPUs)
        assert first.memory is None and first.memory_default == int(share * 2)
        assert second.memory == 2**30  # (its own: the default does not apply)
        assert first.pids == second.pids == w.config.job_max_processes == 10000
