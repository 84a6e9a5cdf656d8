"""Listing jobs never leaves any out silently: pages with a cursor and a total."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from fastapi.testclient import TestClient

from corral.api import client as client_module
from corral.api.app import create_app
from corral.api.client import Answer, Client
from corral.api.http_wire import Headers
from corral.api.views import brief_table, brief_views, columns_of
from corral.runtime.storage.store import Store
from tests.runtime.harness import auth, make_config

JOBS = 25


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    config = make_config(tmp_path / "state")
    store = Store(config.store_url)
    test = TestClient(create_app(config, store))
    for k in range(JOBS):  # no scheduler: they stay pending
        answer = test.post(
            "/v1/jobs", json={"command": ["true"], "name": f"j{k}"}, headers=auth("alice")
        )
        assert answer.status_code == 201
    yield test
    store.dispose()


def test_the_api_pages_through_every_job_with_a_total(api: TestClient) -> None:
    seen: list[int] = []
    after = 0
    pages = 0
    while True:
        answer = api.get("/v1/jobs", params={"limit": 10, "after": after}, headers=auth("alice"))
        assert answer.status_code == 200
        assert answer.headers["X-Total-Count"] == str(JOBS)
        seen += [j["id"] for j in answer.json()]
        pages += 1
        cursor = answer.headers.get("X-Next-After")
        if cursor is None:
            break
        after = int(cursor)
    assert pages == 3 and seen == sorted(seen) and len(set(seen)) == JOBS
    one = api.get("/v1/jobs", params={"limit": 1000}, headers=auth("alice"))
    assert "X-Next-After" not in one.headers and len(one.json()) == JOBS


def test_the_client_lists_all_by_default_and_counts_what_it_leaves_out(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def call(self: Client, method: str, path: str, params: Any = None, json: Any = None) -> Any:
        got = api.request(method, path, params=params, json=json, headers=auth("alice"))
        headers = Headers()
        for key, value in got.headers.items():
            headers[key] = value
        return Answer(got.status_code, "", headers, got.content)

    monkeypatch.setattr(Client, "call", call)
    monkeypatch.setattr(client_module, "PAGE", 7)  # several pages for 25 jobs
    client = Client("http://127.0.0.1:9", "unused")
    everything, total = client.jobs_counted()
    assert total == JOBS and len(everything) == JOBS
    assert [j["id"] for j in everything] == sorted(j["id"] for j in everything)
    first, total = client.jobs_counted(limit=12)
    assert len(first) == 12 and total == JOBS
    assert first == everything[:12]


def test_a_batch_is_admitted_whole_or_not_at_all(api: TestClient) -> None:
    ok = api.post(
        "/v1/jobs/batch",
        json={"jobs": [{"command": ["true"], "name": f"b{k}"} for k in range(3)]},
        headers=auth("bob"),
    )
    assert ok.status_code == 201, ok.text
    made = ok.json()
    assert [j["name"] for j in made] == ["b0", "b1", "b2"]
    assert made[0]["id"] < made[1]["id"] < made[2]["id"]
    bad = api.post(
        "/v1/jobs/batch",
        json={"jobs": [{"command": ["true"]}, {"command": ["true"], "workdir": "/no/such/dir"}]},
        headers=auth("bob"),
    )
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "jobs", 1, "workdir"]
    typo = api.post(
        "/v1/jobs/batch", json={"jobs": [{"command": ["true"], "gpu": 1}]}, headers=auth("bob")
    )
    assert typo.status_code == 422 and "jobs" in str(typo.json()["detail"][0]["loc"])
    mine = api.get("/v1/jobs", params={"mine": True}, headers=auth("bob")).json()
    assert [j["name"] for j in mine] == ["b0", "b1", "b2"]  # nothing of the refused batches
    too_many = api.post(
        "/v1/jobs/batch", json={"jobs": [{"command": ["true"]}] * 1001}, headers=auth("bob")
    )
    assert too_many.status_code == 422


def test_newest_first_pages_backwards(api: TestClient) -> None:
    first = api.get("/v1/jobs", params={"limit": 10, "newest": True}, headers=auth("alice"))
    ids = [j["id"] for j in first.json()]
    assert ids == sorted(ids, reverse=True) and len(ids) == 10
    more = api.get(
        "/v1/jobs",
        params={"limit": 100, "newest": True, "before": first.headers["X-Next-Before"]},
        headers=auth("alice"),
    )
    rest = [j["id"] for j in more.json()]
    assert rest == sorted(rest, reverse=True) and len(ids + rest) == JOBS
    assert "X-Next-Before" not in more.headers and first.headers["X-Total-Count"] == str(JOBS)


def test_a_listing_returns_only_the_fields_asked_for(api: TestClient) -> None:
    wanted = "id,name,status,remaining"
    answer = api.get("/v1/jobs", params={"fields": wanted}, headers=auth("alice"))
    assert answer.status_code == 200
    jobs = answer.json()
    assert len(jobs) == JOBS
    assert all(set(job) == {"id", "name", "status", "remaining"} for job in jobs)
    whole = api.get("/v1/jobs", headers=auth("alice")).json()
    assert [j["name"] for j in jobs] == [j["name"] for j in whole]
    assert len(whole[0]) > 20  # no fields: every field
    # the columns-only listing gives exactly the views' values, the spec's defaults too
    for extra in (
        {"gpus": 2, "gpu_type": "k80", "max_retries": 0, "vc": "lab"},
        {"array": "0-2", "job_type": "ResNet-50 (batch size 64)", "total_steps": 100},
    ):
        posted = api.post("/v1/jobs", json={"command": ["true"], **extra}, headers=auth("alice"))
        assert posted.status_code == 201, posted.text
    brief = (
        "id,name,user,status,gpus,gpu_type,job_type,vc,total_steps,max_retries,array_job,"
        "array_index,position,remaining,priority,submit_time,steps,reason,failures,"
        "preemptions,exit_code,phase"
    )
    fast = api.get("/v1/jobs", params={"fields": brief}, headers=auth("alice")).json()
    full = api.get("/v1/jobs", headers=auth("alice")).json()
    assert len(fast) == len(full) == JOBS + 4
    assert fast == [{k: job[k] for k in brief.split(",")} for job in full]
    assert {j["gpu_type"] for j in fast} == {None, "K80"} and {j["gpus"] for j in fast} == {1, 2}
    for few in ("id", "position", "remaining,position", "gpus"):  # one column, or none
        listed = api.get("/v1/jobs", params={"fields": few}, headers=auth("alice")).json()
        assert listed == [{k: job[k] for k in few.split(",")} for job in full]
    bad = api.get("/v1/jobs", params={"fields": "id,nmae"}, headers=auth("alice"))
    assert bad.status_code == 422
    assert "no job field 'nmae'" in bad.json()["detail"][0]["msg"]


def test_brief_views_give_each_job_its_place_and_work_left() -> None:
    """A listing's columns-only views, with the queue's places and the policy's work
    left (the API above runs without a loop, so its jobs have none)."""
    Row = namedtuple("Row", ["id", "name", "status", "submit_time"])
    rows = [Row(1, "a", "PENDING", 0.0), Row(2, "b", "RUNNING", 0.0), Row(3, "c", "PENDING", 1.0)]
    specs = {"gpus": [2, 1, 1]}
    left = {1: (60.0, "default"), 2: (5.0, "heartbeats"), 3: (60.0, "default")}
    fields = {"id", "name", "gpus", "position", "remaining"}
    table = brief_table(columns_of(rows, Row._fields), specs, fields, {1: 2, 3: 1}, left)
    assert brief_views(table) == [
        {"gpus": 2, "id": 1, "name": "a", "position": 2,
         "remaining": {"seconds": 60.0, "source": "default"}},
        {"gpus": 1, "id": 2, "name": "b", "position": None,
         "remaining": {"seconds": 5.0, "source": "heartbeats"}},
        {"gpus": 1, "id": 3, "name": "c", "position": 1,
         "remaining": {"seconds": 60.0, "source": "default"}},
    ]  # fmt: skip
    assert table["id"] == (1, 2, 3) and table["position"] == [2, None, 1]
    by_column = columns_of(rows, Row._fields)
    assert brief_views(brief_table(by_column, {}, {"id", "remaining"}, {}, {})) == [
        {"id": k, "remaining": None} for k in (1, 2, 3)
    ]
    empty = columns_of([], Row._fields)
    assert brief_views(brief_table(empty, {"gpus": []}, {"id", "gpus"}, {}, {})) == []


def test_a_listing_after_a_change_reads_the_specs_of_new_jobs_only(api: TestClient) -> None:
    """The spec's scalars are read from the stored JSON once a job: a listing after a
    change sends the database the new job's id alone, and gives what a listing
    read whole gives."""
    ctx = api.app.state.context  # type: ignore[attr-defined]
    fields = {"fields": "id,gpus,gpu_type,total_steps,status"}
    first = api.get("/v1/jobs", params=fields, headers=auth("alice")).json()
    statements: list[str] = []
    listen = sqlalchemy.event.listen
    remember = lambda *a: statements.append(a[2])  # noqa: E731  (before_cursor_execute's statement)
    listen(ctx.store.engine, "before_cursor_execute", remember)
    try:
        posted = api.post(
            "/v1/jobs",
            json={"command": ["true"], "gpus": 3, "gpu_type": "k80"},
            headers=auth("alice"),
        )
        statements.clear()
        after = api.get("/v1/jobs", params=fields, headers=auth("alice")).json()
    finally:
        sqlalchemy.event.remove(ctx.store.engine, "before_cursor_execute", remember)
    reads = [q for q in statements if "json_extract" in q.lower()]
    assert len(reads) == 1 and "IN (" in reads[0].upper().replace("IN(", "IN (")
    assert after[:-1] == first and after[-1]["id"] == posted.json()["id"]
    assert (after[-1]["gpus"], after[-1]["gpu_type"]) == (3, "K80")
    ctx.specs = type(ctx.specs)()  # (forgotten: everything read again, the same)
    assert api.get("/v1/jobs", params=fields, headers=auth("alice")).json() == after


def test_a_listing_by_columns_is_the_listing_by_rows_turned(api: TestClient) -> None:
    """``layout=columns``: a list per field, the jobs in the same order, for the quick
    fields and for any others, and an empty listing of the fields asked for."""
    quick, slow = "id,name,gpus,position,remaining,status", "id,command,dependency,assigned_gpus"
    for fields in (quick, slow, None):
        asked = {"fields": fields} if fields else {}
        rows = api.get("/v1/jobs", params=asked, headers=auth("alice")).json()
        by_columns = api.get(
            "/v1/jobs", params={**asked, "layout": "columns"}, headers=auth("alice")
        ).json()
        assert rows and set(by_columns) == set(rows[0])
        turned = zip(*by_columns.values(), strict=True)
        assert [dict(zip(by_columns, job, strict=True)) for job in turned] == rows
    empty = api.get(
        "/v1/jobs", params={"fields": "id,gpus", "layout": "columns", "state": "FAILED"},
        headers=auth("alice"),
    )  # fmt: skip
    assert empty.json() == {"gpus": [], "id": []}
    bad = api.get("/v1/jobs", params={"layout": "diagonal"}, headers=auth("alice"))
    assert bad.status_code == 422
