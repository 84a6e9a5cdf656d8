"""Every read the service makes of a file a job's user could have replaced: a FIFO,
a link to /dev/zero or to another user's file, a file of a gigabyte. None may
block, follow the link or read without bound."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral.runtime.execution.executor import read_exit_record
from corral.runtime.execution.exits import log_tail
from corral.runtime.execution.job_files import read_small
from corral.runtime.execution.launcher import EXIT_FILE
from corral.runtime.execution.staging import MARK, staged

STAGE = ["cp", "a", "b"]


def hostile(kind: str, path: Path, secret: Path) -> None:
    """Put at ``path`` what a hostile job would."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "other-users-file":
        path.symlink_to(secret)
    elif kind == "gigabyte":
        with open(path, "wb") as handle:
            handle.truncate(2**30)  # sparse: no disk used
    elif kind == "folder":
        path.mkdir()


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result, failing if it has not returned in ``seconds``."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the read blocked"
    return out[0]


KINDS = ["fifo", "dev-zero", "other-users-file", "gigabyte", "folder"]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"stage": STAGE, "exit_code": 0, "signal": None}))
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_the_staging_mark_is_read_only_from_a_small_regular_file(
    tmp_path: Path, secret: Path, kind: str
) -> None:
    mark = tmp_path / "job" / MARK
    mark.parent.mkdir()
    hostile(kind, mark, secret)
    assert within(5, lambda: staged(mark, STAGE)) is False


@pytest.mark.parametrize("kind", KINDS)
def test_the_exit_record_and_log_are_read_safely(tmp_path: Path, secret: Path, kind: str) -> None:
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    hostile(kind, folder / EXIT_FILE, secret)
    hostile(kind, folder / "log.txt", secret)
    assert within(5, lambda: read_exit_record(folder)) is None
    tail = within(5, lambda: log_tail(folder / "log.txt"))
    assert STAGE[0] not in tail and len(tail) <= 16384


def test_a_regular_file_is_read_and_a_large_one_refused(tmp_path: Path, secret: Path) -> None:
    assert staged(secret, STAGE) is True
    assert read_small(secret) == secret.read_bytes()
    assert read_small(secret, limit=4) is None


def test_the_api_serves_no_log_through_a_link(tmp_path: Path, secret: Path) -> None:
    """A job's log replaced by a link (or a FIFO): the API answers at once, with nothing."""
    from tests.runtime.harness import Harness, auth

    service = Harness(tmp_path / "state", policy="fifo", policy_options={})
    try:
        job = service.submit(command=["true"])
        service.wait_done([job["id"]])
        folder = Path(service.attempts()[-1].dir)
        for kind in ("other-users-file", "fifo", "dev-zero"):
            (folder / "log.txt").unlink()
            hostile(kind, folder / "log.txt", secret)
            answer = within(
                10,
                lambda: service.client.get(f"/v1/jobs/{job['id']}/logs", headers=auth("alice")),
            )
            assert answer.status_code == 200 and answer.content == b"", kind
    finally:
        service.close()


def test_liquid_pre_staging_a_job_whose_mark_is_a_fifo_never_stops_the_loop(
    tmp_path: Path,
) -> None:
    """The reported case, in virtual time: Liquid pre-stages a waiting job whose own
    folder holds a FIFO at the staging mark. The pass reads the mark and goes on;
    the job runs (it stages again, as its user) and the other user's job succeeds."""
    from corral.runtime.jobspec.config import GpuGroup
    from corral.runtime.storage.store import EventRow, Store
    from corral.testing.virtual import VirtualClock, run_for, virtual_scheduler
    from tests.runtime.harness import make_config
    from tests.runtime.virtual_loop import queue, states

    config = make_config(
        tmp_path,
        policy="liquid",
        policy_options={"launch": 5.0},  # pre-scheduling on: stage 5 s ahead
        gpus=[GpuGroup(type="V100", count=4)],
    )
    store = Store(config.store_url)
    clock = VirtualClock()
    scheduler = virtual_scheduler(config, store, clock)
    # it says 10 s (ends expected at 15, launch phase included); it runs 20
    queue(store, "alice", clock, command=["sleep", "20"], gpus=4, duration=10)
    run_for(scheduler, clock, 2)
    staged_job = queue(store, "alice", clock, command=["sleep", "3"], stage=["true"], duration=3)
    folder = config.job_root / str(staged_job)
    folder.mkdir(parents=True)
    os.mkfifo(folder / MARK)

    def go_on() -> int:
        run_for(scheduler, clock, 9)  # the running job is due to end within the launch phase:
        other = queue(store, "bob", clock, command=["sleep", "3"], duration=3)  # a pass now
        run_for(scheduler, clock, 40)
        return other

    try:
        other = within(30, go_on)
    finally:  # a reader blocked on the FIFO (the defect) gets its end: the test fails, not hangs
        with contextlib.suppress(OSError):
            os.close(os.open(folder / MARK, os.O_WRONLY | os.O_NONBLOCK))
    with store.session() as s:
        prestaged = s.query(EventRow).filter(EventRow.kind == "prestage").count()
    assert prestaged >= 1  # the FIFO was met
    assert states(store)[other][0] == "SUCCEEDED"
    assert states(store)[staged_job][0] == "SUCCEEDED"
    assert scheduler.errors == 0
