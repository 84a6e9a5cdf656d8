"""``GET /v1/usage``: jobs by state and reason, and per user and VC, over every live
job (what the dashboard's usage tables show), counted by the store."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import update

from corral.api.app import create_app
from corral.runtime.storage.store import JobRow, Store
from tests.runtime.harness import auth, make_config


def test_usage_counts_every_live_job_by_state_reason_user_and_vc(tmp_path: Path) -> None:
    config = make_config(tmp_path / "state")
    store = Store(config.store_url)
    api = TestClient(create_app(config, store))
    ids = []
    for user, vc, n in (("alice", None, 3), ("bob", "lab", 2)):
        for _ in range(n):
            spec = {"command": ["true"], **({"vc": vc} if vc else {})}
            answer = api.post("/v1/jobs", json=spec, headers=auth(user))
            assert answer.status_code == 201, answer.text
            ids.append(answer.json()["id"])
    with store.session() as s:  # (no loop here: one runs on two GPUs, one has ended)
        s.execute(update(JobRow).where(JobRow.id == ids[0]).values(status="RUNNING", gpus=[0, 1]))
        s.execute(update(JobRow).where(JobRow.id == ids[1]).values(status="SUCCEEDED"))
        s.execute(update(JobRow).where(JobRow.id == ids[3]).values(reason="Dependency"))
    body = api.get("/v1/usage", headers=auth("alice")).json()
    assert body["by_state"]["RUNNING"] == 1 and body["by_state"]["PENDING"] == 3
    assert "SUCCEEDED" not in body["by_state"]  # live states only
    assert body["by_reason"]["Dependency"] == 1
    users = {row["user"]: row for row in body["by_user"]}
    assert users["alice"] == {"user": "alice", "running": 1, "waiting": 1, "gpus": 2}
    assert users["bob"] == {"user": "bob", "running": 0, "waiting": 2, "gpus": 0}
    vcs = {row["vc"]: row for row in body["by_vc"]}
    assert vcs["lab"]["waiting"] == 2 and vcs["default"]["gpus"] == 2
    assert api.get("/v1/usage").status_code == 401
    store.dispose()


def test_queue_positions_hold_across_pages(tmp_path: Path) -> None:
    """A page's jobs are ranked over the whole queue (highest priority, then oldest),
    not within the page."""
    config = make_config(tmp_path / "state")
    store = Store(config.store_url)
    api = TestClient(create_app(config, store))
    ids = [
        api.post("/v1/jobs", json={"command": ["true"]}, headers=auth("alice")).json()["id"]
        for _ in range(12)
    ]
    urgent = ids[7]
    with store.session() as s:
        s.execute(update(JobRow).where(JobRow.id == urgent).values(priority=5))
    seen: dict[int, int] = {}
    after = 0
    while True:
        answer = api.get(f"/v1/jobs?limit=5&after={after}", headers=auth("alice"))
        seen |= {job["id"]: job["position"] for job in answer.json()}
        if "X-Next-After" not in answer.headers:
            break
        after = int(answer.headers["X-Next-After"])
    assert seen[urgent] == 1
    others = [j for j in ids if j != urgent]
    assert [seen[j] for j in others] == list(range(2, 13))
    one = api.get(f"/v1/jobs/{ids[3]}", headers=auth("alice")).json()
    assert one["position"] == 5
    store.dispose()
