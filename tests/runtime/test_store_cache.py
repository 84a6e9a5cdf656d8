"""What the store keeps of a read (:meth:`Store.cached`) is used only while nothing
has been written since: a dashboard's polls of a queue that did not change cost
lookups, and one that changed is read again."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from corral.api.app import create_app
from corral.runtime.storage import store as store_module
from corral.runtime.storage.store import JobRow, Store
from tests.runtime.harness import auth, make_config


def test_reads_leave_the_version_and_every_written_transaction_moves_it(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    try:
        before = store.version
        with store.session() as s:
            s.scalar(select(func.count()).select_from(JobRow))
        assert store.version == before
        with store.session() as s:
            store.event(s, "note")  # an ORM insert
        assert store.version == before + 1
        with store.session() as s:  # a bulk statement, outside the ORM's unit of work
            s.execute(update(JobRow).where(JobRow.id < 0).values(reason="x"))
        assert store.version == before + 2
    finally:
        store.engine.dispose()


def test_a_cached_read_is_reused_until_a_write_and_then_read_again(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        with store.session() as s:
            return s.scalar(select(func.count()).select_from(JobRow)) or 0

    def count_after_a_write() -> int:  # another thread's write, committed meanwhile
        with store.session() as s:
            store.event(s, "note")
        return count()

    try:
        assert store.cached("n", count) == 0
        assert store.cached("n", count) == 0 and len(calls) == 1
        with store.session() as s:
            store.event(s, "note")
        assert store.cached("n", count) == 0 and len(calls) == 2
        store.cached("m", count_after_a_write)
        store.cached("m", count)
        assert len(calls) == 4  # never answered from an entry older than the store
    finally:
        store.engine.dispose()


def test_a_listing_and_the_usage_show_a_job_as_soon_as_it_is_stored(tmp_path: Path) -> None:
    config = make_config(tmp_path / "state")
    store = Store(config.store_url)
    api = TestClient(create_app(config, store))
    try:
        for k in range(3):
            listed = api.get("/v1/jobs", params={"limit": 100}, headers=auth("alice"))
            usage = api.get("/v1/usage", headers=auth("alice")).json()
            assert len(listed.json()) == k and listed.headers["X-Total-Count"] == str(k)
            assert usage["by_state"]["PENDING"] == k
            again = api.get("/v1/jobs", params={"limit": 100}, headers=auth("alice"))
            assert again.content == listed.content
            answer = api.post("/v1/jobs", json={"command": ["true"]}, headers=auth("alice"))
            assert answer.status_code == 201
        first = api.get("/v1/jobs", params={"limit": 100}, headers=auth("alice")).json()[0]
        assert first["position"] == 1
        with store.session() as s:  # the loop ends it (as a cancel would)
            s.execute(update(JobRow).where(JobRow.id == first["id"]).values(status="CANCELLED"))
        after = api.get("/v1/jobs", params={"limit": 100}, headers=auth("alice")).json()
        assert first["id"] not in [j["id"] for j in after] and after[0]["position"] == 1
        assert api.get("/v1/usage", headers=auth("alice")).json()["by_state"]["PENDING"] == 2
    finally:
        store.engine.dispose()


def test_what_is_kept_is_bounded_by_weight_as_well_as_by_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile user's thousand different listings of ten thousand jobs each keep at
    most CACHE_WEIGHT cells; one heavier than that is computed and not kept."""
    monkeypatch.setattr(store_module, "CACHE_WEIGHT", 100)
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    calls: list[str] = []

    def listing(key: str, weight: int) -> list[int]:
        def compute() -> list[int]:
            calls.append(key)
            return [0] * weight

        return store.cached(key, compute, len)

    try:
        for k in range(30):
            listing(f"l{k}", 30)
            assert store._cache_weight <= 100 and len(store._cache) <= 3
        assert listing("l29", 30) and calls.count("l29") == 1  # the latest are kept
        listing("l0", 30)
        assert calls.count("l0") == 2  # the oldest went
        listing("huge", 101)
        listing("huge", 101)
        assert calls.count("huge") == 2 and "huge" not in store._cache
        assert store._cache_weight == sum(w for _, _, w in store._cache.values())
    finally:
        store.engine.dispose()
