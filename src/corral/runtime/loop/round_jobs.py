"""Jobs run as rounds of tasks, live (hare, sched-allox, sched-homo in ``corral serve``).

Under a policy that plans rounds, a job given as a task
(``task: {factory, steps, round_steps}``) never runs as one process. The
loop keeps it out of the policy's queues (held) and makes each of its rounds
into ``gpus`` one-GPU jobs of their own, its *tasks*: ``NAME.rR.K``, owned
by the same user, with the job's limits, each running ``python -m
corral.train.rounds`` on its share of the round (in a standby worker when
there is one). The policy (:mod:`corral.runtime.loop.round_policy`) places them.

Everything is derived from the store, so a restarted service carries on
where it stopped: a job's current round is its newest tasks' round. When
every task of a round has succeeded, the next round's tasks are made (their
expected time is the mean time the round's tasks took); after the last
round the job succeeds (its result is the checkpoint the last task wrote).
A task that fails for good (its retries spent), times out or is cancelled
ends the job the same way, and its other tasks are cancelled; cancelling
the job cancels its tasks.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from corral.model.jobs import JobStatus
from corral.runtime.jobspec.specs import JobSpec, RoundOf
from corral.runtime.loop.loop_base import TERMINAL, LoopState
from corral.runtime.loop.records import BadRecord, spec_problem
from corral.runtime.loop.round_policy import LiveRounds
from corral.runtime.storage.store import JobRow

ROUND_NAME_ROOM = 100
"""Characters of a job's name its tasks keep (names are at most 128)."""


