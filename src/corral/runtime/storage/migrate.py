"""Versioned schema migrations (Alembic): the store says which schema it has.

Every store carries Alembic's version table. Opening a store (the service's
start, ``corral store upgrade``) brings it to this release's schema:

- a new store is created whole and stamped with the newest revision;
- a store from before versioned migrations (no version table) gains the
  nullable columns its release lacked and is stamped ``0001``;
- then every revision after the store's own is applied, in order.

A SQLite store is copied to ``<file>.before-<revision>`` before any change,
so a failed or unwanted upgrade is undone by putting the copy back;
``corral store downgrade REVISION`` runs the migrations' ``downgrade`` steps
instead (PostgreSQL: take a dump first, as for any schema change). A store
written by a newer release than this one is refused rather than guessed at.

May import: nothing of corral's but its errors (the store imports this module).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, inspect, text
from sqlalchemy.engine import Connection, Engine

from corral.errors import CorralError

MIGRATING = threading.Lock()
"""Alembic's ``context`` is one per process: stores opened on several threads at
once (tests, in-process services) take their turns."""
BASELINE = "0001"
"""The revision of a store written before versioned migrations."""


@dataclass
class Upgrade:
    """What opening the store did to its schema."""

    before: str | None
    """The store's revision before (None: new, or from before versioned migrations)."""
    after: str
    backup: Path | None = None
    legacy_columns: tuple[str, ...] = ()
    """Columns added to a store from before versioned migrations."""

    @property
    def changed(self) -> bool:
        return self.before != self.after or bool(self.legacy_columns)


def add_new_columns(engine: Engine, metadata: MetaData) -> list[str]:
    """Add to existing tables the nullable columns this release defines and they
    lack (``create_all`` makes missing tables only): a state directory written
    by an older release keeps its jobs. Returns ``table.column`` for each added."""
    existing = inspect(engine)
    added: list[str] = []
    with engine.begin() as connection:
        for table in metadata.sorted_tables:
            if not existing.has_table(table.name):
                continue
            have = {c["name"] for c in existing.get_columns(table.name)}
            for column in table.columns:
                if column.name in have or not column.nullable:
                    continue
                kind = column.type.compile(dialect=engine.dialect)
                connection.execute(
                    text(f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" {kind}')
                )
                added.append(f"{table.name}.{column.name}")
    return added


def config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", "corral.runtime.storage:migrations")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head() -> str:
    """The newest revision this release knows."""
    out = ScriptDirectory.from_config(config()).get_current_head()
    assert out is not None
    return out


def current(engine: Engine) -> str | None:
    with engine.connect() as connection:
        out: str | None = MigrationContext.configure(connection).get_current_revision()
        return out


def known_revisions() -> list[str]:
    return [s.revision for s in ScriptDirectory.from_config(config()).walk_revisions()]


def upgrade(engine: Engine, url: str, metadata: MetaData, target: str = "head") -> Upgrade:
    """Bring the store on ``engine`` to ``target`` (see the module docstring);
    ``metadata`` is this release's tables."""
    tables = set(inspect(engine).get_table_names())
    newest = head()
    if not tables - {"alembic_version"}:  # a new store: whole, then stamped
        metadata.create_all(engine)
        _stamp(engine, newest)
        return Upgrade(None, newest)
    before = current(engine)
    if before is not None and before not in known_revisions():
        raise CorralError(
            f"store {_shown(url)} has schema revision {before}, newer than this release "
            f"knows (newest: {newest}); run the release that wrote it, or downgrade the "
            "store with that release"
        )
    wanted = newest if target == "head" else target
    if before == wanted:
        metadata.create_all(engine)  # tables added without a revision (none yet)
        return Upgrade(before, wanted)
    backup = _backup(url, before or "unversioned")
    legacy: tuple[str, ...] = ()
    if before is None:
        metadata.create_all(engine)  # tables its release did not have
        legacy = tuple(add_new_columns(engine, metadata))
        _stamp(engine, BASELINE)
    with MIGRATING, engine.begin() as connection:
        command.upgrade(config(connection), target)
    return Upgrade(before, current(engine) or wanted, backup, legacy)


def downgrade(engine: Engine, url: str, target: str) -> Upgrade:
    """Undo migrations down to ``target`` (a revision this release knows)."""
    if target not in known_revisions():
        raise CorralError(f"no revision {target} (known: {', '.join(known_revisions())})")
    before = current(engine)
    backup = _backup(url, before or "unversioned")
    with MIGRATING, engine.begin() as connection:
        command.downgrade(config(connection), target)
    return Upgrade(before, current(engine) or target, backup)


def _stamp(engine: Engine, revision: str) -> None:
    with MIGRATING, engine.begin() as connection:
        command.stamp(config(connection), revision)


def _backup(url: str, revision: str) -> Path | None:
    """A copy of a SQLite store's file before its schema changes (None for servers)."""
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return None
    path = Path(url.removeprefix("sqlite:///"))
    if not path.is_file():
        return None
    target = path.with_name(f"{path.name}.before-{revision}-{int(time.time())}")
    # SQLite's own backup: a consistent copy, pages still in the WAL file included
    with sqlite3.connect(path) as source, sqlite3.connect(target) as copy:
        source.backup(copy)
    return target


def _shown(url: str) -> str:
    """A store's URL without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
