"""HiveD live: a VC's idle cells run other VCs' jobs opportunistically, and an
owner's guaranteed job evicts them at once; the service restarting (as after
``kill -9``) keeps the cells' bindings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.harness import PY, Harness, auth, wait_for


@pytest.fixture
def hived(tmp_path: Path) -> Any:
    h = Harness(
        tmp_path / "state", policy="hived", policy_options={}, vcs={"research": 2, "prod": 2}
    )
    yield h
    h.close()


def sleeper(vc: str, name: str, seconds: float = 120) -> dict[str, Any]:
    return {
        "name": name,
        "command": [PY, "-c", f"import time; time.sleep({seconds})"],
        "gpus": 1,
        "vc": vc,
    }


def test_an_owner_evicts_opportunistic_jobs_from_its_cell(hived: Harness) -> None:
    research = [hived.submit(**sleeper("research", f"r{k}"))["id"] for k in range(4)]
    # research's cell is a 2-GPU node; prod's idle node runs its other two jobs
    for job in research:
        hived.wait_state(job, {"RUNNING"}, timeout=30)
    before = {j: set(hived.job(j)["assigned_gpus"]) for j in research}
    # the two on prod's node say how they run
    wait_for(
        lambda: (
            sorted(str(hived.job(j)["reason"]) for j in research)
            == ["None", "None", "Opportunistic", "Opportunistic"]
        ),
        10,
        "two research jobs to show as opportunistic",
    )
    extra = hived.submit(**sleeper("research", "r-extra"))["id"]
    wait_for(
        lambda: hived.job(extra)["reason"] == "QuotaExceeded",
        20,
        "the fifth research job to wait, over its VC's cells and with nothing idle",
    )
    owner = hived.submit(**sleeper("prod", "p0"))["id"]
    hived.wait_state(owner, {"RUNNING"}, timeout=30)
    jobs = {j: hived.job(j) for j in research}
    evicted = [j for j, row in jobs.items() if row["preemptions"] == 1]
    assert len(evicted) == 1, jobs
    assert sum(row["status"] == "RUNNING" for row in jobs.values()) == 3
    # prod's job took the evicted job's GPU
    assert before[evicted[0]] <= set(hived.job(owner)["assigned_gpus"])
    # the service restarts: the cells are rebuilt from what runs, and prod's
    # second job evicts the other opportunistic research job, not a guaranteed one
    hived.restart()
    second = hived.submit(**sleeper("prod", "p1"))["id"]
    hived.wait_state(second, {"RUNNING"}, timeout=30)
    jobs = {j: hived.job(j) for j in research}
    assert sum(row["preemptions"] for row in jobs.values()) == 2, jobs
    assert hived.job(owner)["status"] == "RUNNING"
    queue = hived.client.get("/v1/jobs", headers=auth("root")).json()
    reasons = {j["id"]: j["reason"] for j in queue if j["status"] == "PENDING"}
    assert reasons[extra] == "QuotaExceeded"
    for job in [*research, extra, owner, second]:
        hived.client.post(f"/v1/jobs/{job}/cancel", headers=auth("root"))


def test_a_higher_priority_job_preempts_its_own_vcs_lower_ones(hived: Harness) -> None:
    """HiveD's priorities inside a VC, live: prod's two low-priority jobs fill
    its cell; a normal-priority 2-GPU prod job stops both and takes the cell,
    and the two go on opportunistically on research's idle cell."""
    low = [hived.submit(**sleeper("prod", f"low{k}"), priority=-1)["id"] for k in range(2)]
    for job in low:
        hived.wait_state(job, {"RUNNING"}, timeout=30)
    cell = {g for job in low for g in hived.job(job)["assigned_gpus"]}
    high = hived.submit(**(sleeper("prod", "high") | {"gpus": 2}))["id"]
    hived.wait_state(high, {"RUNNING"}, timeout=30)
    assert set(hived.job(high)["assigned_gpus"]) == cell
    wait_for(
        lambda: all(
            hived.job(j)["preemptions"] == 1 and hived.job(j)["status"] == "RUNNING" for j in low
        ),
        30,
        "both low-priority jobs to be preempted once and run again",
    )
    assert all(not set(hived.job(j)["assigned_gpus"]) & cell for j in low)
    assert sorted(str(hived.job(j)["reason"]) for j in low) == ["Opportunistic"] * 2
    for job in [*low, high]:
        hived.client.post(f"/v1/jobs/{job}/cancel", headers=auth("root"))


def test_a_drained_nodes_cell_is_doomed_and_its_vcs_jobs_go_opportunistic(
    hived: Harness,
) -> None:
    """HiveD's doomed cells, live: draining prod's node leaves no healthy node
    for prod's cell. The loss is decided at once: prod's job runs on research's
    idle node opportunistically (rather than waiting for a cell that cannot be
    bound), research's own job evicts it, it waits as CellsUnavailable, and it
    runs in its own cell again once the node is back."""
    nodes = hived.client.get("/v1/nodes", headers=auth("root")).json()
    v100 = next(n["name"] for n in nodes if n["gpu_type"] == "V100")
    gpus = {n["name"]: set(n["gpu_ids"]) for n in nodes}
    k80 = next(n["name"] for n in nodes if n["gpu_type"] == "K80")
    response = hived.client.post(f"/v1/nodes/{v100}/drain", headers=auth("root"))
    assert response.status_code == 200, response.text
    prod = hived.submit(**(sleeper("prod", "p0") | {"gpus": 2}))["id"]
    hived.wait_state(prod, {"RUNNING"}, timeout=30)
    assert hived.job(prod)["reason"] == "Opportunistic"
    assert set(hived.job(prod)["assigned_gpus"]) == gpus[k80]
    research = hived.submit(**(sleeper("research", "r0") | {"gpus": 2}))["id"]
    hived.wait_state(research, {"RUNNING"}, timeout=30)
    wait_for(
        lambda: hived.job(prod)["reason"] == "CellsUnavailable",
        20,
        "prod's job to be evicted and wait for its doomed cell",
    )
    assert hived.job(prod)["preemptions"] == 1
    response = hived.client.post(f"/v1/nodes/{v100}/resume", headers=auth("root"))
    assert response.status_code == 200, response.text
    hived.wait_state(prod, {"RUNNING"}, timeout=30)
    wait_for(lambda: hived.job(prod)["reason"] is None, 10, "prod's job to run guaranteed")
    assert set(hived.job(prod)["assigned_gpus"]) == gpus[v100]
    for job in [prod, research]:
        hived.client.post(f"/v1/jobs/{job}/cancel", headers=auth("root"))
