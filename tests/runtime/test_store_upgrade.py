"""A store written by an older release opens with its jobs intact and gains
the nullable columns added since."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, inspect, text

from corral.runtime.storage.migrate import add_new_columns
from corral.runtime.storage.store import Base, JobRow, Store


def test_an_older_store_gains_new_columns_and_keeps_its_jobs(
    tmp_path: Path, store_url: str | None
) -> None:
    url = store_url or f"sqlite:///{tmp_path / 'state.db'}"
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    with engine.begin() as c:  # as the release before throughput_since wrote it
        c.execute(text('ALTER TABLE jobs DROP COLUMN "throughput_since"'))
        c.execute(
            text(
                'INSERT INTO jobs (name, "user", spec, status, priority, submit_time, phase,'
                " failures, preemptions, eligible_at, steps, throughput)"
                " VALUES ('old', 'alice', '{}', 'RUNNING', 0, 1.0, 'main', 0, 0, 0.0, 7.0, 2.5)"
            )
        )
    assert "throughput_since" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    engine.dispose()

    store = Store(url)
    try:
        with store.session() as s:
            (job,) = s.query(JobRow).all()
            assert (job.name, job.steps, job.throughput, job.throughput_since) == (
                "old",
                7.0,
                2.5,
                None,
            )
            job.throughput_since = 12.5
        with store.session() as s:
            assert s.query(JobRow).one().throughput_since == 12.5
        assert add_new_columns(store.engine, Base.metadata) == []  # nothing left to add
    finally:
        store.dispose()
