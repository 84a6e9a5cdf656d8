"""How jobs change state in the loop: attempts ending (classified and recorded),
submissions, API requests, dependencies and retry back-offs."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from corral.model.jobs import JobStatus
from corral.model.state import RUNNING
from corral.runtime.execution.executor import (
    ExitRecord,
    read_exit_record,
)
from corral.runtime.execution.exits import PARK, Cause, classify, never_started
from corral.runtime.loop.job_book import Attempt, Phase
from corral.runtime.loop.loop_base import TERMINAL, LoopState
from corral.runtime.loop.queueing import Queueing
from corral.runtime.loop.records import HELD_REASONS
from corral.runtime.loop.recovery import Recovery
from corral.runtime.loop.round_jobs import RoundJobs
from corral.runtime.loop.sharing import Sharing
from corral.runtime.loop.stops import Stops
from corral.runtime.storage.store import AttemptRow, JobRow, NodeRow
from corral.train.session import STOPPED_EXIT

REQUESTS_AT_ONCE = 500
"""The API's requests carried out in one transaction (the store's write lock is let
go between them, for the API's writes)."""

KILL_AGAIN = 2.0
"""Seconds between kills of an attempt that has not ended: a kill finds only the
processes there are, and a job whose launcher had not yet started its process
when the first came (a GPU failed at once, a cancel just after the start) would
otherwise run on, unkilled, to its end."""


