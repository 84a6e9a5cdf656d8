"""Jobs of no GPUs (``gpus: 0``) in virtual time: they run beside GPU jobs without
taking a GPU, are counted against the service's CPUs and memory (strictly in
order), are never shown to the policy, and go through every request a GPU job
does (cancel, suspend and resume, requeue, dependencies, time limits, a
restart)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from corral.errors import InputError
from corral.runtime.execution.executor import job_environment
from corral.runtime.jobspec.config import CpuJobsConfig
from corral.runtime.jobspec.directives import (
    parse_options,
    per_unit_memory,
    script_fields,
)
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.admission import Refused
from corral.runtime.storage.store import JobRow
from corral.testing.virtual import virtual_scheduler
from tests.runtime.test_held_jobs import ask
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop

POLICIES = ["fifo", "tiresias-las", "gavel-max-min-fairness", "themis", "gandiva", "pollux"]


def cpu_loop(tmp_path: Path, policy: str = "fifo", cpus: int = 4, v100s: int = 1) -> VirtualLoop:
    return virtual_loop(
        tmp_path, policy=policy, v100s=v100s, cpu_jobs=CpuJobsConfig(cpus=cpus, memory="8G")
    )


def processes(loop: VirtualLoop) -> dict[int, tuple[int, ...]]:
    """Running job -> the GPUs its process was given."""
    return {p.job: p.gpus for p in loop.executor.running()}


@pytest.mark.parametrize("policy", POLICIES)
def test_cpu_only_jobs_run_beside_gpu_jobs_without_a_gpu_under_every_kind_of_policy(
    tmp_path: Path, policy: str
) -> None:
    loop = cpu_loop(tmp_path, policy)
    gpu = loop.queue(command=["sleep", "20"], gpus=1)
    cpu = [loop.queue(command=["sleep", "10"], gpus=0) for _ in range(2)]
    loop.run(3)
    running = processes(loop)
    assert running.get(gpu) == (0,), running  # the GPU job has its GPU
    assert all(running.get(job) == () for job in cpu), running  # and the CPU jobs none
    row = loop.row(cpu[0])
    assert (row.status, row.gpus) == ("RUNNING", [])
    request = next(p.request for p in loop.executor.running() if p.job == cpu[0])
    assert request.cpus == 1  # confined to the one CPU it holds
    assert request.env["SLURM_GPUS_ON_NODE"] == "0"
    assert job_environment(request)["CUDA_VISIBLE_DEVICES"] == ""  # it sees no GPU
    loop.run(40)
    assert [loop.row(j).status for j in (gpu, *cpu)] == ["SUCCEEDED"] * 3
    assert loop.scheduler.book.check() == []
    loop.close()


def test_cpu_jobs_are_counted_against_the_cpus_and_memory_strictly_in_order(
    tmp_path: Path,
) -> None:
    loop = cpu_loop(tmp_path, cpus=4)
    first = loop.queue(command=["sleep", "10"], gpus=0, cpus=3)
    big = loop.queue(command=["sleep", "10"], gpus=0, cpus=2)  # 3 + 2 > 4: waits
    small = loop.queue(command=["sleep", "10"], gpus=0)  # 1 CPU would fit, but is behind
    # a GPU job that gives CPUs counts them; memory counts where given
    loop.run(2)
    assert set(processes(loop)) == {first}
    assert (loop.row(big).status, loop.row(big).reason) == ("PENDING", "Resources")
    assert (loop.row(small).status, loop.row(small).reason) == ("PENDING", "Priority")
    loop.run(11)  # the first ended: both behind it fit now
    assert set(processes(loop)) == {big, small}
    loop.run(12)
    heavy = loop.queue(command=["sleep", "5"], gpus=0, memory="6G")
    gpu = loop.queue(command=["sleep", "30"], gpus=1, cpus=2)
    loop.run(2)
    assert set(processes(loop)) == {heavy, gpu}
    second = loop.queue(command=["sleep", "5"], gpus=0, memory="4G")  # 6G + 4G > 8G
    third = loop.queue(command=["sleep", "5"], gpus=0, cpus=2)  # behind it
    loop.run(2)
    assert loop.row(second).reason == "Resources" and loop.row(third).reason == "Priority"
    loop.run(5)  # the 6G job ended: the 4G one starts; the 2-CPU one waits on the GPU job's
    assert set(processes(loop)) == {gpu, second}
    assert loop.row(third).reason == "Resources"
    loop.run(40)
    assert all(loop.row(j).status == "SUCCEEDED" for j in (heavy, gpu, second, third))
    loop.close()


def test_a_higher_priority_cpu_job_goes_first(tmp_path: Path) -> None:
    loop = cpu_loop(tmp_path, cpus=1)
    running = loop.queue(command=["sleep", "5"], gpus=0)
    loop.run(1)
    low = loop.queue(command=["sleep", "5"], gpus=0)
    high = loop.queue(command=["sleep", "5"], gpus=0)
    with loop.store.session() as s:
        row = s.get(JobRow, high)
        assert row is not None
        row.priority = 10  # (as the API stores a priority given)
    loop.run(6)
    assert set(processes(loop)) == {high}
    assert loop.row(running).status == "SUCCEEDED" and loop.row(low).status == "PENDING"
    loop.close()


def test_the_policy_never_sees_a_cpu_only_job(tmp_path: Path) -> None:
    loop = cpu_loop(tmp_path, "tiresias-las")
    seen: list[set[int]] = []
    policy = loop.scheduler.policy
    schedule = policy.schedule

    def watching(state):  # type: ignore[no-untyped-def]
        seen.append({int(i) for i in (*state.pending, *state.running) if state.gpus[i] == 0})
        return schedule(state)

    policy.schedule = watching  # type: ignore[method-assign]
    loop.queue(command=["sleep", "20"], gpus=1)
    cpu = loop.queue(command=["sleep", "5"], gpus=0)
    loop.run(10)
    assert seen and all(not s for s in seen)
    assert loop.row(cpu).status == "SUCCEEDED"
    assert loop.scheduler.policy_view(cpu) == {}
    loop.close()


def test_requests_dependencies_time_limits_and_a_restart_act_on_cpu_only_jobs(
    tmp_path: Path,
) -> None:
    loop = cpu_loop(tmp_path, cpus=2)
    cancelled = loop.queue(command=["sleep", "100"], gpus=0)
    suspended = loop.queue(command=["sleep", "20"], gpus=0)
    loop.run(2)
    ask(loop, cancelled, "cancel")
    ask(loop, suspended, "suspend")
    loop.run(35)
    assert loop.row(cancelled).status == "CANCELLED"
    assert loop.row(suspended).status == "SUSPENDED"
    ask(loop, suspended, "resume")
    after = loop.queue(command=["sleep", "3"], gpus=0, dependency={"afterok": [suspended]})
    timed = loop.queue(command=["sleep", "100"], gpus=0, wall_time=5)
    loop.run(3)
    assert loop.row(suspended).status == "RUNNING"
    assert loop.row(after).reason == "Dependency"
    # a restart adopts the running CPU-only jobs, which keep holding their CPUs
    loop.scheduler = virtual_scheduler(loop.config, loop.store, loop.clock, loop.executor)
    waiting = loop.queue(command=["sleep", "3"], gpus=0)
    loop.run(2)
    assert loop.row(waiting).reason == "Resources"
    loop.run(60)
    assert loop.row(timed).status == "TIMEOUT"
    assert [loop.row(j).status for j in (suspended, after, waiting)] == ["SUCCEEDED"] * 3
    assert loop.scheduler.book.check() == []
    loop.close()


def test_gpus_zero_in_specs_and_scripts_and_what_is_refused_with_it(tmp_path: Path) -> None:
    assert JobSpec(command=["true"], gpus=0).cpus_held() == 1
    assert JobSpec(command=["true"], gpus=0, cpus=3).cpus_held() == 3
    assert JobSpec(command=["true"], gpus=2).cpus_held() == 0
    for bad in ({"nodes": 2}, {"gpu_type": "V100"}, {"exclusive": True}, {"prerun_steps": 3}):
        with pytest.raises(ValidationError, match="CPU-only job"):
            JobSpec(command=["true"], gpus=0, **bad)
    script = tmp_path / "prep.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:0\n#SBATCH -c 2\npython prep.py\n")
    assert script_fields(script)["gpus"] == 0
    assert parse_options(["--gpus", "0"], "job.sh", 2)["gpus"] == 0
    script.write_text("#!/bin/bash\n#SBATCH --gpus=0\n#SBATCH --mem-per-gpu=4G\ntrue\n")
    with pytest.raises(InputError, match=r"prep\.sh:3: field '--mem-per-gpu'"):
        per_unit_memory(script_fields(script), str(script))  # (as corral submit reads it)
    loop = cpu_loop(tmp_path, cpus=4)
    from corral.runtime.loop.admission import Admission

    admission = Admission(loop.config, loop.store)
    user = loop.config.users[0]
    with pytest.raises(Refused, match="gives CPU-only jobs 4"):
        admission.check(JobSpec(command=["true"], gpus=0, cpus=5), user)
    with pytest.raises(Refused, match="gives jobs 8192 MiB"):
        admission.check(JobSpec(command=["true"], gpus=0, memory="9G"), user)
    ray = loop.config.model_copy(update={"executor": "ray"})
    with pytest.raises(Refused, match="local executor"):
        Admission(ray, loop.store).check(JobSpec(command=["true"], gpus=0), user)
    loop.close()


def test_a_cpu_only_job_requeued_while_its_process_leaves_is_not_started_under_it() -> None:
    """Found by the fault schedules (tiresias-las, seed 107, shrunk to these three
    operations): a running CPU-only job requeued (scontrol requeue) was placed again
    at once, its row STARTING while its old process was still leaving; that process
    then ended by itself (SUCCEEDED), a change the life cycle forbids from STARTING.
    A job placed again keeps its row's state until its old process has left, as a
    GPU job placed again does."""
    from corral.testing.fault_schedules import Op, play

    ops = [
        Op(33.64, "clock_jump", (5.0,)),
        Op(
            34.98,
            "submit",
            ("alice", {"command": ["train", "200", "50"], "gpus": 0, "cpus": 1, "max_retries": 1}),
        ),
        Op(42.45, "requeue_running", (220, 0.5)),
    ]
    result = play("tiresias-las", ops)
    assert result.violation is None, result.violation
