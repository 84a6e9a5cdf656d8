"""Listing jobs never leaves any out silently: pages with a cursor and a total."""

from __future__ import annotations

from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from corral.api import client as client_module
from corral.api.app import create_app
from corral.api.client import Answer, Client
from corral.runtime.store import Store
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
        headers = Message()
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
