"""Gandiva's introspection in virtual time: a pair no table knows is packed on
trial and judged by the throughputs the two jobs report, kept when packing
helps and turned into time-slicing when it does not.

The jobs are virtual ``train`` processes: they report heartbeats, and two
``exclusive`` ones on one GPU each run at half speed (as compute-bound jobs
do), so the measured speeds are exact and the verdict is the policy's alone,
never the machine's load. (Pausing real processes is tested live in
``test_gandiva_live.py``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.storage.store import AttemptRow, EventRow, JobRow, Store
from corral.testing.virtual import VirtualClock, VirtualExecutor, run_for, virtual_scheduler
from tests.runtime.harness import make_config
from tests.runtime.virtual_loop import queue

QUANTUM = 2.0
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}


class Gandiva:
    """One V100 under Gandiva, in virtual time."""

    def __init__(self, tmp_path: Path) -> None:
        self.config = make_config(
            tmp_path,
            policy="gandiva",
            policy_options={"quantum": QUANTUM},
            gpus=[GpuGroup(type="V100", count=1)],
        )
        self.store = Store(self.config.store_url)
        self.clock = VirtualClock()
        self.executor = VirtualExecutor(self.config, self.clock, self.store)
        self.scheduler = virtual_scheduler(self.config, self.store, self.clock, self.executor)

    def submit(self, name: str, steps: int, exclusive: bool) -> int:
        command = ["train", str(steps), "50"] + (["exclusive"] if exclusive else [])
        return queue(self.store, "alice", self.clock, name=name, command=command, gpus=1)

    def run(self, seconds: float) -> None:
        run_for(self.scheduler, self.clock, seconds, tick=0.1)

    def run_until(self, done: Any, most: float, what: str) -> Any:
        waited = 0.0
        while waited < most:
            found = done()
            if found:
                return found
            self.run(0.5)
            waited += 0.5
        raise AssertionError(f"no {what} after {most} virtual seconds")

    def job(self, job: int) -> JobRow:
        with self.store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None
            return row

    def events(self, kind: str) -> list[EventRow]:
        with self.store.session() as s:
            return list(s.query(EventRow).filter(EventRow.kind == kind).order_by(EventRow.id))

    def attempts(self) -> list[AttemptRow]:
        with self.store.session() as s:
            return list(s.query(AttemptRow).order_by(AttemptRow.id))

    def pack_after_measuring(self, exclusive: bool) -> tuple[int, int]:
        """A runs alone until its throughput is known; B then arrives and is packed on it."""
        a = self.submit("a", 450, exclusive)
        self.run_until(lambda: (self.job(a).throughput or 0) > 0, 10, "throughput from job a")
        self.run(2.0)  # a's figure covers a second of running alone
        b = self.submit("b", 500, exclusive)
        self.run_until(lambda: self.events("packed"), 5, "packing of job b on job a")
        return a, b

    def ended(self, jobs: list[int], most: float) -> list[JobRow]:
        self.run_until(lambda: all(self.job(j).status in TERMINAL for j in jobs), most, "end")
        return [self.job(j) for j in jobs]


@pytest.fixture
def gandiva(tmp_path: Path) -> Any:
    cluster = Gandiva(tmp_path)
    yield cluster
    assert cluster.scheduler.errors == 0
    cluster.store.dispose()


def test_packing_that_helps_is_kept_by_measured_throughput(gandiva: Gandiva) -> None:
    a, b = gandiva.pack_after_measuring(exclusive=False)
    jobs = gandiva.ended([a, b], 60)
    assert [j.status for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    # the pair was judged (no table knows these jobs: only the measured
    # throughputs could keep it) and both ran at once throughout
    assert not gandiva.events("timeslice") and not gandiva.events("pause")
    assert len(gandiva.attempts()) == 2 and [j.preemptions for j in jobs] == [0, 0]
    assert jobs[0].end_time is not None and jobs[1].end_time is not None
    assert jobs[0].end_time < jobs[1].end_time
    # at full speed together: a's 9 s of work took 9 s (plus the passes' ticks)
    a_start = jobs[0].first_start
    assert a_start is not None and jobs[0].end_time - a_start < 9.0 + 1.0


def test_packing_that_does_not_help_becomes_time_slicing(gandiva: Gandiva) -> None:
    a, b = gandiva.pack_after_measuring(exclusive=True)
    # each job holds the GPU for its whole step: packed, each runs at half its
    # speed alone, so the pair gains nothing and is time-sliced instead
    verdict = gandiva.run_until(lambda: gandiva.events("timeslice"), 4 * QUANTUM + 2, "verdict")
    assert verdict[0].detail["on"] == a and verdict[0].job_id == b
    assert verdict[0].detail["host_speed"] == pytest.approx(0.5, abs=0.02)
    assert "guest_speed" not in verdict[0].detail  # never ran alone: no speed of its own
    gandiva.run_until(lambda: gandiva.events("pause"), QUANTUM + 2, "the pair taking turns")
    jobs = gandiva.ended([a, b], 60)
    assert [j.status for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    assert [j.preemptions for j in jobs] == [0, 0] and len(gandiva.attempts()) == 2
    assert all(e.detail.get("cooperative") for e in gandiva.events("pause")), (
        "jobs that report heartbeats are asked to pause at an iteration boundary"
    )
    # they took turns: never both running, each paused and resumed in place
    assert {e.job_id for e in gandiva.events("pause")} == {a, b}


def test_a_table_pair_that_does_not_help_is_sliced_without_measuring(tmp_path: Path) -> None:
    """What the measurement replaces: jobs that report nothing are judged by the
    table, which knows nothing of them, so the trial ends in time-slicing."""
    cluster = Gandiva(tmp_path)
    a = queue(cluster.store, "alice", cluster.clock, command=["sleep", "40"], gpus=1)
    cluster.run(2.0)
    b = queue(cluster.store, "alice", cluster.clock, command=["sleep", "40"], gpus=1)
    cluster.run_until(lambda: cluster.events("timeslice"), 4 * QUANTUM + 2, "verdict")
    jobs = cluster.ended([a, b], 120)
    assert [j.status for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    assert "host_speed" not in cluster.events("timeslice")[0].detail
    assert not any(e.detail.get("cooperative") for e in cluster.events("pause"))
