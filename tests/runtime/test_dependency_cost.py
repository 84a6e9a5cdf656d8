"""A queued job that names thousands of others costs each pass a statement or two,
not one per few hundred ids, and its verdict is Slurm's (in virtual time).

The store was asked about every named id on every pass, in pieces of 500: a job
waiting for twenty thousand ids (accepted: arrays are named this way) made every
pass of the loop forty statements and tens of milliseconds longer, for everyone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from corral.runtime.loop.queueing import Queueing
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop


@contextmanager
def statements_of_dependencies(loop: VirtualLoop) -> Iterator[list[int]]:
    """Counts, per pass, the statements the loop's dependency check sends."""
    counts: list[int] = []
    inside = [False]

    def count(*_: Any) -> None:
        if inside[0]:
            counts[-1] += 1

    original = Queueing.dependencies

    def counted(self: Queueing, now: float) -> bool:
        counts.append(0)
        inside[0] = True
        try:
            return original(self, now)
        finally:
            inside[0] = False

    event.listen(loop.store.engine, "before_cursor_execute", count)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Queueing, "dependencies", counted)
        try:
            yield counts
        finally:
            event.remove(loop.store.engine, "before_cursor_execute", count)


def test_a_job_naming_twenty_thousand_ids_costs_a_pass_few_statements(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path, v100s=2)
    first = loop.queue(command=["sleep", "30"])
    named = [first, *range(10_000, 30_000)]  # the rest are not in the store
    waiting = loop.queue(dependency={"afterany": named})
    with statements_of_dependencies(loop) as counts:
        loop.run(10)
        assert loop.row(waiting).reason == "Dependency"
        assert counts and max(counts) <= 2, counts  # (was 41: 20,001 ids in pieces of 500)
        loop.run(40)
    row = loop.row(waiting)
    assert loop.row(first).status == "SUCCEEDED"
    assert row.status == "CANCELLED" and row.reason is not None
    assert "job 10000 is gone" in row.reason, row.reason
    loop.close()


def test_an_ended_job_is_not_asked_about_again(tmp_path: Path) -> None:
    """A job waits for one that has ended and for one still running: only the
    running one is asked about on each later pass."""
    loop = virtual_loop(tmp_path, v100s=2)
    short = loop.queue(command=["sleep", "2"])
    long = loop.queue(command=["sleep", "60"])
    waiting = loop.queue(dependency={"afterok": [short, long]})
    loop.run(10)
    assert loop.row(short).status == "SUCCEEDED"
    asked: list[list[int]] = []
    original = Queueing._job_states

    def recorded(s: Any, ids: list[int]) -> dict[int, tuple[str, bool]]:
        asked.append(list(ids))
        return original(s, ids)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Queueing, "_job_states", staticmethod(recorded))
        loop.run(20)
    assert asked and all(ids == [long] for ids in asked), asked
    loop.run(60)
    assert loop.row(waiting).status == "SUCCEEDED"
    loop.close()
