"""Ended jobs moved out of the hot tables (:mod:`corral.runtime.storage.archive`):
what moves and what waits, what ``corral history``, ``corral show``, dependencies
and the metrics see afterwards, the service's own hourly sweep in virtual time,
and ``corral store archive`` on a stopped service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import HTTPException
from sqlalchemy import func, select
from typer.testing import CliRunner

from corral.api import jobs as routes
from corral.api.common import Context
from corral.api.metrics import StoreCollector
from corral.cli.app import app
from corral.errors import CorralError
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.admission import Refused
from corral.runtime.storage.archive import archive_all, archive_ended
from corral.runtime.storage.store import (
    ArchivedJobRow,
    AttemptRow,
    EventRow,
    JobInputRow,
    JobRow,
    Store,
)
from corral.runtime.storage.store_lock import StoreLock
from tests.runtime.virtual_loop import VirtualLoop, states, virtual_loop

DAY = 86400.0


@pytest.fixture
def loop(tmp_path: Path) -> VirtualLoop:
    made = virtual_loop(tmp_path, "fifo", v100s=2)
    yield made
    made.close()


def ctx(loop: VirtualLoop) -> Context:
    return Context(loop.config, loop.store, loop.scheduler)


def user(loop: VirtualLoop, name: str = "alice"):
    return next(u for u in loop.config.users if u.name == name)


def history(loop: VirtualLoop, **kw: object) -> list[dict[str, object]]:
    views = routes.history(ctx(loop), user(loop), all_users=True, **kw)  # type: ignore[arg-type]
    return [v.model_dump() for v in views]


def counts(store: Store) -> dict[str, int]:
    with store.session() as s:
        return {
            "jobs": s.scalar(select(func.count()).select_from(JobRow)) or 0,
            "archived": s.scalar(select(func.count()).select_from(ArchivedJobRow)) or 0,
            "attempts": s.scalar(select(func.count()).select_from(AttemptRow)) or 0,
        }


def test_jobs_ended_long_ago_move_and_history_shows_them_the_same(loop: VirtualLoop) -> None:
    done = [loop.queue(command=["sleep", "2"]) for _ in range(3)]
    failing = loop.queue(command=["false"], max_retries=1)
    loop.run(20)
    live = loop.queue(command=["sleep", "100000"])
    loop.run(2)
    before = {row["id"]: row for row in history(loop)}
    loop.clock.advance(2 * DAY)
    recent = loop.queue(command=["sleep", "1"])
    loop.run(5)
    moved = archive_all(loop.store, DAY, loop.clock())
    assert moved.jobs == 4 and moved.attempts == 3 + 2 and moved.events > 0
    assert states(loop.store).keys() == {live, recent}
    after = {row["id"]: row for row in history(loop)}
    for job in [*done, failing]:
        assert after[job] == before[job]  # the same accounting, read from the archive
    assert after[failing]["status"] == "FAILED" and after[failing]["attempts"] == 2
    assert [r["id"] for r in history(loop, limit=2)] == [live, recent]
    assert [r["id"] for r in history(loop, state="FAILED")] == [failing]
    with pytest.raises(HTTPException) as caught:
        routes.show(ctx(loop), done[0], user(loop))
    assert caught.value.status_code == 404 and "archived" in str(caught.value.detail)
    assert archive_all(loop.store, DAY, loop.clock()).jobs == 0  # nothing twice


def test_a_dependency_on_an_archived_job_is_judged_by_how_it_ended(loop: VirtualLoop) -> None:
    ok = loop.queue(command=["sleep", "1"])
    bad = loop.queue(command=["false"], max_retries=0)
    loop.run(10)
    waits = loop.queue(command=["sleep", "1"], dependency={"afterok": [ok]})
    never = loop.queue(command=["sleep", "1"], dependency={"afterok": [bad]})
    with loop.store.session() as s:  # held at submission, as the API stores it
        for job in (waits, never):
            row = s.get(JobRow, job)
            assert row is not None
            row.held, row.reason = "user", "JobHeldUser"
    loop.run(2)
    assert {states(loop.store)[j][0] for j in (waits, never)} == {"PENDING"}
    loop.clock.advance(2 * DAY)
    assert archive_all(loop.store, DAY, loop.clock()).jobs == 2
    for job in (waits, never):  # released after their dependencies were archived
        with loop.store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None
            row.request = "release"
    loop.run(10)
    got = states(loop.store)
    assert got[waits][0] == "SUCCEEDED"
    assert got[never][0] == "CANCELLED" and f"job {bad} ended FAILED" in str(got[never][1])
    with loop.store.session() as s, pytest.raises(Refused, match="archived"):
        ctx(loop).admission.admit(
            s, JobSpec(command=["true"], dependency={"afterok": [ok]}), user(loop)
        )


def test_an_array_moves_whole_and_the_newest_job_never(loop: VirtualLoop) -> None:
    with loop.store.session() as s:
        admitted = ctx(loop).admission.admit(
            s, JobSpec(command=["sleep", "1"], array="0-3"), user(loop)
        )
        tasks = [row[0] for row in admitted.rows()]
        s.add(JobInputRow(job_id=tasks[0], script="#!/bin/sh\n"))  # (kept once an array)
    loop.run(15)
    last = loop.queue(command=["sleep", "1"])
    loop.run(5)
    with loop.store.session() as s:  # one task ends later than the others
        late = s.get(JobRow, tasks[-1])
        assert late is not None and late.end_time is not None
        late.end_time += 2 * DAY
    loop.clock.advance(2 * DAY + 10)
    moved, _ = archive_ended(loop.store, DAY, loop.clock())
    assert moved.jobs == 0 and moved.waiting == 4  # three tasks, and the newest job
    with loop.store.session() as s:
        assert s.get(JobInputRow, tasks[0]) is not None
        late = s.get(JobRow, tasks[-1])
        assert late is not None
        late.end_time -= 2 * DAY
    assert archive_all(loop.store, DAY, loop.clock()).jobs == 4
    with loop.store.session() as s:
        assert s.get(JobInputRow, tasks[0]) is None
        assert s.get(JobRow, last) is not None  # the newest: its id is never given again
    assert states(loop.store).keys() == {last}


def test_the_metrics_counters_never_go_down(loop: VirtualLoop) -> None:
    for command in (["sleep", "1"], ["false"]):
        loop.queue(command=command, max_retries=0)
    loop.run(10)
    loop.queue(command=["sleep", "1"])  # (the newest stays)

    def scrape() -> dict[tuple[str, tuple[str, ...]], float]:
        out = {}
        for family in StoreCollector(ctx(loop)).collect():
            for sample in family.samples:
                out[sample.name, tuple(sample.labels.values())] = sample.value
        return out

    before = scrape()
    loop.clock.advance(2 * DAY)
    assert archive_all(loop.store, DAY, loop.clock()).jobs == 2
    after = scrape()
    for key, value in before.items():
        if key[0].endswith("_total"):
            assert after[key] == value, key


def test_the_service_archives_on_its_own_once_an_hour(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path, "fifo", v100s=2, archive_after="1d")
    try:
        first = loop.queue(command=["sleep", "1"])
        loop.run(10)
        loop.clock.advance(DAY + 3600)
        loop.queue(command=["sleep", "1"])
        loop.run(5)
        assert counts(loop.store)["archived"] == 1
        with loop.store.session() as s:
            assert s.get(ArchivedJobRow, first) is not None
            assert s.scalar(select(func.count()).where(EventRow.job_id == first)) == 0
    finally:
        loop.close()


def test_archive_after_is_read_as_a_duration_of_at_least_an_hour(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from tests.runtime.harness import make_config

    assert make_config(tmp_path, archive_after="30d").archive_after == 30 * DAY
    with pytest.raises(ValidationError, match="archive_after"):
        make_config(tmp_path, archive_after="10m")


def test_the_command_archives_a_stopped_services_store_and_not_a_running_one(
    loop: VirtualLoop,
) -> None:
    loop.queue(command=["sleep", "1"])
    loop.run(10)
    loop.queue(command=["sleep", "1"])
    loop.run(5)
    url = loop.config.store_url
    runner = CliRunner()
    held = StoreLock(url, loop.config.state_dir, "corral serve (pid 1)")
    held.acquire()
    try:
        said = runner.invoke(app, ["store", "archive", "--url", url, "--older-than", "1h"])
        assert isinstance(said.exception, CorralError) and "archive_after" in str(said.exception)
    finally:
        held.release()
    said = runner.invoke(app, ["store", "archive", "--url", url, "--older-than", "10m"])
    assert isinstance(said.exception, CorralError) and "at least an hour" in str(said.exception)
    said = runner.invoke(app, ["store", "archive", "--url", url, "--older-than", "soon"])
    assert isinstance(said.exception, CorralError) and "--older-than" in str(said.exception)
    with loop.store.session() as s:  # both ended two hours ago
        for row in s.scalars(select(JobRow)):
            row.end_time = (row.end_time or 0) - 7200
    said = runner.invoke(app, ["store", "archive", "--url", url, "--older-than", "1h", "--json"])
    assert said.exit_code == 0, said.output
    assert json.loads(said.output)["jobs"] == 1  # (the newest stays)
