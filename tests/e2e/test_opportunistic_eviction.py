"""``corral serve`` with HiveD and AntMan: one VC's jobs fill the other VC's
idle GPUs opportunistically, and the owner's job evicts one at once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from corral.testing.service_process import ServiceProcess, wait_for

BIG = "ResNet-50 (batch size 128)"  # AntMan: two cannot share a GPU (out of memory)


def sleeper(vc: str, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "command": [sys.executable, "-c", "import time; time.sleep(120)"],
        "gpus": 1,
        "vc": vc,
        "job_type": BIG,
    }


@pytest.mark.parametrize("policy", ["hived", "antman"])
def test_the_owner_evicts_an_opportunistic_job(policy: str, tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path, policy, {}, vcs={"research": 2, "prod": 2})
    service.start()
    ids: list[int] = []
    try:
        client = service.client
        research = [client.submit(sleeper("research", f"r{k}"))["id"] for k in range(4)]
        ids += research

        def running(jobs: list[int]) -> bool:
            return all(client.job(j)["status"] == "RUNNING" for j in jobs)

        wait_for(lambda: running(research), 60, "research's jobs to fill all four GPUs")
        owner = client.submit(sleeper("prod", "p0"))["id"]
        ids.append(owner)
        wait_for(lambda: running([owner]), 60, "prod's job to start")
        rows = [client.job(j) for j in research]
        assert sum(r["preemptions"] for r in rows) == 1, rows
        assert sum(r["status"] == "RUNNING" for r in rows) == 3
    finally:
        for j in ids:
            service.admin.action(j, "cancel")
        service.close()
    log = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in log, log[-3000:]
