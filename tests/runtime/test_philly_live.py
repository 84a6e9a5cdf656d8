"""Philly's scheduler live: jobs name a virtual cluster, the config gives
quotas, idle GPUs are lent to a VC over its quota and reclaimed by preemption
when their owner needs them; ``corral queue`` reasons say which."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.harness import PY, Harness, auth, wait_for


@pytest.fixture
def philly(tmp_path: Path) -> Any:
    h = Harness(
        tmp_path / "state",
        policy="philly",
        policy_options={"backoff": 0.5, "backoff_max": 1.0},
        vcs={"research": 2, "prod": 2},
    )
    yield h
    h.close()


def sleeper(vc: str, seconds: float, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "command": [PY, "-c", f"import time; time.sleep({seconds})"],
        "gpus": 1,
        "vc": vc,
    }


def test_lending_and_reclaiming_between_two_vcs(philly: Harness) -> None:
    research = [philly.submit(**sleeper("research", 60, f"r{k}"))["id"] for k in range(4)]
    # research's quota is 2 GPUs; prod is idle, so its 2 are lent to research
    for job in research:
        philly.wait_state(job, {"RUNNING"}, timeout=30)
    extra = philly.submit(**sleeper("research", 60, "r-extra"))["id"]
    wait_for(
        lambda: philly.job(extra)["reason"] == "QuotaExceeded",
        20,
        "the fifth research job to wait for being over quota",
    )
    # prod asks for its quota back: one borrowed research job is preempted
    owner = philly.submit(**sleeper("prod", 60, "p0"))["id"]
    philly.wait_state(owner, {"RUNNING"}, timeout=30)
    jobs = [philly.job(j) for j in research]
    assert sum(j["preemptions"] for j in jobs) == 1
    assert sum(j["status"] == "RUNNING" for j in jobs) == 3
    assert philly.job(extra)["status"] == "PENDING"
    queue = philly.client.get("/v1/jobs", headers=auth("root")).json()
    reasons = {j["id"]: j["reason"] for j in queue if j["status"] == "PENDING"}
    assert reasons[extra] == "QuotaExceeded"
    for job in [*research, extra, owner]:
        philly.client.post(f"/v1/jobs/{job}/cancel", headers=auth("root"))


def test_unknown_vc_is_refused_at_submit(philly: Harness) -> None:
    response = philly.client.post("/v1/jobs", json=sleeper("nope", 1, "x"), headers=auth("alice"))
    assert response.status_code == 422
    assert "vc" in response.text and "research" in response.text
