"""One user attacks, the other's jobs run: a scheduler with two users, one of whom
submits, in a random order, a record the loop cannot use, a job waiting for twenty
thousand others (most of them not there), a job whose staging
mark is a FIFO, an array with a job waiting for all of it, and jobs with the most
extreme values the API accepts; the service restarts once at a random moment.
Under fifo, tiresias-las, liquid, themis and gavel-max-min-fairness, over several
seeds, every job of the other user succeeds within a bound, and no pass fails.

In virtual time (corral.testing.virtual): each case takes a second or two.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.jobspec.specs import MAX_SECONDS, MAX_STEPS, MIN_WEIGHT, JobSpec
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import JobRow, Store
from corral.testing.virtual import VirtualClock, VirtualExecutor, run_for, virtual_scheduler
from tests.runtime.harness import make_config

POLICIES = ["fifo", "tiresias-las", "liquid", "themis", "gavel-max-min-fairness"]
BOUND = 900.0
"""Virtual seconds by which every job of the other user must have succeeded."""


def add(store: Store, user: str, clock: VirtualClock, spec: JobSpec) -> int:
    """A job stored as the API stores one (its spec through the validator)."""
    with store.session() as s:
        row = JobRow.queued(spec, user, spec.priority, "Submitted", submit_time=clock())
        s.add(row)
        s.flush()
        return row.id


def attacks(store: Store, clock: VirtualClock, job_root: Path) -> list[Callable[[], None]]:
    def poisoned() -> None:  # what an older release let in: the loop's check refuses it
        job = add(store, "alice", clock, JobSpec(command=["sleep", "5"]))
        with store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None
            row.spec = {**row.spec, "dependency": {"afterany": [0, -3]}}  # (ids are positive)

    def waits_for_thousands() -> None:  # valid, but naming thousands of jobs, most not there
        job = add(store, "alice", clock, JobSpec(command=["sleep", "5"]))
        with store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None
            row.spec = {**row.spec, "dependency": {"afterany": list(range(1, 20_000))}}

    def fifo_mark() -> None:  # its staging mark replaced by a FIFO before it is pre-staged
        job = add(store, "alice", clock, JobSpec(command=["sleep", "5"], stage=["true"]))
        folder = job_root / str(job)
        folder.mkdir(parents=True, exist_ok=True)
        os.mkfifo(folder / "staged.json")

    def array_and_after() -> None:
        first = None
        for index in range(101):
            spec = JobSpec(command=["true"], array_index=index, array_limit=None)
            job = add(store, "alice", clock, spec)
            first = first or job
        add(store, "alice", clock, JobSpec(command=["true"], dependency={"afterany": [first]}))

    def extremes() -> None:
        for spec in (
            JobSpec(command=["sleep", "30"], gpus=8, wall_time=MAX_SECONDS, weight=MIN_WEIGHT),
            JobSpec(command=["sleep", "30"], duration=1e-9, total_steps=MAX_STEPS, priority=-1000),
            JobSpec(command=["sleep", "30"], batch_size=10_000_000, model="bert", cpus=4096),
            JobSpec(command=["sleep", "30"], target_loss=1e-300, memory="1000T", exclusive=True),
            JobSpec(command=["false"], max_retries=100),
        ):
            add(store, "alice", clock, spec)

    return [poisoned, waits_for_thousands, fifo_mark, array_and_after, extremes]


@pytest.mark.parametrize("seed", [0, *(pytest.param(k, marks=pytest.mark.long) for k in (1, 2))])
@pytest.mark.parametrize("policy", POLICIES)
def test_one_users_attacks_never_keep_the_others_jobs_from_running(
    tmp_path: Path, policy: str, seed: int
) -> None:
    rng = random.Random(seed)
    options = {"round": 5.0} if policy.startswith("gavel") else {}
    config = make_config(
        tmp_path, policy=policy, policy_options=options, gpus=[GpuGroup(type="V100", count=8)]
    )
    store = Store(config.store_url)
    clock = VirtualClock()
    executor = VirtualExecutor(config, clock)
    scheduler: Scheduler = virtual_scheduler(config, store, clock, executor)
    steps = attacks(store, clock, config.job_root)
    rng.shuffle(steps)
    bobs: list[int] = []
    restart_at = rng.randrange(2, 12)
    for k in range(12):
        if steps and rng.random() < 0.5:
            steps.pop()()
        if rng.random() < 0.5:
            bobs.append(add(store, "bob", clock, JobSpec(command=["sleep", "5"])))
        if k == restart_at:
            scheduler = virtual_scheduler(config, store, clock, executor)
        run_for(scheduler, clock, rng.uniform(1, 10))
    for attack in steps:
        attack()
    bobs.append(add(store, "bob", clock, JobSpec(command=["sleep", "5"])))
    began = clock()
    while clock() - began < BOUND:
        run_for(scheduler, clock, 10)
        with store.session() as s:
            states = [s.get(JobRow, j).status for j in bobs]  # type: ignore[union-attr]
        if all(state == "SUCCEEDED" for state in states):
            break
    assert all(state == "SUCCEEDED" for state in states), (policy, seed, states)
    assert scheduler.errors == 0
    with store.session() as s:
        poisoned = s.query(JobRow).filter(JobRow.reason.like("InvalidRecord%")).all()
    assert len(poisoned) == 1  # set aside, saying why
