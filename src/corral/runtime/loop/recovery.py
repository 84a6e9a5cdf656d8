"""Rebuilding the loop's view from the store after a start or a crash: nodes,
adopted processes, queued and held jobs."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.exc import SQLAlchemyError, StatementError
from sqlalchemy.orm import Session

from corral.model.jobs import JobStatus
from corral.model.state import RUNNING
from corral.runtime.execution.executor import (
    ProcessRef,
)
from corral.runtime.execution.exits import PARK
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.estimates import ESTIMATED, LossHistory, expected_duration
from corral.runtime.loop.job_book import Attempt
from corral.runtime.loop.live_state import DEFAULT_VC, MIN_CAPACITY, LiveJobs
from corral.runtime.loop.loop_base import TERMINAL, LoopState, Turns, cluster_from_slots
from corral.runtime.loop.queueing import Queueing
from corral.runtime.loop.records import BadRecord, aside_reason
from corral.runtime.loop.round_jobs import RoundJobs
from corral.runtime.loop.stops import Stops
from corral.runtime.storage.store import EventRow, JobRow, NodeRow, in_chunks

KEPT = (
    "wake",
    "_cv",
    "_passes",
    "errors",
    "faults",
    "faulted",
    "last_fault",
    "metrics",
    "inbox",
    "awaiting",
    "answers",
    "identities",
)
"""What a resync keeps of the loop: what other threads wait on or post to, what
they read, its counters, and the users' Unix identities (checked at the start:
a resync reads the store again, not the accounts, each a Python started as the
user to check)."""


class Recovery:
    """Recovery and resynchronisation from the store."""

    def __init__(
        self, loop: LoopState, stops: Stops, queueing: Queueing, rounds: RoundJobs
    ) -> None:
        self.loop = loop
        self.stops = stops
        self.queueing = queueing
        self.rounds = rounds

    def _restore_turns(self, s: Session) -> None:
        """Time-sliced groups go on taking turns after a restart: a job packed on
        another whose last word on sharing was a time slice (a ``timeslice`` event
        after its ``packed`` one) joins its holder's turns again, the holder's
        turn first. (Every adopted process is resumed; the next turn pauses all
        but one.)"""
        packed = dict(self.loop.book.packed_on)
        if not packed:
            return
        last: dict[int, tuple[str, dict[str, Any]]] = {}
        for job, kind, detail in s.execute(
            select(EventRow.job_id, EventRow.kind, EventRow.detail)
            .where(EventRow.kind.in_(("packed", "timeslice")), EventRow.job_id.in_(list(packed)))
            .order_by(EventRow.id)
        ):
            if job is not None:
                last[job] = (kind, detail or {})
        for guest, host in packed.items():
            kind, detail = last.get(guest, ("packed", {}))
            if kind != "timeslice":
                continue
            t = self.loop.turns.get(host)
            if t is None:
                try:  # (a damaged event must not stop a restart: the default quantum)
                    quantum = float(detail.get("quantum", 60.0))
                except (TypeError, ValueError):
                    quantum = 60.0
                if not 0.0 < quantum < float("inf"):
                    quantum = 60.0
                t = self.loop.turns[host] = Turns([host], quantum, turn=host)
            if guest not in t.members:
                t.members.append(guest)

    def _hosts_of(self, s: Session, attempts: dict[int, Any]) -> dict[int, int]:
        """guest -> host among the open ``attempts`` (by job) sharing GPUs, the GPUs'
        holders entered in ``holders``. The holder of a GPU set is the job launched
        on it unpacked; where that one has left, the guest packed first (the one a
        host's end hands its GPUs to, :meth:`Sharing.unpair`); the others are packed
        on it. (Taken in the order of the jobs' ids, a guest relaunched on the GPUs
        of a job with a higher id became their holder, and a group taking turns was
        recovered as two, running at once.)"""
        packed = self._packed_at_launch(s, attempts)
        hosts: dict[int, int] = {}
        holders = self.loop.holders
        for job in sorted(attempts, key=lambda j: (j in packed, packed.get(j, 0), j)):
            gpus = tuple(attempts[job].gpus)
            sharing = {holders[g] for g in gpus if g in holders}
            if len(sharing) == 1:
                hosts[job] = sharing.pop()
            else:
                holders.update({g: job for g in gpus})
        return hosts

    @staticmethod
    def _packed_at_launch(s: Session, attempts: dict[int, Any]) -> dict[int, int]:
        """job -> the id of the ``packed`` event of the placement its open attempt
        was launched from, for each of ``attempts`` launched packed on another job.
        (A placement records ``packed``, where packed, then ``allocated``; its launch
        records ``start`` with the attempt's number.)"""
        pending: dict[int, int] = {}
        placed: dict[int, int | None] = {}
        found: dict[int, int] = {}
        for chunk in in_chunks(sorted(attempts)):
            events = s.execute(
                select(EventRow.id, EventRow.job_id, EventRow.kind, EventRow.detail)
                .where(EventRow.kind.in_(("packed", "allocated", "start")))
                .where(EventRow.job_id.in_(chunk))
                .order_by(EventRow.id)
            )
            for event, job, kind, detail in events:
                if kind == "packed":
                    pending[job] = event
                elif kind == "allocated":
                    placed[job] = pending.pop(job, None)
                else:
                    at = placed.pop(job, None)
                    number = detail.get("attempt") if isinstance(detail, dict) else None
                    if at is not None and number == attempts[job].number:
                        found[job] = at
        return found

    def recover(self) -> None:
        """Rebuild the scheduler's view from the store and adopt live processes."""
        now = self.loop.clock()
        with self.loop.store.session() as s:
            self._sync_nodes(s)
            self.loop.seen = s.scalar(select(func.max(JobRow.id))) or 0
            rows = self._live_rows(s)
            if len(rows) >= self.loop.live.capacity:  # a long queue: room for it and more
                self.loop.live = self._live_for(len(rows))
            open_attempts = {a.job_id: a for a in self.loop.store.open_attempts(s)}
            hosts = self._hosts_of(
                s, {r.id: open_attempts[r.id] for r in rows if r.id in open_attempts}
            )
            for row in rows:
                rec = self.loop.book.enter(row.id)
                try:
                    spec: JobSpec | None = self.loop.spec_of(row)
                except BadRecord as bad:
                    spec = None
                    rec.aside = bad.reason
                att = open_attempts.get(row.id)
                if att is not None:
                    ref = (
                        ProcessRef(att.pid, att.pid_start or "")
                        if att.pid
                        else self.loop.executor.pid_from(Path(att.dir))
                    )
                    alive = ref is not None and self.loop.executor.adopt(ref)
                    a = rec.attempt = Attempt(
                        row.id,
                        att.id,
                        att.number,
                        att.phase,
                        ref,
                        tuple(att.gpus),
                        Path(att.dir),
                        att.start_time,
                        None if spec is None else spec.wall_time,
                        stop=att.stop if spec is not None else "cancel",
                        parked=att.stop == PARK and spec is not None,
                    )
                    if spec is not None:
                        a.warning, a.batch_script = spec.warning(), spec.script_path is not None
                    if a.parked:  # a parked job is stopped, to resume from its checkpoint
                        self.stops.set_stop(s, a, "preempt")
                    # jobs packed on these GPUs (whether or not a guest's process still
                    # runs: its attempt holds them until its end is recorded)
                    rec.packed_on = hosts.get(row.id)
                    row.status = JobStatus.RUNNING
                    self.loop.store.event(
                        s, "adopted" if alive else "found_ended", row.id, attempt=att.number
                    )
                elif (
                    spec is not None
                    and row.status in (JobStatus.STARTING, JobStatus.RUNNING)
                    and not self.rounds.is_round_job(row, spec)
                ):
                    row.status = JobStatus.PENDING
                    row.gpus = None
                    row.reason = "Requeued (service restarted)"
                    self.loop.store.event(
                        s, "requeued", row.id, why="service restarted before launch"
                    )
            self._load(s, rows)
            self._restore_turns(s)
        histories = self._histories(now)
        for a in self.loop.attempts.values():
            since, a.paused_total, a.warned = histories.get((a.job, a.number), (None, 0.0, False))
            if a.ref is None:
                continue
            self.loop.executor.signal(
                a.ref, signal.SIGCONT
            )  # one paused for a time slice runs again
            if a.stop is not None:  # a stop in progress goes on, its grace not begun again
                self.stops.signal_stop(a, now)
                if since is not None and a.kill_at is not None:
                    a.kill_at = min(a.kill_at, max(since + self.loop.config.stop_grace, now))
        if self.loop.turns:  # time-sliced groups: all but the turn's job paused again now,
            # not a pass later (each adopted process was resumed above)
            self.loop.turn_wakeup = self.stops.sharing.take_turns(now)
        self.sync_drained()
        self.loop.dirty = True

    def _histories(self, now: float) -> dict[tuple[int, int], tuple[float | None, float, bool]]:
        """(job, attempt) -> (when its stop was asked, seconds it spent paused, whether
        the warning of its time limit was sent), for the attempts adopted at a
        restart, from their ``stop``, ``pause``, ``resume`` and ``warned`` events (and
        ``adopted``: each restart resumed them). Without them a restarted service
        would grant a stop in progress a whole grace again (a job past its wall time
        outliving it by a grace at every restart), count a time-sliced job's pauses
        against its wall time, and warn a job of its time limit twice."""
        numbers = {a.job: a.number for a in self.loop.attempts.values()}
        marks: dict[tuple[int, int], list[tuple[float, int, str]]] = {}
        with self.loop.store.session() as s:
            for chunk in in_chunks(sorted(numbers)):
                rows = s.execute(
                    select(
                        EventRow.job_id, EventRow.time, EventRow.id, EventRow.kind, EventRow.detail
                    )
                    .where(EventRow.kind.in_(("stop", "pause", "resume", "adopted", "warned")))
                    .where(EventRow.job_id.in_(chunk))
                )
                for job, at, order, kind, detail in rows:
                    number = detail.get("attempt") if isinstance(detail, dict) else None
                    if job is not None and isinstance(number, int) and number == numbers[job]:
                        if kind == "warned" and detail.get("before") != "time limit":
                            continue
                        marks.setdefault((job, number), []).append((at, order, kind))
        out: dict[tuple[int, int], tuple[float | None, float, bool]] = {}
        for key, seen in marks.items():
            stop: float | None = None
            paused, since, warned = 0.0, None, False
            for at, _, kind in sorted(seen, key=lambda m: m[1]):
                if kind == "warned":
                    warned = True
                elif kind == "stop":
                    stop = at if stop is None else min(stop, at)
                elif kind == "pause" and since is None:
                    since = at
                elif kind in ("resume", "adopted") and since is not None:  # (a restart
                    # resumes every adopted process)
                    paused, since = paused + max(at - since, 0.0), None
            if since is not None:  # paused when the service stopped: resumed now
                paused += max(now - since, 0.0)
            out[key] = (stop, paused, warned)
        return out

    def _live_rows(self, s: Session) -> list[JobRow]:
        return self.rows(s, JobRow.status.not_in(TERMINAL))

    def rows(self, s: Session, where: ColumnElement[bool]) -> list[JobRow]:
        """The jobs matching ``where``, by id; a row that cannot even be loaded (a
        stored value its column cannot decode) is repaired first (:meth:`_repair`),
        and the loop's check then decides about its job."""
        try:
            return list(s.scalars(select(JobRow).where(where).order_by(JobRow.id)))
        except (ValueError, TypeError, ArithmeticError):
            pass
        rows = []
        for job in s.scalars(select(JobRow.id).where(where).order_by(JobRow.id)).all():
            self._repair(s, job)  # what does not decode is reset; the row is then checked
            row = s.get(JobRow, job)
            if row is not None:
                rows.append(row)
        return rows

    def _repair(self, s: Session, job: int) -> list[str]:
        """Reset the columns of a job's row whose stored bytes do not decode (so the row
        loads, and the loop's check then decides about the job); their names."""
        values: dict[str, Any] = {}
        for column, blank in (
            ("spec", {}),
            ("gpus", None),
            ("loss_curve", None),
            ("progress", None),
        ):
            try:  # each alone, in a session of its own (reads only)
                with self.loop.store.session() as probe:
                    probe.execute(select(getattr(JobRow, column)).where(JobRow.id == job)).all()
            except (ValueError, TypeError, StatementError):
                values[column] = blank
        if values:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job)
                .values(values)
                .execution_options(synchronize_session=False)
            )
            s.expire_all()
            self.loop.store.event(s, "repaired", job, columns=sorted(values))
        return sorted(values)

    def _load(self, s: Session, rows: list[JobRow]) -> None:
        """Give every live job a slot and put it where it belongs (queue, running, held)."""
        now = self.loop.clock()
        live = self.loop.live
        attained = self.loop.store.closed_attempt_seconds(s, [r.id for r in rows], per_gpu=True)
        histories: dict[str, list[float]] = {}
        book = self.loop.book
        holding: dict[int, int] = {}  # GPU -> the adopted job that holds it in the state
        # holders before the jobs packed on them (a guest may have the lower id)
        for row in sorted(rows, key=lambda r: book.enter(r.id).packed_on is not None):
            rec = book.enter(row.id)
            a = rec.attempt
            if a is not None and rec.aside is not None:
                continue  # still running: it is stopped, then ends set aside
            try:
                i = self.add(s, row, histories)
            except SQLAlchemyError:
                raise  # the store's trouble, not the job's
            except Exception as exc:
                self.set_aside(s, row, exc, now)
                continue
            if row.reason == "Preempted":
                rec.preempted = True
            live.state.attained_base[i] = attained.get(row.id, 0.0)
            live.state.preemptions[i] = row.preemptions
            live.state.failures[i] = row.failures
            if row.status == JobStatus.SUSPENDED or (row.held is not None and a is None):
                book.hold(row.id)
                continue
            if a is not None and a.stop in ("cancel", "timeout"):
                book.close(row.id)
                continue
            if row.eligible_at > now and a is None:
                book.back_off(row.id, row.eligible_at)
                continue
            placed = rec.placed_on
            if a is None and placed is None:
                self.queueing.enqueue(row, i, now)
                continue
            if a is not None and a.stop is None:
                host = rec.packed_on
                h = live.index.get(host, -1) if host is not None else -1
                if host is not None and (h < 0 or live.state.status[h] != RUNNING):
                    # its host is leaving or set aside: the first of its guests holds the
                    # GPUs (as when a host ends), the others share them with that one
                    successor = next((holding[g] for g in a.gpus if g in holding), None)
                    rec.packed_on = successor
                    h = live.index.get(successor, -1) if successor is not None else -1
                if h < 0:
                    holding.update({g: row.id for g in a.gpus})
                book.adopt(
                    row.id, a.gpus, since=self.loop.rel(a.started), now=self.loop.rel(now), host=h
                )
                continue
            book.arrive(row.id, self.loop.rel(now))
            if a is not None and a.stop == "suspend":
                book.hold(row.id)
            elif placed is not None:
                book.replace(row.id, placed)

    def quarantine(self) -> bool:
        """After a failed pass: check every job in the loop's view again as if it had
        just entered it (its row's undecodable columns reset first), and set aside
        those whose record has become unusable (a value written behind the loop's
        back); True when one was found."""
        now = self.loop.clock()
        found = False
        for job in sorted({*self.loop.live.index, *self.loop.attempts}):
            with self.loop.store.session() as s:
                found |= bool(self._repair(s, job))
                row = s.get(JobRow, job)
                if row is None or row.status in TERMINAL:
                    continue
                rec = self.loop.book.get(job)
                if rec is not None:
                    rec.spec = None
                try:
                    self.loop.spec_of(row)
                    continue
                except BadRecord as exc:
                    problem = exc
                found = True
                a = self.loop.attempts.get(job)
                if a is None:
                    self.set_aside(s, row, problem, now)
                    continue
                # still running: stopped, it ends set aside (Transitions._ended_aside)
                rec = self.loop.book[job]
                rec.aside = row.reason = rec.reason = problem.reason
                self.loop.store.event(s, "set_aside", job, why=problem.reason)
            self.loop.book.close(job)
            if a.stop is None:
                self.stops.stop(a, "cancel", now)
        return found

    def set_aside(self, s: Session, row: JobRow, exc: Exception | str, now: float) -> None:
        """End a job whose record the loop cannot use, saying why (logged once): the
        pass, and everyone else's jobs, go on without it."""
        reason = exc if isinstance(exc, str) else aside_reason(exc)
        self.loop.faulted.pop(row.id, None)
        self.loop.book.close(row.id)
        rec = self.loop.book[row.id]
        rec.spec = rec.aside = None
        row.status, row.end_time, row.gpus = JobStatus.FAILED, now, None
        row.reason, row.request = reason, None
        rec.reason = reason
        self.loop.store.event(s, "set_aside", row.id, why=reason)
        print(f"corral: job {row.id} set aside: {reason}", file=sys.stderr, flush=True)

    def add(self, s: Session, row: JobRow, histories: dict[str, list[float]] | None = None) -> int:
        rec = self.loop.book.enter(row.id)
        spec = self.loop.spec_of(row)
        rec.round_ref = spec.round_of
        rec.exclusive = spec.exclusive
        gpus = 1 if row.phase == "prerun" else spec.gpus
        duration, source = expected_duration(
            self.loop.store, s, spec, row.user, self.loop.config.default_duration, histories
        )
        rec.duration_source = source
        if spec.total_steps is not None:
            rec.goal = spec.total_steps
        if spec.target_loss is not None and rec.loss_history is None:
            rec.loss_history = LossHistory(spec.target_loss)
        return self.loop.book.add(
            row.id,
            self.loop.rel(row.submit_time),
            gpus,
            priority=row.priority + self.loop.share_bonus.get(row.user, 0),
            weight=spec.weight,
            job_type=spec.job_type,
            gpu_type=spec.gpu_type,
            duration=duration,
            estimated=source in ESTIMATED,
            vc=spec.vc or DEFAULT_VC,
            user=row.user,
            model=spec.model or "",
            batch_size=spec.batch_size or 0,
            nodes=0 if row.phase == "prerun" else spec.nodes or 0,
        )

    def _live_for(self, jobs: int) -> LiveJobs:
        """A policy state with room for ``jobs`` live jobs and as many again."""
        return LiveJobs(self.loop.cluster, max(MIN_CAPACITY, 2 * (jobs + 1)))

    def resync(self) -> None:
        """Forget everything the loop holds and recover from the store, as a restart
        does (live processes are adopted again). Raises while the store fails; the
        loop stays due for a resync until one succeeds."""
        loop = self.loop
        kept = {name: getattr(loop, name) for name in KEPT}
        LoopState.__init__(loop, loop.config, loop.store, loop.executor, loop.clock)
        loop.__dict__.update(kept)
        self.loop.resync_due = True
        self.recover()
        self.loop.resync_due = False
        with self.loop.store.session() as s:
            self.loop.store.event(s, "resynced", None)

    def rebuild(self) -> None:
        """More jobs than slots: a larger state holding the live jobs only, and a fresh policy."""
        with self.loop.store.session() as s:
            rows = self._live_rows(s)
            self.loop.live = self._live_for(len(rows))  # (the book's jobs are NEW again)
            for rec in self.loop.book:
                if rec.attempt is None:
                    rec.spec = None  # checked again as it enters the new state
            self.loop.policy = self.loop.new_policy()
            self._load(s, rows)
            self.loop.seen = max([self.loop.seen, *(r.id for r in rows)])
        self.loop.reserved.clear()
        self.loop.fenced.clear()
        self.sync_drained()
        self.loop.dirty = True

    def executor_changed(self) -> None:
        """Nodes left or joined the executor's cluster: GPUs of nodes gone are kept
        from the policy; a node that joined grows the cluster (the policy's view
        is rebuilt around it, GPU ids of the nodes known so far unchanged)."""
        slots = self.loop.executor.slots()
        if len(slots) != len(self.loop.slots):
            self.loop.slots = slots
            self.loop.cluster = cluster_from_slots(slots, self.loop.executor.links())
            with self.loop.store.session() as s:
                self._sync_nodes(s)
                for name in {slot.node for slot in slots[len(self.loop.usable) :]}:
                    self.loop.store.event(s, "node_joined", None, node=name)
            self.loop.usable = np.ones(len(slots), dtype=bool)
            self.rebuild()
        else:
            self.sync_drained()

    def _sync_nodes(self, s: Session) -> None:
        counts: dict[str, tuple[str, int, bool]] = {}
        for slot in self.loop.slots:
            _, n, _ = counts.get(slot.node, (slot.gpu_type, 0, False))
            counts[slot.node] = (slot.gpu_type, n + 1, slot.device is None)
        for name, (gpu_type, n, virtual) in counts.items():
            row = s.get(NodeRow, name)
            if row is None:
                s.add(NodeRow(name=name, gpu_type=gpu_type, gpus=n, state="up", virtual=virtual))
            else:
                row.gpu_type, row.gpus, row.virtual = gpu_type, n, virtual
        for row in s.scalars(select(NodeRow)):
            if row.name not in counts:
                row.state = "gone"

    def sync_drained(self) -> None:
        """Keep the GPUs of drained nodes away from the policy (taken once they are free).

        Jobs already running on a node that is drained run to their end, as
        under Slurm's DRAIN; a node put back up returns its GPUs at once.
        """
        gone = self.loop.executor.unavailable_nodes()
        with self.loop.store.session() as s:
            for row in s.scalars(select(NodeRow)):  # nodes the executor lost, and found again
                if row.name in gone and row.state == "up":
                    row.state = "down"
                    row.reason = self.loop.executor.unavailable_reason(row.name)
                    self.loop.store.event(s, "node_down", None, node=row.name, reason=row.reason)
                elif row.name not in gone and row.state == "down":
                    row.state, row.reason = "up", None
                    self.loop.store.event(s, "node_up", None, node=row.name)
            drained = {r.name for r in s.scalars(select(NodeRow).where(NodeRow.state == "drained"))}
        drained |= gone
        self.loop.lost_nodes = frozenset(gone)
        self.loop.usable = np.array(
            [slot.node not in drained for slot in self.loop.slots], dtype=bool
        )
        free = self.loop.live.state.free
        back = [g for g in self.loop.reserved if self.loop.slots[g].node not in drained]
        if back:
            free.release(back)
            self.loop.reserved.difference_update(back)
            self.loop.dirty = True
        for slot in self.loop.slots:
            if slot.node in drained and slot.id not in self.loop.reserved and free.mask[slot.id]:
                free.take([slot.id])
                self.loop.reserved.add(slot.id)
                self.loop.dirty = True
