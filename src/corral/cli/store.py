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

store_app = typer.Typer(help="The service's store: its schema revision, upgrades, downgrades.")
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
