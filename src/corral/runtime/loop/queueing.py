"""Queueing a job for the policy: what sbatch told it to wait for (a dependency,
a begin time, a singleton's namesakes, its array's throttle) and the policy's
admission rule, checked each pass until the wait is over."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from corral.model.jobs import JobStatus
from corral.policies.admission import ADMIT
from corral.runtime.loop.job_book import Phase, Waiting
from corral.runtime.loop.loop_base import TERMINAL, LoopState
from corral.runtime.loop.round_jobs import RoundJobs
from corral.runtime.storage.store import IN_CHUNK, ArchivedJobRow, JobRow, in_chunks


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


class Queueing:
    """Jobs into the policy's queue once their wait is over (a stage of the loop)."""

    def __init__(self, loop: LoopState, rounds: RoundJobs) -> None:
        self.loop = loop
        self.rounds = rounds
        self.begun: dict[int, Waiting] = {}
        """Jobs queued once their begin time came, not started yet -> what they waited
        for: a clock stepped back puts such a job's begin time ahead again, and it
        waits again (Slurm compares ``--begin`` with the clock at each start)."""

    def enqueue(self, row: JobRow, i: int, now: float) -> None:
        """Queue a job for the policy, or hold it while its dependency is unmet (a job
        run as rounds is never queued: its tasks are)."""
        spec = self.loop.spec_of(row)
        if self.rounds.is_round_job(row, spec):
            self.rounds.hold_round_job(row, i, now)
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
        if limit and row.first_start is not None:
            # a task back from a suspension or a hold: what it waited for was met when it
            # first started, but its array's throttle counts it again only from now
            waiting = Waiting(dependency={}, array_job=spec.array_job, limit=limit)
        if holds and (row.first_start is None or waiting.limit):
            self.loop.book.block(row.id, waiting)
            row.reason = "BeginTime" if waiting.begin > now else "Dependency"
            self.loop.book[row.id].reason = row.reason
        else:
            if waiting.begin and row.first_start is None:
                self.begun[row.id] = waiting
            self._admit(row, i, now)

    def _admit(self, row: JobRow, i: int, now: float) -> None:
        """Queue a job for the policy, once its admission rule admits it (see
        :mod:`corral.policies.admission`): a job that has not started yet is asked
        each time it enters the queue. A delayed job waits, its reason saying so,
        until the rule's time to ask again; a refused one ends CANCELLED. A rule
        that raises, or delays to a time already past, admits the job (logged as an
        event): one rule's bug never keeps a job, or the pass, from going on."""
        state = self.loop.live.state
        if row.first_start is not None or int(state.gpus[i]) == 0:
            # (a CPU-only job is never the policy's: see runtime.loop.cpu_jobs)
            self.loop.book.arrive(row.id, self.loop.rel(now))
            return
        state.now = self.loop.rel(now)
        session = object_session(row)
        try:
            verdict = self.loop.policy.admit(state, i)
            if verdict.action == "delay" and not (
                verdict.until is not None and verdict.until + self.loop.store.epoch > now
            ):
                raise ValueError(f"a delay to {verdict.until}, not after now ({state.now})")
        except Exception as exc:
            if session is not None:
                why = f"{type(exc).__name__}: {exc}"[:300]
                self.loop.store.event(session, "admission_error", row.id, why=why)
            verdict = ADMIT
        rec = self.loop.book[row.id]
        if verdict.action == "admit":
            self.loop.book.arrive(row.id, state.now)
        elif verdict.action == "delay":
            assert verdict.until is not None
            reason = f"AdmissionDelay ({verdict.reason})" if verdict.reason else "AdmissionDelay"
            self.loop.book.block(
                row.id,
                Waiting(
                    dependency={},
                    begin=verdict.until + self.loop.store.epoch,
                    admission=reason[:500],
                ),
            )
            row.reason = rec.reason = reason[:500]
        else:
            self.loop.book.close(row.id)
            row.status, row.end_time = JobStatus.CANCELLED, now
            row.reason = rec.reason = f"AdmissionRefused ({verdict.reason})"[:500]
            if session is not None:
                self.loop.store.event(session, "admission_refused", row.id, why=verdict.reason)

    def begins_ahead_again(self, now: float) -> bool:
        """Take back from the policy's queue the jobs whose begin time is ahead again
        (the clock stepped back after they were queued, or placed and not launched
        yet, as a job waiting for a leaver's GPUs is): they wait for it again."""
        if not self.begun:
            return False
        changed = False
        book = self.loop.book
        for job, waiting in list(self.begun.items()):
            rec = book.get(job)
            waits = rec is not None and rec.phase in (Phase.QUEUED, Phase.PLACED)
            if rec is None or not waits or rec.attempt is not None:
                del self.begun[job]  # started, held, ended or gone: its wait is over
            elif now < waiting.begin:
                del self.begun[job]
                if rec.phase is Phase.PLACED:
                    self._unplace(job)
                book.block(job, waiting)  # (its reason is written as the blocked are read)
                changed = True
        return changed

    def _unplace(self, job: int) -> None:
        """A job the plan placed, not launched yet, back to waiting (PENDING again)."""
        book = self.loop.book
        book.preempt(job)
        book[job].packed_on = None
        with self.loop.store.session() as s:
            row = s.get(JobRow, job)
            if row is not None and row.status not in TERMINAL:
                row.status, row.gpus = JobStatus.PENDING, None

    def dependencies(self, now: float) -> bool:
        """Queue the held jobs whose wait is over; cancel those whose dependency never
        can be met."""
        changed = self.begins_ahead_again(now)
        blocked = self.loop.book.blocked
        if not blocked:
            return changed
        wanted = {j for w in blocked.values() for ids in w.dependency.values() for j in ids}
        with self.loop.store.session() as s:
            ended = {j: self.loop.ended_of[j] for j in wanted if j in self.loop.ended_of}
            known = {**ended, **self._job_states(s, sorted(wanted - ended.keys()))}
            self.loop.ended_of = {j: v for j, v in known.items() if v[0] in TERMINAL}
            in_flight: dict[int, int] = {}  # array -> its tasks queued or running
            for job, waiting in sorted(blocked.items()):
                with self.loop.handling(job, "checking what it waits for"):
                    rec = self.loop.book[job]
                    verdict, why = self._wait_over(s, job, waiting, known, now, in_flight)
                    if verdict not in ("ready", "never"):
                        if verdict != rec.reason and (row := s.get(JobRow, job)):
                            row.reason = rec.reason = verdict
                        continue
                    changed = True
                    row = s.get(JobRow, job)
                    i = self.loop.live.index.get(job)
                    if row is None or i is None or row.status in TERMINAL:
                        self.loop.book.close(job)
                        continue
                    if verdict == "ready":
                        row.reason = None
                        if waiting.begin and row.first_start is None:
                            self.begun[job] = waiting
                        self._admit(row, i, now)
                        if waiting.array_job is not None:
                            in_flight[waiting.array_job] = in_flight.get(waiting.array_job, 0) + 1
                    else:
                        self.loop.book.close(job)
                        row.status, row.end_time = JobStatus.CANCELLED, now
                        row.reason = f"DependencyNeverSatisfied ({why})"
                        self.loop.store.event(s, "dependency_never_satisfied", job, why=why)
                    rec.reason = row.reason
        return changed

    @staticmethod
    def _job_states(s: Session, ids: list[int]) -> dict[int, tuple[str, bool]]:
        """(status, has started) of the stored jobs among ``ids`` (sorted): by their
        range in one statement where the ids fill most of it (a job waiting for a whole
        array, or for thousands of ids), else in pieces of one statement's worth."""
        if not ids:
            return {}
        out = Queueing._states_in(s, JobRow, ids)
        gone = [j for j in ids if j not in out]  # (archived: ended long ago, as it ended)
        if gone:
            out.update(Queueing._states_in(s, ArchivedJobRow, gone))
        return out

    @staticmethod
    def _states_in(
        s: Session, table: type[JobRow] | type[ArchivedJobRow], ids: list[int]
    ) -> dict[int, tuple[str, bool]]:
        """(status, has started) of ``table``'s rows among ``ids`` (sorted)."""
        query = select(table.id, table.status, table.first_start)
        if len(ids) > IN_CHUNK and ids[-1] - ids[0] < 4 * len(ids):
            wanted = set(ids)
            rows = s.execute(query.where(table.id.between(ids[0], ids[-1])))
            return {r.id: (r.status, r.first_start is not None) for r in rows if r.id in wanted}
        return {
            r.id: (r.status, r.first_start is not None)
            for chunk in in_chunks(ids)
            for r in s.execute(query.where(table.id.in_(chunk)))
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
                in_flight[array] = sum(1 for t in tasks if t not in self.loop.book.blocked)
            if in_flight[array] >= waiting.limit:
                return "JobArrayTaskLimit", ""
        return "ready", ""
