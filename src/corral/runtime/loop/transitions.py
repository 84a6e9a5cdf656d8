"""How jobs change state in the loop: attempts ending (classified and recorded),
submissions, API requests, dependencies and retry back-offs."""

from __future__ import annotations

import signal

from sqlalchemy import func, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, object_session

from corral.model.jobs import JobStatus
from corral.model.state import RUNNING
from corral.policies.admission import ADMIT
from corral.runtime.execution.executor import (
    ExitRecord,
    read_exit_record,
)
from corral.runtime.execution.exits import PARK, Cause, classify, never_started
from corral.runtime.loop.job_book import Phase
from corral.runtime.loop.loop_base import TERMINAL, Attempt, Waiting
from corral.runtime.loop.records import HELD_REASONS
from corral.runtime.loop.sharing import Sharing
from corral.runtime.storage.store import IN_CHUNK, AttemptRow, JobRow, NodeRow, in_chunks
from corral.train.session import STOPPED_EXIT


def dependency_verdict(
    dependency: dict[str, list[int]], known: dict[int, tuple[str, bool]]
) -> tuple[str, str]:
    """'ready', 'wait' or 'never' (with why) for a dependency, from the other jobs'
    (state, has started): Slurm's after, afterany, afterok and afternotok."""
    for kind, ids in dependency.items():
        for other in ids:
            if other not in known:
                return "never", f"job {other} is gone"
            state, started = known[other]
            ended = state in TERMINAL
            if kind == "after" and not (started or ended):
                return "wait", ""
            if kind == "afterany" and not ended:
                return "wait", ""
            if kind == "afterok":
                if ended and state != JobStatus.SUCCEEDED:
                    return "never", f"job {other} ended {state}"
                if not ended:
                    return "wait", ""
            if kind == "afternotok":
                if state == JobStatus.SUCCEEDED:
                    return "never", f"job {other} succeeded"
                if not ended:
                    return "wait", ""
    return "ready", ""


def any_verdict(
    dependency: dict[str, list[int]], known: dict[int, tuple[str, bool]]
) -> tuple[str, str]:
    """Slurm's '?': ready when any one condition is met, never when none can be."""
    verdicts = [dependency_verdict({k: [j]}, known) for k, ids in dependency.items() for j in ids]
    if any(v == "ready" for v, _ in verdicts):
        return "ready", ""
    if verdicts and all(v == "never" for v, _ in verdicts):
        return "never", "; ".join(why for _, why in verdicts)
    return "wait", ""


LIVE = (JobStatus.PENDING, JobStatus.STARTING, JobStatus.RUNNING)
KILL_AGAIN = 2.0
"""Seconds between kills of an attempt that has not ended: a kill finds only the
processes there are, and a job whose launcher had not yet started its process
when the first came (a GPU failed at once, a cancel just after the start) would
otherwise run on, unkilled, to its end."""


