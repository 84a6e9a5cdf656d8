"""One scheduler per store: the lock on SQLite (a file lock) and PostgreSQL (advisory)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from corral.errors import CorralError
from corral.runtime.storage.store_lock import StoreBusy, StoreLock, supported_store


def test_a_second_holder_is_refused_with_the_first_ones_name(
    tmp_path: Path, store_url: str | None
) -> None:
    url = store_url or f"sqlite:///{tmp_path / 'state' / 'corral.db'}"
    first = StoreLock(url, tmp_path / "state", "first service")
    first.acquire()
    try:
        second = StoreLock(url, tmp_path / "state", "second service")
        with pytest.raises(StoreBusy, match="first service"):
            second.acquire()
        assert first.alive()
    finally:
        first.release()
    second.acquire()  # free once the holder let go
    second.release()


def test_a_standby_waits_and_takes_over(tmp_path: Path, store_url: str | None) -> None:
    url = store_url or f"sqlite:///{tmp_path / 'state' / 'corral.db'}"
    first = StoreLock(url, tmp_path / "state", "primary")
    first.acquire()
    standby = StoreLock(url, tmp_path / "state", "standby")
    said: list[str] = []
    waiter = threading.Thread(target=standby.acquire, args=(True, said.append))
    waiter.start()
    waiter.join(1.5)
    assert waiter.is_alive() and said and "held by primary" in said[0]
    first.release()
    waiter.join(10)
    assert not waiter.is_alive()
    standby.release()


def test_a_sqlite_database_elsewhere_is_locked_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared' / 'corral.db'}"
    first = StoreLock(url, tmp_path / "a", "service a")
    first.acquire()
    try:
        with pytest.raises(StoreBusy, match="service a"):  # another state dir, same database
            StoreLock(url, tmp_path / "b", "service b").acquire()
    finally:
        first.release()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "corral runs on SQLite"),
        ("sqlite:///:memory:", "needs a file"),
        ("not a url", "not a database URL"),
    ],
)
def test_unsupported_stores_are_named(url: str, message: str) -> None:
    with pytest.raises(CorralError, match=message):
        supported_store(url)
