"""Each user's ended attempts' logs kept within ``user_log_limit``
(:mod:`corral.runtime.loop.log_quota`): the oldest emptied first, saying so, a
running attempt's log never touched, another user's never counted."""

from __future__ import annotations

import io
import os
from pathlib import Path

from corral.runtime.loop.log_quota import SWEEP_EVERY, LogQuota


def attempt(root: Path, job: int, number: int, size: int, age: float, ended: bool = True) -> Path:
    folder = root / str(job) / f"attempt-{number}"
    folder.mkdir(parents=True)
    log = folder / "log.txt"
    log.write_bytes(b"x" * size)
    if ended:
        (folder / "exit.json").write_text('{"exit_code": 0}')
    os.utime(log, (1e9 - age, 1e9 - age))
    return log


def test_the_oldest_ended_logs_of_a_user_past_the_limit_are_emptied(tmp_path: Path) -> None:
    owners = {1: "alice", 2: "alice", 3: "alice", 4: "bob"}
    old = attempt(tmp_path, 1, 1, 40_000, age=300)
    middle = attempt(tmp_path, 2, 1, 40_000, age=200)
    new = attempt(tmp_path, 2, 2, 40_000, age=100)
    running = attempt(tmp_path, 3, 1, 90_000, age=400, ended=False)
    bobs = attempt(tmp_path, 4, 1, 90_000, age=500)
    out = io.StringIO()
    quota = LogQuota(tmp_path, 100_000, lambda jobs: {j: owners[j] for j in jobs}, out)
    assert quota.due(0.0)
    freed = quota.sweep(0.0)
    assert set(freed) == {"alice"} and not quota.due(SWEEP_EVERY - 1)
    assert old.read_text().startswith("corral: this attempt's log was removed")
    assert "alice" in old.read_text()
    assert middle.stat().st_size == new.stat().st_size == 40_000  # within the limit now
    assert running.stat().st_size == 90_000 and bobs.stat().st_size == 90_000
    assert (
        out.getvalue().count("\n") == 1 and "alice's logs passed user_log_limit" in out.getvalue()
    )
    assert quota.sweep(SWEEP_EVERY) == {}  # nothing more to do: no line either
    assert out.getvalue().count("\n") == 1


def test_no_limit_no_sweep(tmp_path: Path) -> None:
    attempt(tmp_path, 1, 1, 10_000, age=1)
    quota = LogQuota(tmp_path, None, lambda jobs: dict.fromkeys(jobs, "alice"))
    assert not quota.due(1e9) and quota.sweep(0.0) == {}
