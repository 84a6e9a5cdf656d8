"""Alembic's entry point for corral's store: migrations run on the connection
:mod:`corral.runtime.storage.migrate` hands over (never a URL read from a file)."""

from __future__ import annotations

from alembic import context

from corral.runtime.storage.store import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,  # SQLite alters a table by copying it
)
with context.begin_transaction():
    context.run_migrations()
