"""One scheduler per store: the lock a service holds for as long as it runs.

Two services scheduling from one store would start every job twice on the
same GPUs, so a service takes this lock before it writes anything and a
second one stops at once, naming the holder. The lock belongs to the store
itself, so it holds across machines where the store is shared:

- a SQLite store: an exclusive ``flock`` on ``corral.lock`` beside the
  database file (and on the state directory's, which holds the attempts'
  folders), released by the kernel when the process dies, ``kill -9`` included;
- a PostgreSQL store: a session-level advisory lock on a connection kept open
  for the life of the service, released by the server when that connection
  ends. The holder is named by the connection's ``application_name``.

A standby (``corral serve --standby``, Slurm's backup controller) waits for
the lock instead of stopping, and takes over when the holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine, make_url

from corral.errors import CorralError

LOCK_FILE = "corral.lock"
_PG_KEYS = (0x636F7272, 0x616C5301)
"""The advisory lock's two 32-bit keys (any fixed pair; 'corral' in ASCII)."""


class StoreBusy(CorralError):
    """Another service holds the store."""


def holder_line(url: str) -> str:
    """Who holds the lock, as the refused service reports it."""
    return f"pid {os.getpid()} on {socket.gethostname()}, serving {url}"


def supported_store(url: str) -> str:
    """The store's dialect; a message for people when it is one corral does not run on."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # SQLAlchemy raises several kinds for a bad URL
        raise CorralError(f"store: '{url}' is not a database URL ({exc})") from None
    dialect = parsed.get_backend_name()
    if dialect not in ("sqlite", "postgresql"):
        raise CorralError(
            f"store: '{parsed.render_as_string(hide_password=True)}' is a {dialect} database; "
            "corral runs on SQLite (default) or PostgreSQL (postgresql+psycopg://...)"
        )
    if dialect == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise CorralError("store: a SQLite store needs a file (sqlite:///path/corral.db)")
    return dialect


class StoreLock:
    """The service's exclusive hold on its store and state directory."""

    def __init__(self, store_url: str, state_dir: Path, holder: str) -> None:
        self.store_url = store_url
        self.holder = holder
        self.dialect = supported_store(store_url)
        paths = [state_dir / LOCK_FILE]
        if self.dialect == "sqlite":
            db = Path(make_url(store_url).database or "").resolve()
            if db.parent != state_dir.resolve():
                paths.append(db.parent / LOCK_FILE)
        self._paths = paths
        self._files: list[int] = []
        self._engine: Engine | None = None
        self._conn: Connection | None = None

    def acquire(self, wait: bool = False, on_wait: Callable[[str], None] | None = None) -> None:
        """Take the lock, or raise :class:`StoreBusy` naming the holder (``wait``: poll)."""
        told = False
        while True:
            busy = self._try()
            if busy is None:
                return
            if not wait:
                raise StoreBusy(
                    f"another corral service holds this store ({busy}); "
                    "one scheduler per store: stop it first, or start this one with --standby"
                )
            if on_wait is not None and not told:
                on_wait(f"standby: waiting for the store's lock, held by {busy}")
                told = True
            time.sleep(1.0)

    def _try(self) -> str | None:
        """None when taken now, else a description of the holder."""
        for path in self._paths:
            busy = self._lock_file(path)
            if busy is not None:
                self.release()
                return busy
        if self.dialect == "postgresql":
            busy = self._lock_postgres()
            if busy is not None:
                self.release()
                return busy
        return None

    def _lock_file(self, path: Path) -> str | None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                who = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            finally:
                os.close(fd)
            return who or f"a process holding {path}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.holder.encode(), 0)
        self._files.append(fd)
        return None

    def _lock_postgres(self) -> str | None:
        name = self.holder[:63]  # the server keeps 63 bytes of an application_name
        args: dict[str, Any] = {"application_name": name}
        self._engine = create_engine(self.store_url, connect_args=args)
        conn = self._engine.connect()
        got = conn.execute(text("SELECT pg_try_advisory_lock(:a, :b)"), _keys()).scalar()
        conn.commit()
        if got:
            self._conn = conn
            return None
        who = conn.execute(
            text(
                "SELECT a.application_name, a.client_addr FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                "AND l.granted AND l.classid = :a AND l.objid = :b"
            ),
            _keys(),
        ).first()
        conn.close()
        if who is None:
            return "a session of the database server"
        return f"{who[0] or 'unnamed'}" + (f" from {who[1]}" if who[1] else "")

    def alive(self) -> bool:
        """False when a PostgreSQL lock was lost with its connection (files never are)."""
        if self._conn is None:
            return True
        try:
            self._conn.execute(text("SELECT 1"))
            self._conn.commit()
        except Exception:  # any failure means the session, and its lock, is gone
            return False
        return True

    def release(self) -> None:
        for fd in self._files:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._files = []
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def _keys() -> dict[str, int]:
    return {"a": _PG_KEYS[0], "b": _PG_KEYS[1]}