class RoundJobs:
    """The loop's handling of jobs run as rounds; inert under any other policy."""

    def __init__(self, loop: LoopState) -> None:
        self.loop = loop

    @property
    def rounds_live(self) -> bool:
        return isinstance(self.loop.policy, LiveRounds)

    def is_round_job(self, row: JobRow, spec: JobSpec) -> bool:
        return self.rounds_live and spec.task is not None and row.parent is None

    def hold_round_job(self, row: JobRow, i: int, now: float) -> None:
        """A job run as rounds never enters the policy's queues: its tasks do."""
        self.loop.book.hold(row.id)
        s = object_session(row)
        assert s is not None
        self._round_progress(s, row, now)

    def round_task_started(self, s: Session, row: JobRow, now: float) -> None:
        if row.parent is None:
            return
        job = s.get(JobRow, row.parent)
        if job is not None and job.status == JobStatus.PENDING:
            job.status, job.first_start = JobStatus.RUNNING, job.first_start or now
            self.loop.store.event(s, "start", job.id, rounds=True)

    def round_task_ended(self, s: Session, row: JobRow, now: float) -> None:
        if row.parent is None:
            return
        if row.status in TERMINAL and (rec := self.loop.book.get(row.id)) is not None:
            rec.round_ref = None
        job = s.get(JobRow, row.parent)
        if job is not None:
            self._round_progress(s, job, now)

    def round_job_cancelled(self, s: Session, row: JobRow) -> None:
        """The job is cancelled: so are its tasks not yet over."""
        if not self.rounds_live:
            return
        tasks = s.scalars(
            select(JobRow).where(JobRow.parent == row.id, JobRow.status.not_in(TERMINAL))
        )
        for task in tasks:
            task.request = "cancel"
        self.loop.wake.set()

    def _round_progress(self, s: Session, job: JobRow, now: float) -> None:
        """Move a job run as rounds on: its next round's tasks, or its end."""
        if job.status in TERMINAL:
            return
        spec = self.loop.spec_of(job)
        # a round's tasks are made together, after the round before ended: the
        # newest ``gpus`` tasks are the current round's (no need to read them all)
        current = list(
            s.scalars(
                select(JobRow)
                .where(JobRow.parent == job.id)
                .order_by(JobRow.id.desc())
                .limit(spec.gpus)
            )
        )
        if not current:
            self._make_round(s, job, spec, 0, spec.duration, now)
            return
        refs = [self._round_of(t) for t in current]
        latest = max((ref.round for ref in refs if ref is not None), default=0)
        over = [t for t in current if t.status in TERMINAL and t.status != JobStatus.SUCCEEDED]
        rounds = spec.rounds()
        if over:
            first = over[0]
            cancelled = all(t.status == JobStatus.CANCELLED for t in over)
            job.status = JobStatus.CANCELLED if cancelled else JobStatus.FAILED
            job.reason = f"task {first.name} {first.status.lower()}: {first.reason or ''}".strip()
            job.end_time, job.gpus = now, None
            self._end_round_job(s, job)
            return
        if len(current) < spec.gpus or any(t.status != JobStatus.SUCCEEDED for t in current):
            job.reason = f"round {latest + 1} of {rounds}"
            return
        if latest + 1 >= rounds:
            job.status, job.reason, job.exit_code = JobStatus.SUCCEEDED, None, 0
            job.end_time = max((t.end_time or now) for t in current)
            job.steps = float(rounds * spec.round_steps())
            job.gpus = None
            self._end_round_job(s, job)
            self.loop.store.event(s, "rounds_done", job.id, rounds=rounds)
            return
        took = [t.end_time - t.first_start for t in current if t.end_time and t.first_start]
        per_task = sum(took) / len(took) if took else None
        self._make_round(s, job, spec, latest + 1, per_task, now)
        job.steps = float((latest + 1) * spec.round_steps())

    def _round_of(self, task: JobRow) -> RoundOf | None:
        """The round a task belongs to (None when its stored spec is unusable)."""
        spec = self.loop.book.peek(task.id).spec or spec_problem(task.spec)[0]
        return None if spec is None else spec.round_of

    def _end_round_job(self, s: Session, job: JobRow) -> None:
        self.loop.executor.release_keepers(job.id)  # nothing left for them to hold
        self.loop.book.close(job.id)
        self.loop.book[job.id].reason = job.reason
        self.round_job_cancelled(s, job)

    def _make_round(
        self,
        s: Session,
        job: JobRow,
        spec: JobSpec,
        round_: int,
        expected: float | None,
        now: float,
    ) -> None:
        """Round ``round_``'s tasks, as one-GPU jobs (``expected``: seconds for the whole
        job before the first round, per task after)."""
        rounds = spec.rounds()
        if round_ == 0 and expected is not None:
            expected = expected / rounds
        tasks: list[JobSpec] = []
        for part in range(spec.gpus):
            ref = RoundOf(job=job.id, round=round_, part=part, parts=spec.gpus, rounds=rounds)
            task = spec.model_copy(
                update={
                    "name": f"{spec.name[:ROUND_NAME_ROOM]}.r{round_}.{part}",
                    "command": spec.round_argv(round_, part),
                    "task": None,
                    "gpus": 1,
                    "total_steps": None,
                    "duration": expected,
                    "dependency": {},
                    "array": None,
                    "prerun_steps": 0,
                    "round_of": ref,
                }
            )
            checked, problem = spec_problem(task.model_dump(mode="json"))
            if checked is None:  # the tasks would fail the loop's check: the job cannot run
                job.status, job.end_time, job.gpus = JobStatus.FAILED, now, None
                job.reason = BadRecord(job.id, "task", f"its round's task: {problem}").reason
                self._end_round_job(s, job)
                self.loop.store.event(s, "set_aside", job.id, why=job.reason)
                return
            tasks.append(checked)
        for task in tasks:
            s.add(
                JobRow.queued(
                    task, job.user, job.priority, "Rounds", parent=job.id, submit_time=now
                )
            )
        job.reason = f"round {round_ + 1} of {rounds}"
        self.loop.store.event(s, "round", job.id, round=round_, tasks=spec.gpus)
        self.loop.wake.set()
