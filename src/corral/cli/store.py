"""``corral store``: the service's store schema, checked, upgraded or taken back.

The service upgrades its store when it starts; these verbs do it on demand
(before a start, in a maintenance window) and say what they did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from corral.cli.app import JsonOpt, app, console, print_json
from corral.errors import CorralError

store_app = typer.Typer(
    help="The service's store: its schema revision, upgrades, downgrades, archiving."
)
app.add_typer(store_app, name="store")

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="service config (YAML): its store")
]
UrlOpt = Annotated[
    str | None, typer.Option("--url", help="a store's SQLAlchemy URL, instead of --config")
]


def _url(config: Path | None, url: str | None) -> str:
    if (config is None) == (url is None):
        raise CorralError("give the store: --config corral.yaml or --url URL (one of them)")
    if url is not None:
        return url
    from corral.runtime.jobspec.config import load_config

    assert config is not None
    return load_config(config).store_url


@store_app.command("status")
def status(config: ConfigOpt = None, url: UrlOpt = None, as_json: JsonOpt = False) -> None:
    """The store's schema revision and this release's newest."""
    from sqlalchemy import create_engine

    from corral.runtime.storage.migrate import current, head

    engine = create_engine(_url(config, url))
    try:
        have, newest = current(engine), head()
    finally:
        engine.dispose()
    if as_json:
        print_json({"revision": have, "newest": newest, "up_to_date": have == newest})
        return
    state = "up to date" if have == newest else "needs 'corral store upgrade'"
    console.print(f"store revision {have or 'none (unversioned)'}; newest {newest}: {state}")


@store_app.command("upgrade")
def upgrade_store(config: ConfigOpt = None, url: UrlOpt = None, as_json: JsonOpt = False) -> None:
    """Bring the store to this release's schema (a SQLite file is copied first)."""
    from corral.runtime.storage.store import Store

    store = Store(_url(config, url))  # opening a store upgrades it
    done = store.upgrade
    store.engine.dispose()
    _report(done, as_json)


@store_app.command("downgrade")
def downgrade_store(
    revision: Annotated[str, typer.Argument(help="the revision to go back to, e.g. 0001")],
    config: ConfigOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Undo migrations down to REVISION, for going back to an older release."""
    from sqlalchemy import create_engine

    from corral.runtime.storage.migrate import downgrade

    target = _url(config, url)
    engine = create_engine(target)
    try:
        done = downgrade(engine, target, revision)
    finally:
        engine.dispose()
    _report(done, as_json)


@store_app.command("archive")
def archive_store(
    older_than: Annotated[
        str, typer.Option("--older-than", help="ended longer ago than this (30d, 12h, seconds)")
    ],
    config: ConfigOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move jobs that ended long ago out of the hot tables (the service stopped).

    Each becomes one row of accounting that 'corral history' still shows; its
    attempts and events are deleted. A running service does this itself once an
    hour with 'archive_after' in its config.
    """
    import time

    from corral.runtime.storage.archive import archive_all
    from corral.runtime.storage.store import Store
    from corral.runtime.storage.store_lock import StoreBusy, StoreLock
    from corral.timespan import parse_seconds

    try:
        age = parse_seconds(older_than)
    except ValueError as exc:
        raise CorralError(f"--older-than: {exc}") from None
    if age < 3600:
        raise CorralError("--older-than: at least an hour (1h), so no job a user is still "
                          "looking at moves")  # fmt: skip
    target = _url(config, url)
    state_dir = _state_dir(config, target)
    lock = StoreLock(target, state_dir, "corral store archive")
    try:
        lock.acquire()
    except StoreBusy as exc:  # (nothing is touched)
        raise CorralError(
            f"{str(exc).split(';')[0]}; a running service archives on its own: set "
            "archive_after in its config (or stop it, then run this again)"
        ) from None
    try:
        store = Store(target)
        try:
            done = archive_all(store, age, time.time())
        finally:
            store.engine.dispose()
    finally:
        lock.release()
    if as_json:
        print_json({"jobs": done.jobs, "attempts": done.attempts, "events": done.events,
                    "waiting": done.waiting, "users": done.users})  # fmt: skip
        return
    console.print(
        f"{done.jobs} job(s) archived ({done.attempts} attempt(s) and {done.events} "
        f"event(s) deleted); {done.waiting} ended long enough ago stay: the newest job "
        "(its id must not be given again), or one whose array or rounds have not all ended",
        highlight=False,
    )


def _state_dir(config: Path | None, url: str) -> Path:
    """The state directory whose lock file guards a SQLite store (its folder)."""
    if config is not None:
        from corral.runtime.jobspec.config import load_config

        return load_config(config).state_dir
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///")).parent
    return Path.cwd()


def _report(done: object, as_json: bool) -> None:
    from corral.runtime.storage.migrate import Upgrade

    assert isinstance(done, Upgrade)
    if as_json:
        print_json(
            {
                "before": done.before,
                "after": done.after,
                "backup": str(done.backup) if done.backup else None,
                "legacy_columns": list(done.legacy_columns),
            }
        )
        return
    if not done.changed:
        console.print(f"store at revision {done.after}: nothing to do", highlight=False)
        return
    console.print(
        f"store revision {done.before or 'none (unversioned)'} -> {done.after}", highlight=False
    )
    if done.legacy_columns:
        console.print(f"columns added: {', '.join(done.legacy_columns)}", highlight=False)
    if done.backup:
        console.print(f"the store as it was: {done.backup}", highlight=False)