class Transitions:
    """Attempt ends, arrivals, requests, dependencies, back-offs."""

    def __init__(
        self,
        loop: LoopState,
        sharing: Sharing,
        stops: Stops,
        queueing: Queueing,
        recovery: Recovery,
        rounds: RoundJobs,
    ) -> None:
        self.loop = loop
        self.sharing = sharing
        self.stops = stops
        self.queueing = queueing
        self.recovery = recovery
        self.rounds = rounds

    def poll(self, now: float) -> bool:
        if not self.loop.attempts:
            return False
        changed = False
        with self.loop.store.session() as s:
            beats = dict(
                s.execute(
                    select(JobRow.id, JobRow.last_heartbeat).where(
                        JobRow.id.in_(list(self.loop.attempts))
                    )
                ).all()
            )
        for job, a in list(self.loop.attempts.items()):
            with self.loop.handling(job, "following its process"):
                changed |= self._poll_one(a, beats.get(job), now)
        return changed

    def _interactive(self, job: int) -> bool:
        """Whether the job is an interactive allocation (never suspended)."""
        spec = self.loop.book.peek(job).spec
        return spec is not None and spec.interactive

    def _poll_one(self, a: Attempt, beat: float | None, now: float) -> bool:
        """One attempt: its end recorded, or its deadlines enforced (wall time, a
        silent job's lease, a pause or a kill due). True when the policy should know."""
        if a.ref is not None:  # (a poll that fails is this attempt's trouble alone)
            _, record = self.loop.contained(a, "poll", self.loop.executor.poll, a.ref, a.dir)
        else:
            record = read_exit_record(a.dir) or ExitRecord(None, None, "never started", lost=True)
        if record is not None:
            self._ended(a, record, now)
            return True
        changed = False
        if beat is not None:
            self.loop.book[a.job].beating = True
        if a.stop is None:
            if (
                a.warning is not None
                and not a.warned
                and a.wall_limit is not None
                and a.ran_for(now) >= a.wall_limit - a.warning.lead
            ):
                self.stops.warn(a, now, "time limit")
            if a.wall_limit is not None and a.ran_for(now) >= a.wall_limit:
                self.stops.stop(a, "timeout", now)
                self.loop.book.close(a.job)
                changed = True
            elif (
                beat is not None
                and not a.paused
                and now - max(beat, a.resumed_at) > self.loop.config.heartbeat_timeout
            ):
                self.stops.stop(a, "hung", now, grace=0.0)
        self.sharing.force_pauses(a, now)
        if a.term_at is not None and now >= a.term_at:  # its warning's time is over
            self.stops.signal_stop(a, now)
        if a.kill_at is not None and now >= a.kill_at and a.ref is not None:
            self.loop.contained(a, "kill", self.loop.executor.kill, a.ref)
            a.kill_at = now + KILL_AGAIN
        return changed

    def _ended(self, a: Attempt, record: ExitRecord, now: float) -> None:
        book = self.loop.book
        rec = book[a.job]
        if rec.aside is not None:
            self._ended_aside(a, record, now)
            return
        cause, detail = classify(a.stop, record, a.phase, a.log)
        fault, rec.gpu_fault = rec.gpu_fault, None
        if fault is not None and a.stop == "gpu_failure":
            detail = f"{fault} (the GPU failed under it; {detail})"
        reported = rec.beating
        rec.attempt, rec.beating, rec.stepping_since = None, False, None
        for g in a.gpus:
            if self.loop.holders.get(g) == a.job:
                del self.loop.holders[g]
        self.sharing.unpair(a.job, now)
        live = self.loop.live
        i = live.index[a.job]
        st = live.state
        placed = rec.phase is Phase.PLACED  # the plan started it again meanwhile
        # still running in the policy's view: it ended by itself, not by a plan's stop
        ours = rec.phase is Phase.RUNNING
        end = min(record.end or now, now)
        with self.loop.store.session() as s:
            row = s.get(JobRow, a.job)
            att = s.get(AttemptRow, a.id)
            assert row is not None and att is not None
            spec = self.loop.spec_of(row)
            att.end_time = max(end, att.start_time)
            att.exit_code, att.signal = record.exit_code, record.signal
            att.cause, att.detail = cause.value, detail
            att.steps_end = row.steps
            self._count_node(s, a, cause)
            if not placed:
                row.gpus = None
            row.exit_code = record.exit_code
            if cause in (Cause.SUCCEEDED, Cause.CANCELLED, Cause.TIMEOUT):
                book.close(a.job)
                row.status = {
                    Cause.SUCCEEDED: JobStatus.SUCCEEDED,
                    Cause.CANCELLED: JobStatus.CANCELLED,
                    Cause.TIMEOUT: JobStatus.TIMEOUT,
                }[cause]
                row.end_time = end
                row.gpus = None
                row.reason = None if cause == Cause.SUCCEEDED else detail
            elif cause == Cause.PRERUN_OK:
                row.phase = "main"
                row.status = JobStatus.PENDING
                row.reason = "Resources"
                if ours:
                    book.requeue(a.job, spec.gpus)
                else:
                    st.resize(i, spec.gpus)
                st.nodes_req[i] = spec.nodes or 0  # (its 1-GPU pre-run had no layout)
            elif cause == Cause.PREEMPTED:
                rec.preempted = True
                if ours:  # it left by itself (a SIGTERM from outside, its own stop):
                    book.preempt(a.job)  # queued again, or the policy would wait on it forever
                if record.exit_code == STOPPED_EXIT:
                    st.saved_on_stop(i)  # it left with a checkpoint: its run was not lost
                if not reported and spec.task is not None:
                    # stopped while still starting (it had not reported): its next
                    # start is given twice as long before its minimum run counts
                    rec.startup = max(rec.startup, 2 * (end - a.started))
                if not a.parked:  # a parked job's was counted when it was parked
                    row.preemptions += 1
                row.status = JobStatus.STARTING if placed else JobStatus.PENDING
                row.reason = None if placed else "Preempted"
            elif cause == Cause.SUSPENDED:
                row.status = JobStatus.SUSPENDED
                row.reason = "Suspended"
            else:
                lost_node = cause == Cause.NODE_FAILURE
                requeued = lost_node and spec.requeue and self._node_requeue(s, a.job)
                if not requeued:  # (a node's failure is not the job's, as Slurm requeues)
                    row.failures += 1
                again = never_started(record)  # a retry would fail the same way
                kept_out = lost_node and not spec.requeue
                final = not requeued and (
                    row.failures > spec.max_retries
                    or (a.phase == "prerun" and cause == Cause.USER_ERROR)
                    or again
                    or kept_out
                )
                row.gpus = None
                if final:
                    book.close(a.job)
                    row.status = JobStatus.FAILED
                    row.end_time = end
                    row.reason = f"{cause.value}: {detail}"
                    if kept_out:
                        row.reason += " (not requeued: the job asked --no-requeue)"
                    elif again and row.failures <= spec.max_retries:
                        row.reason += " (not retried: a retry would fail the same way)"
                else:
                    delay = min(
                        self.loop.config.retry.backoff * 2 ** max(row.failures - 1, 0),
                        self.loop.config.retry.backoff_max,
                    )
                    row.eligible_at = now + delay
                    book.back_off(a.job, row.eligible_at)
                    row.status = JobStatus.PENDING
                    row.reason = (
                        f"BackOff (requeued after node_failure, {delay:.0f}s; retries not used)"
                        if requeued
                        else f"BackOff (retry {row.failures} of {spec.max_retries} after "
                        f"{cause.value}, {delay:.0f}s)"
                    )
            rec.reason = row.reason
            if row.status in TERMINAL:
                rec.startup = 0.0
            self.rounds.round_task_ended(s, row, now)
            self.loop.store.event(
                s,
                "attempt_end",
                a.job,
                attempt=a.number,
                cause=cause.value,
                detail=detail,
                exit_code=record.exit_code,
            )
        self.recovery.sync_drained()

    def _node_requeue(self, s: Session, job: int) -> bool:
        """Whether a job whose node failed under it is requeued without using a retry:
        its first ``retry.node_requeues`` node failures are (this one counted)."""
        lost = s.scalar(
            select(func.count()).where(
                AttemptRow.job_id == job, AttemptRow.cause == Cause.NODE_FAILURE.value
            )
        )
        return (lost or 0) <= self.loop.config.retry.node_requeues

    def _ended_aside(self, a: Attempt, record: ExitRecord, now: float) -> None:
        """The end of an attempt found running at a restart whose job's record is
        unusable: the job ends set aside, its GPUs free once its process is gone."""
        rec = self.loop.book[a.job]
        rec.attempt, rec.beating = None, False
        for g in a.gpus:
            if self.loop.holders.get(g) == a.job:
                del self.loop.holders[g]
        reason = rec.aside
        assert reason is not None
        with self.loop.store.session() as s:
            att = s.get(AttemptRow, a.id)
            if att is not None:
                att.end_time = max(min(record.end or now, now), att.start_time)
                att.exit_code, att.signal = record.exit_code, record.signal
                att.cause, att.detail = Cause.CANCELLED.value, reason
            row = s.get(JobRow, a.job)
            if row is not None:
                self.recovery.set_aside(s, row, reason, now)
                # a round's task: its job learns that the round failed (it waited for
                # ever on a task set aside while it ran)
                self.rounds.round_task_ended(s, row, now)
        self.loop.dirty = True

    def _count_node(self, s: Session, a: Attempt, cause: Cause) -> None:
        """Node failures in a row drain a node; a clean exit resets the count."""
        for name in {self.loop.node_of(g) for g in a.gpus}:
            node = s.get(NodeRow, name)
            if node is None:
                continue
            if cause == Cause.NODE_FAILURE:
                node.failures += 1
                if node.failures >= self.loop.config.drain_after and node.state == "up":
                    node.state = "drained"
                    node.reason = f"{node.failures} node failures in a row"
                    self.loop.store.event(
                        s, "node_drained", None, node=name, failures=node.failures
                    )
            elif cause in (Cause.SUCCEEDED, Cause.PRERUN_OK):
                node.failures = 0

    def arrivals(self, now: float) -> bool:
        rebuild = False
        histories: dict[str, list[float]] = {}
        with self.loop.store.session() as s:
            rows = self.recovery.rows(s, JobRow.id > self.loop.seen)
            for row in rows:
                if self.loop.live.full:
                    rebuild = True
                    break
                if row.status not in TERMINAL and row.id not in self.loop.live.index:
                    try:
                        i = self.recovery.add(s, row, histories)
                        if row.status != JobStatus.SUSPENDED and row.held is None:
                            self.queueing.enqueue(row, i, now)
                    except SQLAlchemyError:
                        raise  # the store's trouble, not the job's
                    except Exception as exc:  # one job's record never stops the pass
                        self.recovery.set_aside(s, row, exc, now)
                self.loop.seen = row.id
        if rebuild:
            self.recovery.rebuild()
        return bool(rows)

    def requests(self, now: float) -> bool:
        """Carry out the API's requests (the API only records them in the store)."""
        stops: list[tuple[Attempt, str]] = []
        with self.loop.store.session() as s:
            asked = list(s.scalars(select(JobRow.id).where(JobRow.request.is_not(None))))
        # A few hundred at a time, each in a transaction of its own: ten thousand
        # cancelled in one (scancel -u) held the store's write lock for ten seconds,
        # and every submission of every user waited, then failed.
        for k in range(0, len(asked), REQUESTS_AT_ONCE):
            with self.loop.store.session() as s:
                rows = list(
                    s.scalars(
                        select(JobRow).where(
                            JobRow.id.in_(asked[k : k + REQUESTS_AT_ONCE]),
                            JobRow.request.is_not(None),
                        )
                    )
                )
                self._clear_requests(s, rows)
                for row in rows:
                    self._carry_out(s, row, now, stops)
        for a, why in stops:
            if why == "cancel" or a.stop in (None, "preempt", PARK):
                with self.loop.handling(a.job, f"stopping it ({why})"):
                    self.stops.stop(a, why, now, asked=True)  # (a user's: no warning's lead)
        return bool(asked)

    @staticmethod
    def _clear_requests(s: Session, rows: list[JobRow]) -> None:
        """Clear the requests read, each only if unchanged: a request the API records
        meanwhile (a cancel after a suspend) stays for the next pass. One statement a
        kind of request (a statement a job was most of the time of ten thousand)."""
        by_request: dict[str, list[int]] = {}
        for row in rows:
            by_request.setdefault(str(row.request), []).append(row.id)
        for request, ids in by_request.items():
            s.execute(
                update(JobRow)
                .where(JobRow.id.in_(ids), JobRow.request == request)
                .values(request=None)
                .execution_options(synchronize_session=False)
            )

    def _carry_out(
        self, s: Session, row: JobRow, now: float, stops: list[tuple[Attempt, str]]
    ) -> None:
        """One job's request (its stop, if any, added to ``stops``)."""
        live = self.loop.live
        request = row.request
        with self.loop.handling(row.id, f"carrying out its {request} request"):
            i = live.index.get(row.id)
            if i is None or row.status in TERMINAL:
                return
            a = self.loop.attempts.get(row.id)
            ending = self.loop.book.peek(row.id).phase is Phase.ENDED
            if ending and request != "cancel":
                # its end is under way (a timeout, a cancel): only a cancel
                # still counts (it names the end); the rest would revive it
                self.loop.store.event(s, "request_ignored", row.id, request=request)
                return
            self.loop.store.event(s, f"request_{request}", row.id)
            if request == "priority":
                live.set_priority(i, row.priority + self.loop.share_bonus.get(row.user, 0))
            elif request == "cancel":
                self.loop.book.close(row.id)
                if a is not None:
                    stops.append((a, "cancel"))
                else:
                    row.status, row.end_time, row.gpus = JobStatus.CANCELLED, now, None
                    row.reason, row.held = "cancelled by request", None
                    self.rounds.round_task_ended(s, row, now)
                if row.parent is None and row.status == JobStatus.CANCELLED:
                    self.rounds.round_job_cancelled(s, row)  # its tasks, if it runs as rounds
            elif request == "suspend" and self._interactive(row.id):
                self.loop.store.event(
                    s, "request_ignored", row.id, request=request, why="interactive allocation"
                )
            elif request == "suspend" and row.status != JobStatus.SUSPENDED:
                self.loop.book.hold(row.id)
                if a is not None:
                    stops.append((a, "suspend"))
                else:
                    row.status, row.gpus, row.reason = (
                        JobStatus.SUSPENDED,
                        None,
                        "Suspended",
                    )
            elif request in ("hold", "hold_admin"):
                self._hold(s, row, i, "admin" if request == "hold_admin" else "user")
            elif request == "release" and row.held is not None:
                # (a held job suspended since: release resumes it too, as
                # release of a suspended job does; it is queued PENDING)
                row.held, row.reason = None, None
                if row.status == JobStatus.SUSPENDED:
                    row.status = JobStatus.PENDING
                self.queueing.enqueue(row, i, now)
            elif request == "requeue":  # scontrol requeue: stopped, and queued again
                if a is not None and a.stop is None and live.state.status[i] == RUNNING:
                    self.loop.book.preempt(row.id)
                    stops.append((a, "preempt"))
            elif request in ("resume", "release"):  # (release of a suspended job)
                if a is not None and a.stop == "suspend":
                    # still checkpointing: it goes back to the queue when it exits
                    a.stop = "preempt"
                    att = s.get(AttemptRow, a.id)
                    if att is not None:
                        att.stop = "preempt"
                    self.loop.book.arrive(row.id, self.loop.rel(now))
                elif row.status == JobStatus.SUSPENDED and row.held is not None:
                    # resumed, but still held (suspended while it waited): a release
                    row.status = JobStatus.PENDING
                    row.reason = self.loop.book[row.id].reason = HELD_REASONS[row.held]
                elif row.status == JobStatus.SUSPENDED:
                    row.status, row.reason = JobStatus.PENDING, None
                    self.queueing.enqueue(row, i, now)

    def _hold(self, s: Session, row: JobRow, i: int, holder: str) -> None:
        """scontrol hold: a waiting job stays PENDING but is kept from the policy
        until released. One that started meanwhile is left running (Slurm refuses
        to hold a started job); an admin's hold replaces a user's."""
        rec = self.loop.book[row.id]
        if row.status != JobStatus.PENDING or rec.attempt is not None or rec.phase is Phase.PLACED:
            self.loop.store.event(s, "hold_refused", row.id, why=f"job is {row.status}")
            return
        if row.held == "admin" and holder == "user":
            return
        self.loop.book.hold(row.id)
        row.held, row.reason = holder, HELD_REASONS[holder]
        rec.reason = row.reason

    def end_backoffs(self, now: float) -> bool:
        due = [job for job, t in self.loop.book.backoff.items() if t <= now]
        for job in due:
            if job in self.loop.live.index:
                self.loop.book.arrive(job, self.loop.rel(now))
            else:
                self.loop.book.close(job)
        return bool(due)
