"""Pollux learning a live job's scaling, in virtual time: what its heartbeats
teach it must be the step time of the GPUs it measured them on."""

from __future__ import annotations

from pathlib import Path

from corral.runtime.jobspec.config import GpuGroup
from tests.runtime.virtual_loop import virtual_loop


def test_a_job_slow_to_leave_its_old_gpus_is_not_measured_on_its_new_ones(
    tmp_path: Path,
) -> None:
    """Grown from one GPU to two, a job whose first process takes seconds to leave
    (a checkpoint written at SIGTERM) still reports the one-GPU step time while the
    plan already holds it on two. Taken for a two-GPU measurement, it let the
    policy trust the job on four, and the job was relaunched on all four without
    ever running on two (a live test saw it on a loaded machine)."""
    loop = virtual_loop(
        tmp_path,
        "pollux",
        policy_options={"interval": 1.0, "restart_delay": 0},
        gpus=[GpuGroup(type="T4", count=4)],
        heartbeat_interval=0.2,
    )
    loop.executor.faults["slow_term"] = 6.0  # the first process leaves 6 s after SIGTERM
    job = loop.queue(command=["train", "1000000", "100"], gpus=1, model="cifar10", batch_size=128)
    loop.run(30, tick=0.2)
    sizes = [len(a.gpus or []) for a in loop.attempts(job)]
    assert sizes[:2] == [1, 2], sizes  # one GPU measured: trusted on two, not four
    loop.close()