class Transitions(Sharing):
    """Attempt ends, arrivals, requests, dependencies, back-offs."""

    def _poll(self, now: float) -> bool:
        if not self.attempts:
            return False
        changed = False
        with self.store.session() as s:
            beats = dict(
                s.execute(
                    select(JobRow.id, JobRow.last_heartbeat).where(
                        JobRow.id.in_(list(self.attempts))
                    )
                ).all()
            )
        for job, a in list(self.attempts.items()):
            if a.ref is not None:  # (a poll that fails is this attempt's trouble alone)
                _, record = self._contained(a, "poll", self.executor.poll, a.ref, a.dir)
            else:
                record = read_exit_record(a.dir) or ExitRecord(
                    None, None, "never started", lost=True
                )
            if record is not None:
                self._ended(a, record, now)
                changed = True
                continue
            beat = beats.get(job)
            if beat is not None:
                self.book[job].beating = True
            if a.stop is None:
                if a.wall_limit is not None and a.ran_for(now) >= a.wall_limit:
                    self._stop(a, "timeout", now)
                    self.book.close(job)
                    changed = True
                elif (
                    beat is not None
                    and not a.paused
                    and now - max(beat, a.resumed_at) > self.config.heartbeat_timeout
                ):
                    self._stop(a, "hung", now, grace=0.0)
            self._force_pauses(a, now)
            if a.kill_at is not None and now >= a.kill_at and a.ref is not None:
                self._contained(a, "kill", self.executor.kill, a.ref)
                a.kill_at = now + KILL_AGAIN
        return changed

    def _stop(self, a: Attempt, why: str, now: float, grace: float | None = None) -> None:
        """Ask an attempt to stop (recorded first, so a restart carries the stop on)."""
        with self.store.session() as s:
            self._set_stop(s, a, why)
            row = s.get(JobRow, a.job)
            if row is not None:
                row.reason = {"preempt": "Preempting", "suspend": "Suspending"}.get(
                    why, why.capitalize()
                )
            self.store.event(s, "stop", a.job, attempt=a.number, why=why)
        self._signal_stop(a, now, grace)

    def _set_stop(self, s: Session, a: Attempt, why: str | None) -> None:
        """What the loop asked of an attempt (stop, park, or None: run), in the
        loop's view and in the store, so a restarted service carries it on."""
        a.stop = why
        att = s.get(AttemptRow, a.id)
        if att is not None:
            att.stop = why

    def _signal_stop(self, a: Attempt, now: float, grace: float | None = None) -> None:
        if a.ref is None:
            return
        grace = self.config.stop_grace if grace is None else grace
        sig = signal.SIGTERM if grace > 0 else signal.SIGKILL
        self._contained(a, "signal", self.executor.signal, a.ref, sig)
        a.kill_at = now + grace
        if a.paused:  # a paused job must run to act on the signal
            self._resume(a, now)

    def _ended(self, a: Attempt, record: ExitRecord, now: float) -> None:
        book = self.book
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
            if self.holders.get(g) == a.job:
                del self.holders[g]
        self._unpair(a.job, now)
        live = self.live
        i = live.index[a.job]
        st = live.state
        placed = rec.phase is Phase.PLACED  # the plan started it again meanwhile
        # still running in the policy's view: it ended by itself, not by a plan's stop
        ours = rec.phase is Phase.RUNNING
        end = min(record.end or now, now)
        with self.store.session() as s:
            row = s.get(JobRow, a.job)
            att = s.get(AttemptRow, a.id)
            assert row is not None and att is not None
            spec = self._spec(row)
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
                        self.config.retry.backoff * 2 ** max(row.failures - 1, 0),
                        self.config.retry.backoff_max,
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
            self._round_task_ended(s, row, now)
            self.store.event(
                s,
                "attempt_end",
                a.job,
                attempt=a.number,
                cause=cause.value,
                detail=detail,
                exit_code=record.exit_code,
            )
        self._sync_drained()

    def _node_requeue(self, s: Session, job: int) -> bool:
        """Whether a job whose node failed under it is requeued without using a retry:
        its first ``retry.node_requeues`` node failures are (this one counted)."""
        lost = s.scalar(
            select(func.count()).where(
                AttemptRow.job_id == job, AttemptRow.cause == Cause.NODE_FAILURE.value
            )
        )
        return (lost or 0) <= self.config.retry.node_requeues

    def _ended_aside(self, a: Attempt, record: ExitRecord, now: float) -> None:
        """The end of an attempt found running at a restart whose job's record is
        unusable: the job ends set aside, its GPUs free once its process is gone."""
        rec = self.book[a.job]
        rec.attempt, rec.beating = None, False
        for g in a.gpus:
            if self.holders.get(g) == a.job:
                del self.holders[g]
        reason = rec.aside
        assert reason is not None
        with self.store.session() as s:
            att = s.get(AttemptRow, a.id)
            if att is not None:
                att.end_time = max(min(record.end or now, now), att.start_time)
                att.exit_code, att.signal = record.exit_code, record.signal
                att.cause, att.detail = Cause.CANCELLED.value, reason
            row = s.get(JobRow, a.job)
            if row is not None:
                self._set_aside(s, row, reason, now)
        self.dirty = True

    def _count_node(self, s: Session, a: Attempt, cause: Cause) -> None:
        """Node failures in a row drain a node; a clean exit resets the count."""
        for name in {self.node_of(g) for g in a.gpus}:
            node = s.get(NodeRow, name)
            if node is None:
                continue
            if cause == Cause.NODE_FAILURE:
                node.failures += 1
                if node.failures >= self.config.drain_after and node.state == "up":
                    node.state = "drained"
                    node.reason = f"{node.failures} node failures in a row"
                    self.store.event(s, "node_drained", None, node=name, failures=node.failures)
            elif cause in (Cause.SUCCEEDED, Cause.PRERUN_OK):
                node.failures = 0

    def _arrivals(self, now: float) -> bool:
        rebuild = False
        histories: dict[str, list[float]] = {}
        with self.store.session() as s:
            rows = self._rows(s, JobRow.id > self.seen)
            for row in rows:
                if self.live.full:
                    rebuild = True
                    break
                if row.status not in TERMINAL and row.id not in self.live.index:
                    try:
                        i = self._add(s, row, histories)
                        if row.status != JobStatus.SUSPENDED and row.held is None:
                            self._enqueue(row, i, now)
                    except SQLAlchemyError:
                        raise  # the store's trouble, not the job's
                    except Exception as exc:  # one job's record never stops the pass
                        self._set_aside(s, row, exc, now)
                self.seen = row.id
        if rebuild:
            self._rebuild()
        return bool(rows)

    def _requests(self, now: float) -> bool:
        """Carry out the API's requests (the API only records them in the store)."""
        live = self.live
        stops: list[tuple[Attempt, str]] = []
        with self.store.session() as s:
            rows = list(s.scalars(select(JobRow).where(JobRow.request.is_not(None))))
            for row in rows:
                request = row.request
                # Cleared only if unchanged: a request the API records meanwhile
                # (a cancel after a suspend) stays for the next pass.
                s.execute(
                    update(JobRow)
                    .where(JobRow.id == row.id, JobRow.request == request)
                    .values(request=None)
                    .execution_options(synchronize_session=False)
                )
                i = live.index.get(row.id)
                if i is None or row.status in TERMINAL:
                    continue
                a = self.attempts.get(row.id)
                self.store.event(s, f"request_{request}", row.id)
                if request == "priority":
                    live.set_priority(i, row.priority + self.share_bonus.get(row.user, 0))
                elif request == "cancel":
                    self.book.close(row.id)
                    if a is not None:
                        stops.append((a, "cancel"))
                    else:
                        row.status, row.end_time, row.gpus = JobStatus.CANCELLED, now, None
                        row.reason, row.held = "cancelled by request", None
                        self._round_task_ended(s, row, now)
                    if row.parent is None and row.status == JobStatus.CANCELLED:
                        self._round_job_cancelled(s, row)  # its tasks, if it runs as rounds
                elif request == "suspend" and row.status != JobStatus.SUSPENDED:
                    self.book.hold(row.id)
                    if a is not None:
                        stops.append((a, "suspend"))
                    else:
                        row.status, row.gpus, row.reason = JobStatus.SUSPENDED, None, "Suspended"
                elif request in ("hold", "hold_admin"):
                    self._hold(s, row, i, "admin" if request == "hold_admin" else "user")
                elif request == "release" and row.held is not None:
                    row.held, row.reason = None, None
                    self._enqueue(row, i, now)
                elif request == "requeue":  # scontrol requeue: stopped, and queued again
                    if a is not None and a.stop is None and live.state.status[i] == RUNNING:
                        self.book.preempt(row.id)
                        stops.append((a, "preempt"))
                elif request in ("resume", "release"):  # (release of a suspended job)
                    if a is not None and a.stop == "suspend":
                        # still checkpointing: it goes back to the queue when it exits
                        a.stop = "preempt"
                        att = s.get(AttemptRow, a.id)
                        if att is not None:
                            att.stop = "preempt"
                        self.book.arrive(row.id, self.rel(now))
                    elif row.status == JobStatus.SUSPENDED:
                        row.status, row.reason = JobStatus.PENDING, None
                        self._enqueue(row, i, now)
        for a, why in stops:
            if why == "cancel" or a.stop in (None, "preempt", PARK):
                self._stop(a, why, now)
        return bool(rows)

    def _hold(self, s: Session, row: JobRow, i: int, holder: str) -> None:
        """scontrol hold: a waiting job stays PENDING but is kept from the policy
        until released. One that started meanwhile is left running (Slurm refuses
        to hold a started job); an admin's hold replaces a user's."""
        rec = self.book[row.id]
        if row.status != JobStatus.PENDING or rec.attempt is not None or rec.phase is Phase.PLACED:
            self.store.event(s, "hold_refused", row.id, why=f"job is {row.status}")
            return
        if row.held == "admin" and holder == "user":
            return
        self.book.hold(row.id)
        row.held, row.reason = holder, HELD_REASONS[holder]
        rec.reason = row.reason

    def _enqueue(self, row: JobRow, i: int, now: float) -> None:
        """Queue a job for the policy, or hold it while its dependency is unmet (a job
        run as rounds is never queued: its tasks are)."""
        spec = self._spec(row)
        if self._is_round_job(row, spec):
            self._hold_round_job(row, i, now)
            return
        limit = spec.array_limit
        waiting = Waiting(
            dependency={kind: list(ids) for kind, ids in spec.dependency.items()},
            any_of=spec.dependency_any,
            singleton=(row.user, row.name) if spec.singleton else None,
            array_job=spec.array_job if limit else None,
            limit=limit,
            begin=spec.begin or 0.0,
        )
        holds = waiting.dependency or waiting.singleton or waiting.limit or waiting.begin > now
        if holds and row.first_start is None:
            self.book.block(row.id, waiting)
            row.reason = "BeginTime" if waiting.begin > now else "Dependency"
            self.book[row.id].reason = row.reason
        else:
            self._admit(row, i, now)

    def _admit(self, row: JobRow, i: int, now: float) -> None:
        """Queue a job for the policy, once its admission rule admits it (see
        :mod:`corral.policies.admission`): a job that has not started yet is asked
        each time it enters the queue. A delayed job waits, its reason saying so,
        until the rule's time to ask again; a refused one ends CANCELLED. A rule
        that raises, or delays to a time already past, admits the job (logged as an
        event): one rule's bug never keeps a job, or the pass, from going on."""
        if row.first_start is not None:
            self.book.arrive(row.id, self.rel(now))
            return
        state = self.live.state
        state.now = self.rel(now)
        session = object_session(row)
        try:
            verdict = self.policy.admit(state, i)
            if verdict.action == "delay" and not (
                verdict.until is not None and verdict.until + self.store.epoch > now
            ):
                raise ValueError(f"a delay to {verdict.until}, not after now ({state.now})")
        except Exception as exc:
            if session is not None:
                why = f"{type(exc).__name__}: {exc}"[:300]
                self.store.event(session, "admission_error", row.id, why=why)
            verdict = ADMIT
        rec = self.book[row.id]
        if verdict.action == "admit":
            self.book.arrive(row.id, state.now)
        elif verdict.action == "delay":
            assert verdict.until is not None
            reason = f"AdmissionDelay ({verdict.reason})" if verdict.reason else "AdmissionDelay"
            self.book.block(
                row.id,
                Waiting(
                    dependency={}, begin=verdict.until + self.store.epoch, admission=reason[:500]
                ),
            )
            row.reason = rec.reason = reason[:500]
        else:
            self.book.close(row.id)
            row.status, row.end_time = JobStatus.CANCELLED, now
            row.reason = rec.reason = f"AdmissionRefused ({verdict.reason})"[:500]
            if session is not None:
                self.store.event(session, "admission_refused", row.id, why=verdict.reason)

    def _dependencies(self, now: float) -> bool:
        """Queue the held jobs whose wait is over; cancel those whose dependency never
        can be met."""
        blocked = self.book.blocked
        if not blocked:
            return False
        wanted = {j for w in blocked.values() for ids in w.dependency.values() for j in ids}
        with self.store.session() as s:
            ended = {j: self.ended_of[j] for j in wanted if j in self.ended_of}
            known = {**ended, **self._job_states(s, sorted(wanted - ended.keys()))}
            self.ended_of = {j: v for j, v in known.items() if v[0] in TERMINAL}
            changed = False
            in_flight: dict[int, int] = {}  # array -> its tasks queued or running
            for job, waiting in sorted(blocked.items()):
                rec = self.book[job]
                verdict, why = self._wait_over(s, job, waiting, known, now, in_flight)
                if verdict not in ("ready", "never"):
                    if verdict != rec.reason and (row := s.get(JobRow, job)):
                        row.reason = rec.reason = verdict
                    continue
                changed = True
                row = s.get(JobRow, job)
                i = self.live.index.get(job)
                if row is None or i is None or row.status in TERMINAL:
                    self.book.close(job)
                    continue
                if verdict == "ready":
                    row.reason = None
                    self._admit(row, i, now)
                    if waiting.array_job is not None:
                        in_flight[waiting.array_job] = in_flight.get(waiting.array_job, 0) + 1
                else:
                    self.book.close(job)
                    row.status, row.end_time = JobStatus.CANCELLED, now
                    row.reason = f"DependencyNeverSatisfied ({why})"
                    self.store.event(s, "dependency_never_satisfied", job, why=why)
                rec.reason = row.reason
        return changed

    @staticmethod
    def _job_states(s: Session, ids: list[int]) -> dict[int, tuple[str, bool]]:
        """(status, has started) of the stored jobs among ``ids`` (sorted): by their
        range in one statement where the ids fill most of it (a job waiting for a whole
        array, or for thousands of ids), else in pieces of one statement's worth."""
        query = select(JobRow.id, JobRow.status, JobRow.first_start)
        if not ids:
            return {}
        if len(ids) > IN_CHUNK and ids[-1] - ids[0] < 4 * len(ids):
            wanted = set(ids)
            rows = s.execute(query.where(JobRow.id.between(ids[0], ids[-1])))
            return {r.id: (r.status, r.first_start is not None) for r in rows if r.id in wanted}
        return {
            r.id: (r.status, r.first_start is not None)
            for chunk in in_chunks(ids)
            for r in s.execute(query.where(JobRow.id.in_(chunk)))
        }

    def _wait_over(
        self,
        s: Session,
        job: int,
        waiting: Waiting,
        known: dict[int, tuple[str, bool]],
        now: float,
        in_flight: dict[int, int],
    ) -> tuple[str, str]:
        """'ready', 'never' (with why), or the reason the job still waits."""
        if waiting.dependency:
            judge = any_verdict if waiting.any_of else dependency_verdict
            verdict, why = judge(waiting.dependency, known)
            if verdict != "ready":
                return ("Dependency", "") if verdict == "wait" else (verdict, why)
        if now < waiting.begin:
            return waiting.admission or "BeginTime", ""
        if waiting.singleton is not None:
            user, name = waiting.singleton
            earlier = s.scalar(
                select(JobRow.id)
                .where(JobRow.user == user, JobRow.name == name, JobRow.id < job)
                .where(JobRow.status.in_([*LIVE, JobStatus.SUSPENDED]))
                .limit(1)
            )
            if earlier is not None:
                return "Dependency", ""
        if waiting.array_job is not None and waiting.limit is not None:
            array = waiting.array_job
            if array not in in_flight:
                tasks = s.scalars(
                    select(JobRow.id)
                    .where(JobRow.spec["array_job"].as_integer() == array)
                    .where(JobRow.status.in_(LIVE))
                ).all()
                in_flight[array] = sum(1 for t in tasks if t not in self.book.blocked)
            if in_flight[array] >= waiting.limit:
                return "JobArrayTaskLimit", ""
        return "ready", ""

    def _end_backoffs(self, now: float) -> bool:
        due = [job for job, t in self.book.backoff.items() if t <= now]
        for job in due:
            if job in self.live.index:
                self.book.arrive(job, self.rel(now))
            else:
                self.book.close(job)
        return bool(due)
