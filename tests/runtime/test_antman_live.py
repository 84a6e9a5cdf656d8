"""AntMan live: jobs beyond their VC's quota run opportunistically at the lowest
OS priority with a GPU memory cap in their environment; an owner's job shares
an opportunistic job's GPU where memory allows and evicts it where it does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.harness import PY, Harness, auth, wait_for

BIG = "ResNet-50 (batch size 128)"  # two do not fit on one GPU (Gavel measured it)


@pytest.fixture
def antman(tmp_path: Path) -> Any:
    h = Harness(
        tmp_path / "state", policy="antman", policy_options={}, vcs={"research": 2, "prod": 2}
    )
    yield h
    h.close()


def job(vc: str, name: str, out: Path, job_type: str | None = None) -> dict[str, Any]:
    """A sleeper that first writes its niceness and memory cap to ``out/name``
    (by rename, so a reader never finds it empty)."""
    script = (
        "import os, time; "
        f"open({str(out / name)!r} + '.tmp', 'w').write("
        "f\"{os.nice(0)} {os.environ.get('CORRAL_GPU_MEMORY_FRACTION')}\"); "
        f"os.replace({str(out / name)!r} + '.tmp', {str(out / name)!r}); "
        "time.sleep(120)"
    )
    spec: dict[str, Any] = {"name": name, "command": [PY, "-c", script], "gpus": 1, "vc": vc}
    if job_type:
        spec["job_type"] = job_type
    return spec


def test_opportunistic_jobs_run_low_and_owners_share_or_evict(
    antman: Harness, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    research = [antman.submit(**job("research", f"r{k}", out, BIG))["id"] for k in range(4)]
    for j in research:
        antman.wait_state(j, {"RUNNING"}, timeout=30)
    wait_for(
        lambda: len(list(out.glob("r[0-9]"))) == 4, 20, "the four jobs to write their settings"
    )
    settings = sorted((out / f"r{k}").read_text() for k in range(4))
    # two within research's quota run normally; two beyond it run opportunistically
    assert settings == ["0 None", "0 None", "19 0.5", "19 0.5"], settings
    low = [j for k, j in enumerate(research) if (out / f"r{k}").read_text().startswith("19")]
    # prod's job of the same model cannot share a GPU with one (out of memory):
    # an opportunistic job is evicted for it
    p0 = antman.submit(**job("prod", "p0", out, BIG))["id"]
    antman.wait_state(p0, {"RUNNING"}, timeout=30)
    rows = {j: antman.job(j) for j in research}
    assert [rows[j]["preemptions"] for j in research if j not in low] == [0, 0]
    assert sum(rows[j]["preemptions"] for j in low) == 1
    # prod's next job (no model named: assumed to fit) shares the GPU of the
    # other opportunistic job instead, which keeps running
    running_low = [j for j in low if rows[j]["status"] == "RUNNING"]
    assert len(running_low) == 1
    before = set(rows[running_low[0]]["assigned_gpus"])
    p1 = antman.submit(**job("prod", "p1", out))["id"]
    antman.wait_state(p1, {"RUNNING"}, timeout=30)
    assert set(antman.job(p1)["assigned_gpus"]) == before
    wait_for(lambda: antman.job(p1)["reason"] == "Shared", 10, "prod's job to show as shared")
    assert antman.job(running_low[0])["reason"] == "Opportunistic"
    assert antman.job(running_low[0])["status"] == "RUNNING"
    assert any(e.job_id == p1 for e in antman.events("packed"))
    queue = antman.client.get("/v1/jobs", headers=auth("root")).json()
    reasons = {j["id"]: j["reason"] for j in queue if j["status"] == "PENDING"}
    assert set(reasons.values()) <= {"QuotaExceeded"}, reasons
    for j in [*research, p0, p1]:
        antman.client.post(f"/v1/jobs/{j}/cancel", headers=auth("root"))


def test_a_smaller_opportunistic_job_shares_part_of_a_wider_jobs_gpus(tmp_path: Path) -> None:
    """Live, gang sizes need not match: research's two 2-GPU jobs fill the four
    GPUs within its quota; prod's 1-GPU job (no quota) shares one GPU of one of
    them, at the lowest priority; when that job ends, prod's keeps its GPU and
    the other is free again."""
    h = Harness(
        tmp_path / "state", policy="antman", policy_options={}, vcs={"research": 4, "prod": 0}
    )
    out = tmp_path / "out"
    out.mkdir()
    try:
        wide = [h.submit(**(job("research", f"r{k}", out) | {"gpus": 2}))["id"] for k in range(2)]
        for j in wide:
            h.wait_state(j, {"RUNNING"}, timeout=30)
        small = h.submit(**job("prod", "p0", out))["id"]
        h.wait_state(small, {"RUNNING"}, timeout=30)
        gpus = set(h.job(small)["assigned_gpus"])
        host = next(j for j in wide if gpus < set(h.job(j)["assigned_gpus"]))
        assert len(gpus) == 1 and h.job(small)["reason"] == "Opportunistic"
        wait_for(lambda: (out / "p0").exists(), 20, "the guest to write its priority")
        assert (out / "p0").read_text().split()[0] == "19"
        h.client.post(f"/v1/jobs/{host}/cancel", headers=auth("root"))
        h.wait_state(host, {"CANCELLED"}, timeout=30)
        assert h.job(small)["status"] == "RUNNING" and set(h.job(small)["assigned_gpus"]) == gpus
        nodes = h.client.get("/v1/nodes", headers=auth("root")).json()
        assert sum(n["gpus_in_use"] for n in nodes) == 3  # the other 2-GPU job, and the guest
        for j in [*wide, small]:
            h.client.post(f"/v1/jobs/{j}/cancel", headers=auth("root"))
    finally:
        h.close()
