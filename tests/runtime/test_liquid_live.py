"""Liquid live: small one-GPU jobs share GPUs two by two when none is free."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.harness import PY, Harness, auth, wait_for


@pytest.fixture
def liquid(tmp_path: Path) -> Any:
    # no finished jobs yet: every job's run time is the stand-in estimate, so
    # a generous 'small' makes every one-GPU job a dev/test job here
    h = Harness(tmp_path / "state", policy="liquid", policy_options={"small": 1e9})
    yield h
    h.close()


def test_small_jobs_share_gpus_when_none_is_free(liquid: Harness) -> None:
    spec = {"command": [PY, "-c", "import time; time.sleep(60)"], "gpus": 1}
    jobs = [liquid.submit(name=f"s{k}", **spec)["id"] for k in range(6)]
    wait_for(
        lambda: all(liquid.job(j)["status"] == "RUNNING" for j in jobs),
        30,
        "all six jobs to run on four GPUs",
    )
    rows = [liquid.job(j) for j in jobs]
    assert sum(r["preemptions"] for r in rows) == 0
    wait_for(
        lambda: sum(liquid.job(j)["reason"] == "Shared" for j in jobs) == 4,
        10,
        "two pairs of jobs to show as sharing",
    )
    gpus = [g for r in rows for g in r["assigned_gpus"]]
    assert sorted(set(gpus)) == [0, 1, 2, 3] and len(gpus) == 6
    for j in jobs:
        liquid.client.post(f"/v1/jobs/{j}/cancel", headers=auth("root"))
