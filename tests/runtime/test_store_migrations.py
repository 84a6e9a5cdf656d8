"""Versioned store migrations: a store written by the previous release (no
version table, no index of this release) opens with its jobs intact at the
newest revision, a SQLite one copied first; downgrades undo; a store from a
newer release is refused; ``corral store`` says and does the same."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from corral.cli import app
from corral.errors import CorralError
from corral.runtime.storage.migrate import current, downgrade, head
from corral.runtime.storage.store import Base, JobRow, Store


def previous_release_store(url: str) -> None:
    """A store as the release before versioned migrations wrote it, with a job."""
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    with engine.begin() as c:
        c.execute(text("DROP INDEX ix_jobs_user_name"))
        c.execute(
            text(
                'INSERT INTO jobs (name, "user", spec, status, priority, submit_time, phase,'
                " failures, preemptions, eligible_at, steps)"
                " VALUES ('old', 'alice', '{}', 'PENDING', 0, 1.0, 'main', 0, 0, 0.0, 0.0)"
            )
        )
    assert "alembic_version" not in inspect(engine).get_table_names()
    engine.dispose()


def indexes(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return {i["name"] for i in inspect(engine).get_indexes("jobs")}
    finally:
        engine.dispose()


def test_a_previous_release_store_is_upgraded_with_its_jobs(
    tmp_path: Path, store_url: str | None
) -> None:
    url = store_url or f"sqlite:///{tmp_path / 'corral.db'}"
    previous_release_store(url)
    store = Store(url)
    try:
        assert store.upgrade.before is None and store.upgrade.after == head() == "0007"
        with store.session() as s:
            assert [(j.name, j.user) for j in s.query(JobRow)] == [("old", "alice")]
        assert current(store.engine) == head()
        assert {"ix_jobs_user_name", "ix_jobs_request", "ix_jobs_user_status"} <= indexes(url)
        if store_url is None:  # SQLite: copied before the change, the copy intact
            backup = store.upgrade.backup
            assert backup is not None and backup.name.startswith("corral.db.before-unversioned")
            with sqlite3.connect(backup) as copy:
                assert copy.execute("SELECT name FROM jobs").fetchall() == [("old",)]
                tables = {r[0] for r in copy.execute("SELECT name FROM sqlite_master")}
                assert "alembic_version" not in tables
        else:
            assert store.upgrade.backup is None
    finally:
        store.engine.dispose()
    again = Store(url)  # up to date: nothing done, nothing copied
    try:
        assert not again.upgrade.changed and again.upgrade.backup is None
    finally:
        again.engine.dispose()


def test_a_new_store_starts_at_the_newest_revision(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        assert (store.upgrade.before, store.upgrade.after, store.upgrade.backup) == (
            None,
            head(),
            None,
        )
        assert {"ix_jobs_user_name", "ix_jobs_request"} <= indexes(store.url)
        with store.engine.connect() as conn:  # the loop's look for requests each pass
            plan = conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT * FROM jobs WHERE jobs.request IS NOT NULL"
            ).fetchall()
        assert "USING INDEX ix_jobs_request" in str(plan)
    finally:
        store.engine.dispose()


def test_downgrade_undoes_and_upgrade_redoes(tmp_path: Path, store_url: str | None) -> None:
    url = store_url or f"sqlite:///{tmp_path / 'corral.db'}"
    Store(url).engine.dispose()
    engine = create_engine(url)
    try:
        done = downgrade(engine, url, "0001")
        assert (done.before, done.after) == ("0007", "0001")
        assert not {"ix_jobs_user_name", "ix_jobs_request", "ix_jobs_user_status"} & indexes(url)
    finally:
        engine.dispose()
    store = Store(url)
    try:
        assert (store.upgrade.before, store.upgrade.after) == ("0001", "0007")
        assert {"ix_jobs_user_name", "ix_jobs_request", "ix_jobs_user_status"} <= indexes(url)
    finally:
        store.engine.dispose()


def test_a_store_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    Store(url).engine.dispose()
    engine = create_engine(url)
    with engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(CorralError, match=r"schema revision 0099, newer than this release"):
        Store(url)


def test_corral_store_status_upgrade_and_downgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    previous_release_store(url)
    runner = CliRunner()
    status = runner.invoke(app, ["store", "status", "--url", url, "--json"])
    assert json.loads(status.stdout) == {"revision": None, "newest": head(), "up_to_date": False}
    done = runner.invoke(app, ["store", "upgrade", "--url", url, "--json"])
    report = json.loads(done.stdout)
    assert (report["before"], report["after"]) == (None, head()) and report["backup"]
    table = runner.invoke(app, ["store", "status", "--url", url])
    assert "up to date" in table.stdout
    back = runner.invoke(app, ["store", "downgrade", "0001", "--url", url, "--json"])
    assert json.loads(back.stdout)["after"] == "0001"
    bad = runner.invoke(app, ["store", "downgrade", "0077", "--url", url])
    assert isinstance(bad.exception, CorralError) and "no revision 0077" in str(bad.exception)


def test_serve_says_when_it_upgraded_a_store_and_where_the_old_one_is(tmp_path: Path) -> None:
    """``corral serve`` opens (so upgrades) its store itself: the start-up lines say
    so, with the copy of the store as it was; nothing for a new or current store."""
    from corral.service import migration_note

    url = f"sqlite:///{tmp_path / 'corral.db'}"
    previous_release_store(url)
    store = Store(url)
    try:
        note = migration_note(store.upgrade)
        assert note is not None and f"to {head()}" in note
        assert str(store.upgrade.backup) in note
    finally:
        store.engine.dispose()
    again = Store(url)
    new = Store(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        assert migration_note(again.upgrade) is None and migration_note(new.upgrade) is None
    finally:
        again.engine.dispose()
        new.engine.dispose()


def test_jobs_stored_held_as_suspended_become_pending_and_held(
    tmp_path: Path, store_url: str | None
) -> None:
    """Revision 0003: a job submitted held was stored SUSPENDED (reason JobHeldUser);
    it is PENDING and held by its user after the upgrade, as Slurm shows it. A job
    suspended after it ran stays SUSPENDED; a downgrade puts the held job back."""
    url = store_url or f"sqlite:///{tmp_path / 'corral.db'}"
    Store(url).engine.dispose()
    engine = create_engine(url)
    try:
        downgrade(engine, url, "0002")
        with engine.begin() as c:
            for name, reason in (("held", "JobHeldUser"), ("paused", "Suspended")):
                c.execute(
                    text(
                        'INSERT INTO jobs (name, "user", spec, status, reason, priority,'
                        " submit_time, phase, failures, preemptions, eligible_at, steps)"
                        f" VALUES ('{name}', 'alice', '{{}}', 'SUSPENDED', '{reason}', 0, 1.0,"
                        " 'main', 0, 0, 0.0, 0.0)"
                    )
                )
    finally:
        engine.dispose()
    store = Store(url)
    try:
        assert (store.upgrade.before, store.upgrade.after) == ("0002", "0007")
        with store.session() as s:
            rows = {j.name: (j.status, j.held, j.reason) for j in s.query(JobRow)}
        assert rows == {
            "held": ("PENDING", "user", "JobHeldUser"),
            "paused": ("SUSPENDED", None, "Suspended"),
        }
    finally:
        store.engine.dispose()
    engine = create_engine(url)
    try:
        downgrade(engine, url, "0002")
        with engine.connect() as c:
            back = dict(c.execute(text("SELECT name, status FROM jobs")).all())
        assert back == {"held": "SUSPENDED", "paused": "SUSPENDED"}
    finally:
        engine.dispose()
