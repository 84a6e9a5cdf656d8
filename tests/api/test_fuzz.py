"""Fuzzing the API from its own OpenAPI schema: whatever a client sends, the answer
is never a server error, and a refused request stores nothing.

Schemathesis generates requests for every operation from ``/openapi.json``
(valid ones and ones that break the schema: wrong types, huge numbers, odd
strings). Bounded: a fixed number of examples per operation, no deadline.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import func, select

from corral.api.app import create_app
from corral.runtime.storage.store import EventRow, JobRow, Store
from tests.runtime.harness import auth, make_config

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES = 30
"""Generated requests per operation (about 15 operations)."""


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Any, Store]]:
    with tempfile.TemporaryDirectory() as folder:
        config = make_config(Path(folder) / "state")
        store = Store(config.store_url)
        app = create_app(config, store)  # the API over the store, no scheduler loop
        yield app, store
        store.dispose()


def stored(store: Store) -> tuple[int, int]:
    with store.session() as s:
        jobs = s.scalar(select(func.count()).select_from(JobRow)) or 0
        events = s.scalar(select(func.count()).select_from(EventRow)) or 0
    return jobs, events


def test_no_request_makes_a_server_error_or_stores_half(served: tuple[Any, Store]) -> None:
    app, store = served
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    answered: dict[int, int] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: Any) -> None:
            before = stored(store)
            headers = {**(case.headers or {}), **auth("alice")}
            # (a loaded host has taken over the default 10 s to answer a request here)
            response = case.call(headers=headers, timeout=60)
            code = response.status_code
            answered[code] = answered.get(code, 0) + 1
            assert code < 500, (case.method, case.path, response.text[:500])
            if code >= 400:
                assert stored(store) == before, (case.method, case.path, code)

        check()
    assert sum(answered.values()) >= len(operations) * 5
    assert any(code < 300 for code in answered) and any(code == 422 for code in answered)
