"""The live round planner looks where the simulator's looks, and with round keepers a task
goes where its job is held, all else equal."""

from __future__ import annotations

from corral.runtime.jobspec.specs import RoundOf
from corral.runtime.loop.live_state import LiveJobs
from corral.runtime.loop.round_policy import KEEPER_AFFINITY, LiveRounds
from tests.conftest import uniform


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
