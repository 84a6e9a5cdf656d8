"""Per-user and per-VC limits and fair share, around every policy, in virtual time.

The reported case: one user's ten 4-GPU jobs kept another user's 1-GPU job
waiting under fifo, las, tiresias-las, themis and gavel-max-min-fairness.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corral.runtime.jobspec.config import FairShareConfig, GpuGroup, LimitsConfig, UserConfig
from corral.runtime.loop.user_limits import decayed_use, fair_share_factors
from corral.runtime.storage.store import JobRow, Store
from corral.testing.virtual import VirtualClock, run_for, virtual_scheduler
from tests.runtime.harness import TOKENS, make_config
from tests.runtime.virtual_loop import queue

POLICIES = ["fifo", "las", "tiresias-las", "themis", "gavel-max-min-fairness"]


def shared(tmp_path: Path, policy: str, **overrides: Any) -> tuple[Any, Store, VirtualClock]:
    options = {"round": 2.0} if policy.startswith("gavel") else {}  # a pass every 2 s
    config = make_config(
        tmp_path,
        policy=policy,
        policy_options=options,
        gpus=[GpuGroup(type="V100", count=8)],
        **overrides,
    )
    return config, Store(config.store_url), VirtualClock()


def row(store: Store, job: int) -> JobRow:
    with store.session() as s:
        found = s.get(JobRow, job)
        assert found is not None
        return found


@pytest.mark.parametrize("policy", POLICIES)
def test_a_per_user_gpu_cap_lets_the_other_user_start_at_once(tmp_path: Path, policy: str) -> None:
    config, store, clock = shared(tmp_path, policy, limits=LimitsConfig(user_gpus=4))
    scheduler = virtual_scheduler(config, store, clock)
    big = [queue(store, "alice", clock, command=["sleep", "300"], gpus=4) for _ in range(10)]
    run_for(scheduler, clock, 3)
    small = queue(store, "bob", clock, command=["sleep", "5"], gpus=1)
    run_for(scheduler, clock, 3)
    assert row(store, small).first_start is not None, (policy, row(store, small).reason)
    held = sum(4 for j in big if row(store, j).status == "RUNNING")
    assert held <= 4
    waiting = [row(store, j) for j in big if row(store, j).status == "PENDING"]
    assert waiting and all(r.reason == "QOSMaxGRESPerUser" for r in waiting), [
        r.reason for r in waiting
    ]
    run_for(scheduler, clock, 10)
    assert row(store, small).status == "SUCCEEDED"
    assert scheduler.errors == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_without_a_cap_the_reported_case_keeps_the_small_job_waiting(
    tmp_path: Path, policy: str
) -> None:
    """What the caps are for (and a check that the test above can fail)."""
    config, store, clock = shared(tmp_path, policy)
    scheduler = virtual_scheduler(config, store, clock)
    for _ in range(10):
        queue(store, "alice", clock, command=["sleep", "300"], gpus=4)
    run_for(scheduler, clock, 3)
    small = queue(store, "bob", clock, command=["sleep", "5"], gpus=1)
    run_for(scheduler, clock, 3)
    if policy in ("fifo", "tiresias-las", "las"):
        assert row(store, small).first_start is None
    # (themis and gavel's max-min fairness may start it by their own fairness)


def test_running_job_and_vc_caps(tmp_path: Path) -> None:
    users = [
        UserConfig(name="alice", token=TOKENS["alice"], max_running=1),
        UserConfig(name="bob", token=TOKENS["bob"]),
        UserConfig(name="root", token=TOKENS["root"], admin=True),
    ]
    limits = LimitsConfig(vc_gpus={"research": 2}, vc_running={"prod": 1})
    config, store, clock = shared(tmp_path, "fifo", users=users, limits=limits)
    scheduler = virtual_scheduler(config, store, clock)
    a = [queue(store, "alice", clock, command=["sleep", "50"]) for _ in range(2)]
    r = [queue(store, "bob", clock, command=["sleep", "50"], vc="research") for _ in range(3)]
    p = [queue(store, "bob", clock, command=["sleep", "50"], vc="prod") for _ in range(2)]
    run_for(scheduler, clock, 3)
    assert [row(store, j).status for j in a] == ["RUNNING", "PENDING"]
    assert row(store, a[1]).reason == "QOSMaxJobsPerUserLimit"
    assert [row(store, j).status for j in r] == ["RUNNING", "RUNNING", "PENDING"]
    assert row(store, r[2]).reason == "AssocGrpGRES"
    assert [row(store, j).status for j in p] == ["RUNNING", "PENDING"]
    assert row(store, p[1]).reason == "AssocGrpJobsLimit"


@pytest.mark.parametrize("fair", [True, False])
def test_fair_share_puts_the_user_with_less_recent_use_first(tmp_path: Path, fair: bool) -> None:
    """Alice's two 4-GPU jobs hold the 8 GPUs, two more wait; bob's 1-GPU job arrives
    after. When GPUs free, with fair share bob goes first among the waiting jobs;
    without it, FIFO starts alice's two and bob waits."""
    share = FairShareConfig(enabled=fair, half_life=3600, refresh=1)
    config, store, clock = shared(tmp_path, "fifo", fair_share=share)
    scheduler = virtual_scheduler(config, store, clock)
    alice = [queue(store, "alice", clock, command=["sleep", "20"], gpus=4) for _ in range(4)]
    run_for(scheduler, clock, 5)
    bob = queue(store, "bob", clock, command=["sleep", "5"], gpus=1)
    run_for(scheduler, clock, 20)
    started_bob = row(store, bob).first_start
    third = row(store, alice[2]).first_start
    assert third is not None
    if fair:
        assert started_bob is not None and started_bob <= third
        assert scheduler.share_bonus["bob"] > scheduler.share_bonus["alice"]
    else:
        assert started_bob is None or started_bob > third


def test_fair_share_factor_and_decay() -> None:
    assert fair_share_factors({}, {"a": 1, "b": 1}) == {"a": 1.0, "b": 1.0}
    f = fair_share_factors({"a": 30.0, "b": 10.0}, {"a": 1, "b": 1})
    assert f["a"] == pytest.approx(2**-1.5) and f["b"] == pytest.approx(2**-0.5)
    f = fair_share_factors({"a": 30.0, "b": 10.0}, {"a": 3, "b": 1})  # use equal to shares
    assert f["a"] == pytest.approx(f["b"]) == pytest.approx(0.5)
    # one GPU-hour an hour ago counts half of one just used
    now, h = 10_000.0, 3600.0
    old, new = decayed_use(
        np.array([now - 2 * h, now - h]), np.array([now - h, now]), np.ones(2), now, h
    )
    assert old == pytest.approx(new / 2)
    assert new == pytest.approx(h / np.log(2) * 0.5)


def test_an_elastic_policy_giving_a_job_more_gpus_than_its_users_cap_is_trimmed_to_it(
    tmp_path: Path,
) -> None:
    """Pollux grows a lone job to the whole cluster; a cap of 6 GPUs holds it to 6
    (it used to start on all 8), and the job still starts and ends."""
    config, store, clock = shared(tmp_path, "pollux", limits=LimitsConfig(user_gpus=6))
    scheduler = virtual_scheduler(config, store, clock)
    job = queue(store, "alice", clock, command=["sleep", "5"], gpus=2)
    run_for(scheduler, clock, 3)
    started = row(store, job)
    assert started.status == "RUNNING" and 2 <= len(started.gpus or []) <= 6, started.gpus
    run_for(scheduler, clock, 20)
    assert row(store, job).status == "SUCCEEDED"
