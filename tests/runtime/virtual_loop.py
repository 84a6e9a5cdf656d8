"""The scheduler loop in virtual time on a fresh store, as loop tests set it up:
a config, its store, a virtual clock and executor, and the loop recovered on
them (see :mod:`corral.testing.virtual`); and jobs queued as the API stores them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from corral.runtime.jobspec.config import GpuGroup, ServiceConfig
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import AttemptRow, JobRow, Store
from corral.testing.virtual import VirtualClock, VirtualExecutor, run_for, virtual_scheduler
from tests.runtime.harness import make_config


def queue(store: Store, user: str, clock: VirtualClock, **spec: Any) -> int:
    """A job stored as the API stores a submission (by default 3 s of work)."""
    with store.session() as s:
        row = JobRow.queued(
            JobSpec(**{"command": ["sleep", "3"], **spec}),
            user,
            0,
            "Submitted",
            submit_time=clock(),
        )
        s.add(row)
        s.flush()
        return row.id


def states(store: Store) -> dict[int, tuple[str, str | None]]:
    """Every job's status and reason, by id."""
    with store.session() as s:
        return {r.id: (r.status, r.reason) for r in s.query(JobRow).order_by(JobRow.id)}


@dataclass
class VirtualLoop:
    config: ServiceConfig
    store: Store
    clock: VirtualClock
    executor: VirtualExecutor
    scheduler: Scheduler

    def queue(self, user: str = "alice", **spec: Any) -> int:
        return queue(self.store, user, self.clock, **spec)

    def run(self, seconds: float, tick: float = 0.5) -> None:
        run_for(self.scheduler, self.clock, seconds, tick)

    def row(self, job: int) -> JobRow:
        """The job's stored record, detached (readable after its session)."""
        with self.store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None
            s.expunge(row)
            return row

    def attempts(self, job: int) -> list[AttemptRow]:
        """The job's attempts in order, detached."""
        with self.store.session() as s:
            rows = s.scalars(
                select(AttemptRow).where(AttemptRow.job_id == job).order_by(AttemptRow.number)
            ).all()
            for row in rows:
                s.expunge(row)
            return list(rows)

    def event_detail(self, job: int, kind: str) -> Any:
        """The detail of the job's first event of that kind (None: none yet)."""
        from corral.runtime.storage.store import EventRow

        with self.store.session() as s:
            return s.scalars(
                select(EventRow.detail).where(EventRow.job_id == job, EventRow.kind == kind)
            ).first()

    def close(self) -> None:
        self.store.dispose()


def virtual_loop(
    state_dir: Path, policy: str = "fifo", v100s: int = 1, **overrides: Any
) -> VirtualLoop:
    """A loop under ``policy`` (no options unless given) on ``v100s`` V100s, one node."""
    overrides.setdefault("policy_options", {})
    overrides.setdefault("gpus", [GpuGroup(type="V100", count=v100s)])
    config = make_config(state_dir, policy=policy, **overrides)
    store = Store(config.store_url)
    clock = VirtualClock()
    executor = VirtualExecutor(config, clock, store)
    return VirtualLoop(
        config, store, clock, executor, virtual_scheduler(config, store, clock, executor)
    )
