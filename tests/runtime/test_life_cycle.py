"""Every status any part of the service writes is checked against the job life
cycle where it is written (the store's model): a job ends once and never changes
again. In tests an illegal change is an error; live it is refused and logged, and
the job keeps its status."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.model.status import JobStatus
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.storage.store import (
    STRICT_TRANSITIONS_ENV,
    IllegalTransition,
    JobRow,
    Store,
)


def ended_job(store: Store) -> int:
    with store.session() as s:
        row = JobRow.queued(JobSpec(command=["true"]), "alice", 0, "Submitted")
        s.add(row)
        s.flush()
        row.status = JobStatus.RUNNING
        row.status = JobStatus.SUCCEEDED
        return row.id


def test_an_ended_job_never_changes_again(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    try:
        job = ended_job(store)
        with (
            pytest.raises(IllegalTransition, match="SUCCEEDED -> RUNNING"),
            store.session() as s,
        ):
            row = s.get(JobRow, job)
            assert row is not None
            row.status = JobStatus.RUNNING
        with store.session() as s:
            assert s.get(JobRow, job).status == "SUCCEEDED"  # type: ignore[union-attr]
    finally:
        store.dispose()


def test_live_an_illegal_change_is_refused_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(STRICT_TRANSITIONS_ENV)
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    try:
        job = ended_job(store)
        with store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None
            row.status = JobStatus.PENDING  # (a stale write: the job has ended)
            row.reason = "requeued"  # the rest of the write goes through
        with store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None and (row.status, row.reason) == ("SUCCEEDED", "requeued")
        said = capsys.readouterr().err
        assert f"job {job}: status SUCCEEDED -> PENDING is outside the life cycle" in said
    finally:
        store.dispose()


def test_legal_changes_and_unknown_values_pass(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    try:
        with store.session() as s:
            row = JobRow.queued(JobSpec(command=["true"]), "alice", 0, "Submitted")
            s.add(row)
            s.flush()
            for status in ("STARTING", "RUNNING", "SUSPENDED", "PENDING", "CANCELLED"):
                row.status = status
            row.status = "BOGUS"  # (not a state: the loop's record checks set it aside)
            assert row.status == "BOGUS"
    finally:
        store.dispose()
