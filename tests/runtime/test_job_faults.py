"""One job the loop itself fails on (its own error while handling that job, in any
stage) is set aside; the pass is undone and everyone else's jobs go on. Before,
such an error failed every pass from then on, for every user: nothing isolated
one job's failure from the pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.runtime.execution import exits
from corral.runtime.loop import transitions
from corral.runtime.loop.launching import Launching
from corral.runtime.loop.stops import Stops
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop


def settle(loop: VirtualLoop, seconds: float = 60) -> None:
    loop.run(seconds)
    assert loop.scheduler.errors == 0  # no pass failed for everyone


def test_a_job_whose_end_the_loop_cannot_record_is_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = virtual_loop(tmp_path, "fifo", v100s=1)
    doomed = loop.queue("mallory", command=["sleep", "2"])
    others = [loop.queue("alice", command=["sleep", "2"]) for _ in range(3)]

    def classify(stop: Any, record: Any, phase: str, log: Path) -> Any:
        if f"/{doomed}/" in str(log):
            raise RuntimeError("cannot read this one")
        return exits.classify(stop, record, phase, log)

    monkeypatch.setattr(transitions, "classify", classify)
    settle(loop)
    row = loop.row(doomed)
    assert row.status == "FAILED", row.status
    assert row.reason is not None and row.reason.startswith("InternalError (while following")
    assert "RuntimeError: cannot read this one" in row.reason
    assert [loop.row(job).status for job in others] == ["SUCCEEDED"] * 3
    assert loop.scheduler.faults == 1 and loop.scheduler.faulted == {}
    assert all(a.end_time is not None for a in loop.attempts(doomed))
    assert len(loop.scheduler.book) == 0
    loop.close()


def test_a_job_the_loop_cannot_launch_is_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = virtual_loop(tmp_path, "fifo", v100s=1)
    doomed = loop.queue("mallory", command=["sleep", "2"])
    other = loop.queue("alice", command=["sleep", "2"])
    original = Launching._env

    def env(self: Launching, row: Any, *args: Any) -> dict[str, str]:
        if row.id == doomed:
            raise KeyError("no such variable")
        return original(self, row, *args)

    monkeypatch.setattr(Launching, "_env", env)
    settle(loop)
    row = loop.row(doomed)
    assert row.status == "FAILED" and row.reason is not None
    assert row.reason.startswith("InternalError (while launching it: KeyError"), row.reason
    assert loop.row(other).status == "SUCCEEDED"
    assert loop.attempts(doomed) == []  # its attempt's row went with the undone pass
    loop.close()


def test_a_running_job_whose_cancel_fails_is_still_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job set aside while its process runs: the process is stopped first, and
    the job ends FAILED once it is gone (no process outlives its job)."""
    loop = virtual_loop(tmp_path, "fifo", v100s=2)
    doomed = loop.queue("mallory", command=["sleep", "1000"])
    other = loop.queue("alice", command=["sleep", "30"])
    loop.run(3)
    assert loop.row(doomed).status == "RUNNING"
    original = Stops.stop

    def stop(self: Stops, a: Any, why: str, *args: Any, **kwargs: Any) -> None:
        if a.job == doomed and why == "cancel":
            raise ValueError("a stop that goes wrong")
        original(self, a, why, *args, **kwargs)

    monkeypatch.setattr(Stops, "stop", stop)
    with loop.store.session() as s:
        from corral.runtime.storage.store import JobRow

        row = s.get(JobRow, doomed)
        assert row is not None
        row.request = "cancel"
    settle(loop)
    row = loop.row(doomed)
    assert row.status == "FAILED" and row.reason is not None
    assert "while stopping it (cancel): ValueError" in row.reason, row.reason
    assert not [p for p in loop.executor.running() if p.job == doomed]
    assert all(a.end_time is not None for a in loop.attempts(doomed))
    assert loop.row(other).status == "SUCCEEDED"
    loop.close()


def test_a_plan_naming_a_gpu_that_does_not_exist_sets_that_job_aside(
    tmp_path: Path,
) -> None:
    """A policy (a plugin, say) that places one job on a GPU id the cluster has not:
    the check of that start fails, inside the containment of that job, which is set
    aside; the other jobs run and no pass fails for everyone."""
    from corral.model.plan import Plan
    from corral.model.state import PENDING

    loop = virtual_loop(tmp_path, "fifo", v100s=1)
    doomed = loop.queue("mallory", command=["sleep", "2"], gpu_type="V100")  # (checked)
    other = loop.queue("alice", command=["sleep", "2"])
    policy = loop.scheduler.policy
    schedule = policy.schedule

    def broken(state: Any) -> Plan:
        ids = loop.scheduler.live.ids
        i = next((k for k, job in enumerate(ids) if job == doomed), None)
        if i is not None and state.status[i] == PENDING:
            return Plan(starts={i: (99,)})  # (the cluster has GPU 0 only)
        return schedule(state)

    policy.schedule = broken  # type: ignore[method-assign]
    settle(loop)
    row = loop.row(doomed)
    assert row.status == "FAILED" and row.reason is not None, row.status
    assert row.reason.startswith("InternalError (while applying the plan's start"), row.reason
    assert loop.row(other).status == "SUCCEEDED"
    loop.close()
