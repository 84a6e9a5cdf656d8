"""The API's requests are carried out a few hundred to a transaction (virtual
time): ten thousand cancels (``scancel -u``) in one transaction held the store's
write lock for ten seconds, and every user's submissions failed meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event, update

from corral.runtime.loop import transitions
from corral.runtime.storage.store import JobRow
from tests.runtime.virtual_loop import states, virtual_loop


def test_many_requests_are_carried_out_in_parts_and_all_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transitions, "REQUESTS_AT_ONCE", 7)
    loop = virtual_loop(tmp_path, v100s=1)
    jobs = [loop.queue(command=["sleep", "30"], gpus=1) for _ in range(25)]
    loop.run(2)  # one runs, the others wait
    assert [s for s, _ in states(loop.store).values()].count("RUNNING") == 1
    with loop.store.session() as s:  # what `corral cancel -u alice` records
        s.execute(update(JobRow).values(request="cancel"))
    seen: list[str] = []  # each statement that clears requests, and each commit

    def statement(conn: object, cursor: object, sql: str, *rest: object) -> None:
        if sql.startswith("UPDATE jobs SET request"):
            seen.append("clear")

    def committed(conn: object) -> None:
        seen.append("commit")

    event.listen(loop.store.engine, "before_cursor_execute", statement)
    event.listen(loop.store.engine, "commit", committed)
    loop.scheduler.step()  # one pass
    event.remove(loop.store.engine, "before_cursor_execute", statement)
    event.remove(loop.store.engine, "commit", committed)
    # 25 requests, 7 to a transaction: four transactions, each committed
    cleared = "".join("c" if x == "clear" else "|" for x in seen).strip("|").split("|")
    assert [part for part in cleared if part] == ["c", "c", "c", "c"]
    waiting = [j for j in jobs if loop.row(j).status == "CANCELLED"]
    assert len(waiting) == 24  # every waiting job at once; the running one is stopping
    loop.run(30)
    assert {s for s, _ in states(loop.store).values()} == {"CANCELLED"}
    assert all(loop.row(j).request is None for j in jobs)
    loop.close()
