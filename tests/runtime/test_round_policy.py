"""The live round planner looks where the simulator's looks, with round keepers a task
goes where its job is held, all else equal, and the loop runs jobs given as tasks
as rounds (in virtual time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.policies.rounds.planners import ROUND_PLANNERS
from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.jobspec.specs import RoundOf
from corral.runtime.loop.live_state import LiveJobs
from corral.runtime.loop.round_policy import KEEPER_AFFINITY, LiveRounds
from corral.runtime.storage.store import JobRow
from corral.testing.virtual import virtual_scheduler
from tests.conftest import uniform
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop


def plan_second_round(switch_s: float) -> list[tuple[int, ...]]:
    """Job 7 ran round 0 on GPU 2; its round-1 task is planned on 4 idle GPUs."""
    live = LiveJobs(uniform(1, 4))
    i = live.add(100, submit=0.0, gpus=1, duration=10.0)
    live.arrive(i, 5.0)
    policy = LiveRounds.named("hare")
    policy.round_of = lambda row: (
        RoundOf(job=7, round=1, part=0, parts=1, rounds=3) if row == i else None
    )
    policy.last_on = {2: 7, 0: 8}
    last_round = RoundOf(job=7, round=0, part=0, parts=1, rounds=3)
    policy.round_gpus = {7: (last_round, [2])}  # as the simulator's view: its last round's GPUs
    policy.switch_s = switch_s
    plan = policy.schedule(live.state)
    return list(plan.starts.values())


def test_a_task_goes_to_the_gpu_that_holds_its_job_when_all_else_is_equal() -> None:
    assert plan_second_round(KEEPER_AFFINITY) == [(2,)]
    assert plan_second_round(0.0) == [(0,)]  # without keepers: the lowest GPU id


def test_the_gpus_a_job_started_on_are_forgotten_once_it_has_ended() -> None:
    policy = LiveRounds.named("hare")
    policy._started(RoundOf(job=7, round=0, part=0, parts=1, rounds=2), 2)
    policy._started(RoundOf(job=7, round=1, part=0, parts=1, rounds=2), 3)
    assert {job: (ref.round, gpus) for job, (ref, gpus) in policy.round_gpus.items()} == {
        7: (1, [3])
    }
    policy._forget_ended({7})  # its last task still runs
    assert 7 in policy.round_gpus
    policy._forget_ended(set())
    assert policy.round_gpus == {}


JOBS: list[tuple[int, str | None]] = [(2, None), (3, None), (1, None), (2, "K80"), (3, None)]
"""(tasks per round, GPU type it is bound to), as ``tests/e2e/test_rounds_live.py``."""
V100 = {0, 1}
"""The loop's GPUs are numbered type by type: V100 0-1, K80 2-3."""
ROUND_STEPS = 6


def queue_task_jobs(
    loop: VirtualLoop, jobs: list[tuple[int, str | None]], rounds: int
) -> list[int]:
    """Jobs given as tasks, run as rounds (their tasks are virtual processes)."""
    ids = []
    for k, (tasks, gpu_type) in enumerate(jobs):
        task = {
            "factory": "corral.examples.tasks:digits",
            "steps": ROUND_STEPS * rounds,
            "round_steps": ROUND_STEPS,
            "kwargs": {"seed": k},
        }
        extra = {"gpu_type": gpu_type} if gpu_type else {}
        ids.append(loop.queue(name=f"r{k}", command=None, gpus=tasks, task=task, **extra))
    return ids


def task_rows(loop: VirtualLoop, parents: list[int]) -> list[tuple[str, str, list[int]]]:
    """Every task job the rounds made: its name, status and its attempts' GPUs."""
    with loop.store.session() as s:
        rows = [r for r in s.query(JobRow).order_by(JobRow.id) if r.id not in parents]
        found = [(r.name, r.status, r.id) for r in rows]
    return [
        (name, status, [g for a in loop.attempts(i) for g in a.gpus]) for name, status, i in found
    ]


@pytest.mark.parametrize("name", list(ROUND_PLANNERS))
def test_round_planners_run_jobs_given_as_tasks_in_rounds(name: str, tmp_path: Path) -> None:
    """The loop's side of ``tests/e2e/test_rounds_live.py`` (which runs the tasks for
    real and checks their results), in virtual time: every job ends, each round's
    tasks run once, a job bound to a type stays on it, and the planners spread a
    round as their papers do (Hare across GPU types; AlloX's on one type unless the
    round is wider than each)."""
    loop = virtual_loop(
        tmp_path, name, gpus=[GpuGroup(type="V100", count=2), GpuGroup(type="K80", count=2)]
    )
    try:
        rounds_each = 2
        ids = queue_task_jobs(loop, JOBS, rounds_each)
        loop.run(300)
        assert [loop.row(j).status for j in ids] == ["SUCCEEDED"] * len(JOBS)
        tasks = task_rows(loop, ids)
        expected = [
            f"r{k}.r{r}.{p}"
            for k, (n, _) in enumerate(JOBS)
            for r in range(rounds_each)
            for p in range(n)
        ]
        assert sorted(t for t, _, _ in tasks) == sorted(expected)
        assert all(status == "SUCCEEDED" for _, status, _ in tasks), tasks
        on_v100: dict[tuple[str, str], set[bool]] = {}
        for task, _, gpus in tasks:
            (gpu,) = gpus  # one attempt, one GPU
            job, round_name, _ = task.split(".")
            on_v100.setdefault((job, round_name), set()).add(gpu in V100)
            if job == "r3":  # bound to K80
                assert gpu not in V100, task
        mixed = {job for (job, _), on in on_v100.items() if len(on) == 2}
        wide = {f"r{k}" for k, (n, _) in enumerate(JOBS) if n > 2}
        if name == "hare":  # intra-job parallelism across types
            assert mixed, on_v100
        elif name == "sched-allox":  # a round runs on one type, unless wider than each
            assert mixed and mixed <= wide, on_v100
    finally:
        loop.close()


def test_a_job_run_as_rounds_carries_on_after_the_service_is_killed(tmp_path: Path) -> None:
    """``kill -9`` of the service mid-job (the loop dropped and rebuilt from the store,
    its tasks' processes running on): every task of every round runs exactly once.
    (With keepers, and the results checked, in ``tests/e2e/test_rounds_live.py``.)"""
    loop = virtual_loop(
        tmp_path, "hare", gpus=[GpuGroup(type="V100", count=2), GpuGroup(type="K80", count=2)]
    )
    try:
        (job,) = queue_task_jobs(loop, [(2, None)], rounds=4)
        for _ in range(200):
            loop.run(0.5)
            if any(t.startswith("r0.r1.") for t, _, _ in task_rows(loop, [job])):
                break
        running = len(loop.executor.running())
        assert running  # its second round's tasks run while the service is gone
        loop.scheduler = virtual_scheduler(loop.config, loop.store, loop.clock, loop.executor)
        loop.run(200)
        assert loop.row(job).status == "SUCCEEDED"
        names = [t for t, _, _ in task_rows(loop, [job])]
        assert sorted(names) == sorted(f"r0.r{r}.{p}" for r in range(4) for p in range(2))
        assert len(loop.executor.launches) == len(names)  # none started twice
    finally:
        loop.close()
