"""Acting on many jobs in one request (scancel -u, scancel ARRAYID, scontrol hold on
a list): what is selected, what a user may touch, and what is reported skipped.
The app runs without a loop here, so each job asked keeps the request recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.api.app import create_app
from corral.cli.service import job_selection
from corral.errors import CorralError
from corral.runtime.storage.store import JobRow, Store
from tests.runtime.harness import PY, auth, make_config


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, Store]]:
    config = make_config(tmp_path / "state", vcs={"lab": 4, "prod": 4})
    store = Store(config.store_url)
    yield TestClient(create_app(config, store)), store
    store.dispose()


def submit(client: TestClient, user: str, **extra: Any) -> dict[str, Any]:
    spec = {"command": [PY, "-c", "pass"], "gpus": 1, **extra}
    answer = client.post("/v1/jobs", json=spec, headers=auth(user))
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def act(client: TestClient, caller: str, verb: str, **selection: Any) -> Any:
    return client.post(f"/v1/jobs/actions/{verb}", json=selection, headers=auth(caller))


def requests(store: Store) -> dict[int, str | None]:
    with store.session() as s:
        return {r.id: r.request for r in s.query(JobRow).order_by(JobRow.id)}


def test_an_arrays_id_names_all_its_tasks_and_single_tasks_can_be_named(
    api: tuple[TestClient, Store],
) -> None:
    client, store = api
    array = submit(client, "alice", array="0-4")["array_tasks"]
    other = submit(client, "alice")["id"]
    answer = act(client, "alice", "cancel", ids=[array[0]])
    assert answer.status_code == 200, answer.text
    assert answer.json()["done"] == array and answer.json()["skipped"] == {}
    assert requests(store)[other] is None
    second = submit(client, "alice", array="0-9")["array_tasks"]
    answer = act(client, "alice", "hold", tasks=[[second[0], 2], [second[0], 3], [second[0], 99]])
    assert answer.json()["done"] == second[2:4]


def test_a_user_acts_on_their_own_jobs_and_is_told_about_others(
    api: tuple[TestClient, Store],
) -> None:
    client, store = api
    mine = [submit(client, "alice")["id"] for _ in range(3)]
    bobs = submit(client, "bob")["id"]
    answer = act(client, "alice", "cancel", ids=[*mine, bobs, 999]).json()
    assert answer["done"] == mine
    assert answer["skipped"] == {str(bobs): "belongs to bob", "999": "no such job"}
    assert requests(store)[bobs] is None
    assert act(client, "alice", "cancel", user="bob").status_code == 403
    assert act(client, "root", "cancel", user="bob").json()["done"] == [bobs]


def test_filters_by_state_name_and_vc_and_an_empty_selection_is_refused(
    api: tuple[TestClient, Store],
) -> None:
    client, store = api
    lab = [submit(client, "alice", vc="lab", name="sweep")["id"] for _ in range(2)]
    prod = submit(client, "alice", vc="prod", name="sweep")["id"]
    other = submit(client, "alice", vc="lab", name="eval")["id"]
    assert act(client, "alice", "hold", vc="lab", name="sweep").json()["done"] == lab
    assert [requests(store)[job] for job in lab] == ["hold", "hold"]
    with store.session() as s:  # as the loop would, once it held them: still PENDING
        for job in lab:
            row = s.get(JobRow, job)
            assert row is not None
            row.held, row.reason, row.request = "user", "JobHeldUser", None
    released = act(client, "alice", "release", user="alice", states="PD").json()
    assert released["done"] == lab
    assert released["skipped"] == {str(prod): "not held", str(other): "not held"}
    skipped = act(client, "alice", "release", ids=[prod]).json()["skipped"]
    assert skipped == {str(prod): "not held"}
    # an admin's hold of another's job: JobHeldAdmin, which its owner cannot release
    assert act(client, "root", "hold", ids=[prod]).json()["done"] == [prod]
    assert requests(store)[prod] == "hold_admin"
    with store.session() as s:
        row = s.get(JobRow, prod)
        assert row is not None
        row.held, row.reason, row.request = "admin", "JobHeldAdmin", None
    assert act(client, "alice", "release", ids=[prod]).json()["skipped"] == {
        str(prod): "held by an admin"
    }
    assert act(client, "root", "release", ids=[prod]).json()["done"] == [prod]
    assert act(client, "alice", "cancel").status_code == 422  # never "every job"
    assert act(client, "alice", "cancel", states="NOPE").status_code == 422
    assert act(client, "alice", "explode", ids=[other]).status_code == 404
    assert requests(store)[other] is None


def test_the_command_lines_job_ids_read_as_scancels() -> None:
    assert job_selection(["12", "7_3", "9_[1-3,5]"]) == {
        "ids": [12],
        "tasks": [[7, 3], [9, 1], [9, 2], [9, 3], [9, 5]],
    }
    with pytest.raises(CorralError, match="not a job id"):
        job_selection(["12_x"])


def test_requeue_applies_to_running_jobs_only(api: tuple[TestClient, Store]) -> None:
    client, store = api
    waiting = submit(client, "alice")["id"]
    running = submit(client, "alice")["id"]
    with store.session() as s:  # as the loop would have started it
        row = s.get(JobRow, running)
        assert row is not None
        row.status = "RUNNING"
    answer = act(client, "alice", "requeue", ids=[waiting, running]).json()
    assert answer["done"] == [running]
    assert answer["skipped"] == {str(waiting): "PENDING; cannot requeue"}
    assert requests(store)[running] == "requeue"
