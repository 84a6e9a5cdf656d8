"""The outcome oracle of the fault schedules: what each job was promised, from the
schedule alone, checked against what the loop did.

The invariants of :mod:`corral.testing.fault_schedules` are about structure (no GPU
held twice, an attempt row before its process); these rules are about outcomes, the
contract a user relies on:

- ``held``: a job submitted held never starts before a release was asked, and a
  job whose row says it is held starts no attempt while it is;
- ``retries``: a job's failed attempts stay within ``max_retries`` (its node
  failures within ``retry.node_requeues`` are free when it may be requeued);
- ``dependency``: ``after``, ``afterok``, ``afternotok``, ``afterany``,
  ``singleton`` and a begin time are honoured at every start, and a dependency
  that can never be met ends the job without a start;
- ``throttle``: an array's ``%N`` is never exceeded;
- ``wall time``: an attempt past its wall time ends within two ticks plus the
  stop grace, and no attempt is timed out before its wall time;
- ``cancel``: a cancelled job ends CANCELLED unless it had ended by itself
  before the first pass after the cancel;
- ``command``: a job with no fault aimed at it ends as its command does (a
  ``sleep`` or ``train`` SUCCEEDED, ``false`` and ``crash`` FAILED after exactly
  ``max_retries + 1`` attempts, a ``hang`` past its wall time TIMEOUT);
- ``limits``: a user's GPU limit, and a virtual cluster's caps on GPUs held and jobs
  running, are never exceeded (a round's tasks counted as their job's);
- ``gang``: a job that asks for ``nodes: N`` holds GPUs on exactly N nodes, the
  same number on each;
- ``rounds``: a job run as rounds (a task, under a policy that plans rounds) that
  ends SUCCEEDED had exactly its rounds, each of ``gpus`` tasks that all succeeded,
  and no task of a round started before every task of the round before had ended;
- ``cpus``: a CPU-only job (``gpus: 0``) never holds a GPU, and the CPUs the
  attempts in flight hold (see ``JobSpec.cpus_held``) never exceed the service's;
- ``drain``: nothing starts on a node an admin drained, from the first pass after;
- ``checkpoint``: a training job relaunched never starts behind the last
  checkpoint it saved;
- ``history``: every attempt has its ``start`` event, every ended one its
  ``attempt_end`` event with the same cause, and no event names an attempt that
  does not exist; attempts are numbered 1, 2, ... with at most one open.

Each rule raises :class:`~corral.testing.fault_schedules.Broken` (through the
``broken`` callable it is given) naming the rule, the job and what happened.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.runtime.execution.exits import Cause
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.live_state import DEFAULT_VC
from corral.runtime.storage.store import AttemptRow, EventRow, JobRow

ENDED = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}
FAILURES = {Cause.HUNG.value, Cause.USER_ERROR.value, Cause.OOM.value, Cause.KILLED.value}
SLACK = 0.05
"""Seconds of slack on time bounds (a pass runs a little after the instant it is due)."""


@dataclass
class Promise:
    """What the schedule promised one job, and what was done to it."""

    job: int
    user: str
    spec: JobSpec
    submitted: float
    name: str
    faults: list[str] = field(default_factory=list)
    """Faults aimed at it (a kill, its node lost, a clock jump while it lived, ...):
    its end may then differ from its command's."""
    cancelled: float | None = None
    """When a cancel was first asked (while it had not ended)."""
    cancelled_before: int = 0
    """How many passes had begun when it was asked (the next one must carry it out)."""
    ended_attempt: int | None = None
    """The attempt whose process had already ended, its end not yet recorded, when
    the cancel was asked (None: one ran, or none had started): the job ended first
    if that attempt is its last."""
    released: float | None = None
    """When a release was first asked."""
    released_back: float = 0.0
    """The clock's steps back in all when it was (see :attr:`Oracle.back`)."""
    held_since: float | None = None
    """Since when its row has said it is held (None: it does not now)."""
    checkpoint: int = 0
    """The last checkpoint step its process saved where the store kept it."""

    @property
    def command(self) -> str:
        return self.spec.command[0] if self.spec.command else ""


def expected_end(p: Promise) -> str | None:
    """How a job with no fault aimed at it ends, from its command (None: not known)."""
    head = p.command
    wall = p.spec.wall_time
    if head == "sleep" and wall is not None:
        work = float(p.spec.command[1]) if len(p.spec.command) > 1 else 5.0
        return "TIMEOUT" if work > wall else "SUCCEEDED"
    if head == "train" and wall is not None:  # steps / rate seconds in all, each attempt
        # from its job's checkpoint (so one stopped on the way may finish within its wall
        # time); an exclusive one slows down where packed
        args = p.spec.command[1:]
        work = (float(args[0]) if args else 100.0) / (float(args[1]) if len(args) > 1 else 10.0)
        return None if work > wall or "exclusive" in args else "SUCCEEDED"
    if head in ("sleep", "train", "work"):
        return "SUCCEEDED"
    if head in ("false", "crash"):
        return "FAILED"
    if head == "hang":
        return "TIMEOUT" if p.spec.wall_time is not None else None
    return "SUCCEEDED"


@dataclass
class Oracle:
    """The rules, over the promises the harness recorded and the store's rows."""

    broken: Callable[[str], NoReturn]
    tick: float
    grace: float
    node_requeues: int
    user_gpus: dict[str, int]
    cpus: int | None = None
    """The CPUs the service counts out to jobs (None: not checked)."""
    vc_gpus: dict[str, int] = field(default_factory=dict)
    vc_running: dict[str, int] = field(default_factory=dict)
    """Caps per virtual cluster on the GPUs its open attempts hold and on how many."""
    tasks: dict[int, Promise] = field(default_factory=dict)
    """A round's tasks (made by the loop, not submitted) -> their job's promise."""
    parent_of: Callable[[int], int | None] = lambda job: None
    """The job whose round ``job`` is a task of (None: none), read from the store."""

    rounds_live: bool = False
    """Whether the policy plans rounds (a job given as a task then runs as rounds)."""
    node_of: dict[int, str] = field(default_factory=dict)
    """GPU -> its node (a gang's layout is checked against it)."""
    promises: dict[int, Promise] = field(default_factory=dict)
    passes: int = 0
    """Passes begun so far."""
    good_passes: list[tuple[int, float, float]] = field(default_factory=list)
    """(number, start time, end time) of each pass that ran to its end."""
    good_back: dict[int, float] = field(default_factory=dict)
    """Pass number -> seconds the clock had stepped back when it ran, for each of
    :attr:`good_passes`."""
    unsteady: list[tuple[float, float]] = field(default_factory=list)
    """Spans when the loop could not keep its deadlines (a full disk, a clock jump)."""
    drains: dict[int, tuple[int, float]] = field(default_factory=dict)
    """GPU -> (passes begun, seconds the clock had stepped back) when an admin
    drained its node (gone when resumed)."""
    restarts: list[float] = field(default_factory=list)
    """When the service was restarted (each may cost a stop in progress a tick)."""
    back: float = 0.0
    """Seconds the clock has stepped back in all: a time read before a step back and
    one read after it compare only within the steps between the two readings."""
    back_at: dict[tuple[int, int], float] = field(default_factory=dict)
    """(job, attempt) -> :attr:`back` at its launch."""
    back_open: dict[tuple[int, int], float] = field(default_factory=dict)
    """(job, attempt) -> :attr:`back` at the last step it was seen open: less its
    :attr:`back_at`, the steps back its stored start and end straddle."""
    paused: dict[tuple[int, int], float] = field(default_factory=dict)
    """(job, attempt) -> seconds its process was seen paused, at the latest step (a
    lower bound: what its wall time must not count)."""

    # ------------------------------------------------------------ recording
    def submitted(self, rows: list[tuple[int, str, dict[str, Any], str]], now: float) -> None:
        """Jobs stored: (id, user, stored spec, name) each."""
        for job, user, spec, name in rows:
            self.promises[job] = Promise(job, user, JobSpec.model_validate(spec), now, name)

    def _aimed(self, job: int) -> tuple[Promise | None, str]:
        """The promise a fault aimed at ``job`` changes: its own, or its round's job's."""
        if (p := self.promises.get(job)) is not None:
            return p, ""
        parent = self.parent_of(job)
        return self.promises.get(parent) if parent is not None else None, f" (its task {job})"

    def aim(self, job: int, what: str) -> None:
        """A fault aimed at ``job`` (or at a task of its rounds): its end is no longer
        its command's to say."""
        p, whose = self._aimed(job)
        if p is not None:
            p.faults.append(what + whose)

    def aim_live(self, jobs: list[int], what: str) -> None:
        for job in jobs:
            self.aim(job, what)

    def cancel_asked(self, job: int, now: float, ended_attempt: int | None = None) -> None:
        if job not in self.promises:  # a round's task: its job ends CANCELLED with it
            self.aim(job, "cancelled")
            return
        p = self.promises.get(job)
        if p is not None and p.cancelled is None:
            p.cancelled, p.cancelled_before = now, self.passes
            p.ended_attempt = ended_attempt

    def release_asked(self, job: int, now: float) -> None:
        p = self.promises.get(job)
        if p is not None and p.released is None:
            p.released, p.released_back = now, self.back

    def saved(self, job: int, step: int) -> None:
        p = self.promises.get(job)
        if p is not None:
            p.checkpoint = max(p.checkpoint, step)

    def launched(self, job: int, attempt: int, step: float) -> None:
        """A training process starts: never behind the checkpoint its job saved."""
        p = self.promises.get(job)
        if p is not None and step + 1 < p.checkpoint:
            self.broken(
                f"checkpoint: job {job} attempt {attempt} starts at step {step:.0f}, "
                f"behind its saved checkpoint at step {p.checkpoint}"
            )

    def _back_at_first_pass_after(self, begun: int) -> float:
        """The clock's steps back, in seconds, when the pass of
        :meth:`first_pass_after` ran (all of them so far where none has yet)."""
        number = next((k for k, _, _ in self.good_passes if k > begun), None)
        return self.back if number is None else self.good_back.get(number, self.back)

    def first_pass_after(self, begun: int) -> float:
        """When the first pass to run to its end after ``begun`` passes began started."""
        return next((t for k, t, _ in self.good_passes if k > begun), math.inf)

    # ------------------------------------------------------------ each step
    def check_step(
        self, s: Session, now: float, skip: set[int], paused: dict[tuple[int, int], float]
    ) -> None:
        """The rules that hold at every instant (``paused``: seconds each attempt's
        process has spent paused, which its wall time does not count)."""
        open_rows = list(s.scalars(select(AttemptRow).where(AttemptRow.end_time.is_(None))))
        held = dict(s.execute(select(JobRow.id, JobRow.held).where(JobRow.held.is_not(None))).all())
        for key, seconds in paused.items():
            self.paused[key] = max(self.paused.get(key, 0.0), seconds)
        by_array: dict[int, list[int]] = {}
        by_user: dict[str, int] = {}
        by_vc: dict[str, list[int]] = {}
        cpus_held = 0
        for att in open_rows:
            if att.job_id in skip:
                continue
            self.back_open[(att.job_id, att.number)] = self.back
            p = self.promises.get(att.job_id)
            if p is None and (task := self._task(s, att.job_id)) is not None:
                self._limits(task, att, by_user, by_vc)
            if p is None:
                continue
            spec = p.spec
            key = (att.job_id, att.number)
            stepped = self.back_at.get(key, self.back) - p.released_back
            if spec.hold and (p.released is None or att.start_time < p.released - SLACK - stepped):
                self.broken(
                    f"held: job {p.job} was submitted held and attempt {att.number} started "
                    f"at {att.start_time:.2f} before any release was asked"
                )
            if (
                att.job_id in held
                and p.held_since is not None
                and att.start_time > p.held_since + SLACK
            ):
                self.broken(
                    f"held: job {p.job} is held ({held[att.job_id]}) and attempt "
                    f"{att.number} started while it was"
                )
            if spec.array_job is not None and spec.array_limit is not None:
                by_array.setdefault(spec.array_job, []).append(att.job_id)
                if len(by_array[spec.array_job]) > spec.array_limit:
                    self.broken(
                        f"throttle: array {spec.array_job} runs tasks "
                        f"{sorted(by_array[spec.array_job])} at once, over its %"
                        f"{spec.array_limit}"
                    )
            if spec.gpus == 0 and att.gpus:
                self.broken(
                    f"cpus: CPU-only job {p.job} attempt {att.number} holds GPUs {att.gpus}"
                )
            cpus_held += spec.cpus_held()
            if self.cpus is not None and cpus_held > self.cpus:
                self.broken(f"cpus: the attempts in flight hold {cpus_held} CPUs, over {self.cpus}")
            self._limits(p, att, by_user, by_vc)
            if spec.nodes and att.gpus and self.node_of:
                self._layout(p, att)
            self._wall_time(att, p, now, paused.get((att.job_id, att.number), 0.0))
            for g in att.gpus or []:
                drained, back = self.drains.get(g, (-1, 0.0))
                if drained < 0 or back != self._back_at_first_pass_after(drained):
                    continue  # (the clock stepped back between the drain and the first
                    # pass after it: the times recorded either side do not compare)
                if att.start_time > self.first_pass_after(drained):
                    # (placed before the drain and launched once its GPUs were free is
                    # allowed, as a job Slurm allocated runs on a node drained after)
                    placed = s.scalar(
                        select(EventRow.time)
                        .where(EventRow.job_id == att.job_id, EventRow.kind == "allocated")
                        .where(EventRow.time <= att.start_time)
                        .order_by(EventRow.id.desc())
                        .limit(1)
                    )
                    if placed is None or placed > self.first_pass_after(drained):
                        self.broken(
                            f"drain: job {p.job} attempt {att.number} was placed at {placed} "
                            f"on GPU {g}, of a node drained before"
                        )
        for job, p in self.promises.items():
            if job in held:
                p.held_since = now if p.held_since is None else p.held_since
            else:
                p.held_since = None

    def _task(self, s: Session, job: int) -> Promise | None:
        """The promise of the job whose round ``job`` is a task of (None: not a task)."""
        if job not in self.tasks:
            parent = s.scalar(select(JobRow.parent).where(JobRow.id == job))
            promise = None if parent is None else self.promises.get(parent)
            if promise is None:
                return None
            self.tasks[job] = promise
        return self.tasks[job]

    def _limits(
        self,
        p: Promise,
        att: AttemptRow,
        by_user: dict[str, int],
        by_vc: dict[str, list[int]],
    ) -> None:
        """Count an open attempt against its user's and its virtual cluster's caps."""
        held = len(att.gpus or [])
        by_user[p.user] = by_user.get(p.user, 0) + held
        most = self.user_gpus.get(p.user)
        if most is not None and by_user[p.user] > most:
            self.broken(f"limits: user {p.user} holds {by_user[p.user]} GPUs, over {most}")
        vc = p.spec.vc or DEFAULT_VC
        use = by_vc.setdefault(vc, [0, 0])
        use[0] += held
        use[1] += 1
        if vc in self.vc_gpus and use[0] > self.vc_gpus[vc]:
            self.broken(
                f"limits: virtual cluster {vc} holds {use[0]} GPUs, over {self.vc_gpus[vc]}"
            )
        if vc in self.vc_running and use[1] > self.vc_running[vc]:
            self.broken(
                f"limits: virtual cluster {vc} runs {use[1]} attempts, over {self.vc_running[vc]}"
            )

    def _layout(self, p: Promise, att: AttemptRow) -> None:
        per_node: dict[str, int] = {}
        for g in att.gpus or []:
            node = self.node_of.get(int(g), "?")
            per_node[node] = per_node.get(node, 0) + 1
        if len(per_node) != p.spec.nodes or len(set(per_node.values())) != 1:
            self.broken(
                f"gang: job {p.job} asks for {p.spec.nodes} nodes and attempt {att.number} "
                f"holds GPUs {sorted(per_node.items())} by node"
            )

    def _wall_time(self, att: AttemptRow, p: Promise, now: float, paused: float) -> None:
        """Past its wall time, an attempt ends within two ticks plus the grace; where
        its wall time came while the loop could not act (a full disk under the store,
        a clock jump), that long after the loop could again."""
        limit = p.spec.wall_time
        if limit is None:
            return
        due = att.start_time + paused + limit
        margin = 2 * self.tick + self.grace
        deadline = due + margin
        for since, until in sorted(self.unsteady):
            # (a span that began by the pass after the deadline counts: the end of an
            # attempt killed in time is recorded at that pass, which the trouble failed)
            if since <= deadline + self.tick and until >= due:
                deadline = max(deadline, until + margin)
        deadline += self.tick * sum(1 for t in self.restarts if due <= t <= deadline)
        if now > deadline + SLACK:
            self.broken(
                f"wall time: job {p.job} attempt {att.number} runs {now - due:.2f}s past its "
                f"wall time of {limit:g}s (allowed: two ticks and the grace, {margin:g}s)"
            )

    # ------------------------------------------------------------ at the end
    def check_end(self, s: Session, skip: set[int]) -> None:
        """The rules over each job's whole history, once every job has ended."""
        everyone = {r.id: r for r in s.scalars(select(JobRow))}
        # (a row written behind the loop's back says nothing reliable of its job: no
        # other job's rule is judged by it)
        rows = {job: r for job, r in everyone.items() if job not in skip}
        attempts: dict[int, list[AttemptRow]] = {}
        for att in s.scalars(select(AttemptRow).order_by(AttemptRow.job_id, AttemptRow.number)):
            attempts.setdefault(att.job_id, []).append(att)
        events: dict[int, list[EventRow]] = {}
        for ev in s.scalars(select(EventRow).where(EventRow.job_id.is_not(None))):
            events.setdefault(int(ev.job_id or 0), []).append(ev)
        for job, p in sorted(self.promises.items()):
            row = rows.get(job)
            if row is None or job in skip:
                continue
            mine = attempts.get(job, [])
            self._history(p, mine, events.get(job, []))
            self._retries(p, row, mine)
            self._dependency(p, row, mine, rows, attempts)
            self._cancel(p, row, mine)
            self._timeouts(p, mine)
            self._command(p, row, mine, rows)
            if self.rounds_live and p.spec.task is not None:
                self._rounds(p, row, everyone, attempts, skip)

    def _history(self, p: Promise, mine: list[AttemptRow], evs: list[EventRow]) -> None:
        numbers = [a.number for a in mine]
        if numbers != list(range(1, len(mine) + 1)):
            self.broken(f"history: job {p.job}'s attempts are numbered {numbers}")
        if sum(1 for a in mine if a.end_time is None) > 1:
            self.broken(f"history: job {p.job} has more than one open attempt")
        rounds = sum(1 for e in evs if e.kind == "start" and e.detail.get("rounds"))
        if rounds and (mine or rounds > 1):  # a job run as rounds: its tasks have attempts
            self.broken(
                f"history: job {p.job} started as rounds {rounds} times, with attempts "
                f"{numbers} of its own"
            )
        starts = sorted(
            int(e.detail.get("attempt", -1))
            for e in evs
            if e.kind == "start" and not e.detail.get("rounds")
        )
        if starts != numbers:
            self.broken(
                f"history: job {p.job} has attempts {numbers} and start events for {starts}"
            )
        ends: dict[int, list[str]] = {}
        for e in evs:
            if e.kind == "attempt_end":
                ends.setdefault(int(e.detail.get("attempt", -1)), []).append(
                    str(e.detail.get("cause"))
                )
        for a in mine:
            said = ends.pop(a.number, [])
            if a.end_time is not None and a.cause is not None and said != [a.cause]:
                self.broken(
                    f"history: job {p.job} attempt {a.number} ended {a.cause}, and its "
                    f"events say {said or 'nothing'}"
                )
        if ends:
            self.broken(f"history: job {p.job} has end events for attempts {sorted(ends)} "
                        "that did not end so")  # fmt: skip

    def _counted(self, p: Promise, mine: list[AttemptRow]) -> int:
        failed = sum(1 for a in mine if a.cause in FAILURES)
        lost = sum(1 for a in mine if a.cause == Cause.NODE_FAILURE.value)
        free = self.node_requeues if p.spec.requeue else 0
        return failed + max(lost - free, 0)

    def _retries(self, p: Promise, row: JobRow, mine: list[AttemptRow]) -> None:
        counted = self._counted(p, mine)
        if counted > p.spec.max_retries + 1:
            self.broken(
                f"retries: job {p.job} failed {counted} attempts, with max_retries "
                f"{p.spec.max_retries} ({len(mine)} attempts in all)"
            )
        last = max(
            (k for k, a in enumerate(mine) if self._counted(p, mine[: k + 1]) > p.spec.max_retries),
            default=None,
        )
        if last is not None and last < len(mine) - 1:
            self.broken(
                f"retries: job {p.job} was started again after its retries were used "
                f"(attempt {mine[last].number} was its last allowed)"
            )

    def _dependency(
        self,
        p: Promise,
        row: JobRow,
        mine: list[AttemptRow],
        rows: dict[int, JobRow],
        attempts: dict[int, list[AttemptRow]],
    ) -> None:
        dep = p.spec.dependency
        first = mine[0].start_time if mine else None
        begin = p.spec.begin
        if first is not None and begin is not None and first < begin - SLACK:
            self.broken(f"dependency: job {p.job} started at {first:.2f}, before its begin "
                        f"time {begin:.2f}")  # fmt: skip
        if first is not None:
            for kind, ids in dep.items():
                for other in ids:
                    o = rows.get(other)
                    if o is None:
                        continue
                    ok = _met(kind, o, first, *self._stepped_since(mine[0], attempts.get(other)))
                    if not ok and not p.spec.dependency_any:
                        self.broken(
                            f"dependency: job {p.job} started at {first:.2f} with {kind}:{other} "
                            f"unmet (job {other} {o.status}, ended {o.end_time})"
                        )
            if (
                dep
                and p.spec.dependency_any
                and not any(
                    (o := rows.get(j)) is not None
                    and _met(k, o, first, *self._stepped_since(mine[0], attempts.get(j)))
                    for k, ids in dep.items()
                    for j in ids
                )
            ):
                self.broken(f"dependency: job {p.job} started with none of {dep} met")
            if p.spec.singleton:
                for other, o in rows.items():
                    if (
                        other < p.job
                        and o.user == p.user
                        and o.name == p.name
                        and (
                            o.end_time is None
                            or o.end_time
                            > first + self._stepped_since(mine[0], attempts.get(other))[0] + SLACK
                        )
                    ):
                        self.broken(
                            f"dependency: singleton job {p.job} started at {first:.2f} while "
                            f"job {other} of the same name had not ended"
                        )
        never = [
            f"{kind}:{other}"
            for kind, ids in dep.items()
            for other in ids
            if (o := rows.get(other)) is not None and _never(kind, o)
        ]
        if dep and not p.spec.dependency_any and never and row.status != "CANCELLED":
            self.broken(
                f"dependency: job {p.job} ended {row.status} though {never[0]} can never be met"
            )

    def _cancel(self, p: Promise, row: JobRow, mine: list[AttemptRow]) -> None:
        if p.cancelled is None or row.status == "CANCELLED":
            return
        if p.ended_attempt is not None and mine and mine[-1].number == p.ended_attempt:
            return  # it ended first (its end recorded after the cancel: the times, across
            # a clock step back, do not compare)
        first = self.first_pass_after(p.cancelled_before)
        if row.end_time is None or row.end_time > first + SLACK:
            self.broken(
                f"cancel: job {p.job} was cancelled at {p.cancelled:.2f}, and ended "
                f"{row.status} at {row.end_time}, after the pass at {first:.2f}"
            )

    def _timeouts(self, p: Promise, mine: list[AttemptRow]) -> None:
        limit = p.spec.wall_time
        for a in mine:
            if a.cause != Cause.TIMEOUT.value or a.end_time is None:
                continue
            paused = self.paused.get((p.job, a.number), 0.0)
            ran = a.end_time - a.start_time - paused
            if limit is None or ran < limit - SLACK - self._stepped_within(p.job, a.number):
                self.broken(
                    f"wall time: job {p.job} attempt {a.number} timed out after running "
                    f"{ran:.2f}s ({paused:.2f}s paused not counted), its wall time {limit}"
                )

    def _stepped_since(
        self, start: AttemptRow, others: list[AttemptRow] | None
    ) -> tuple[float, float]:
        """Seconds the clock stepped back between another job's end (and its first
        launch) and ``start``'s launch: a time the other recorded before a step and
        ``start``'s after it compare only within them. Where the other never ran,
        every step before ``start``."""
        at_start = self.back_at.get((start.job_id, start.number), self.back)
        if not others:
            return at_start, at_start
        first, last = others[0], others[-1]
        launched = self.back_at.get((first.job_id, first.number), 0.0)
        ended = self.back_open.get(
            (last.job_id, last.number), self.back_at.get((last.job_id, last.number), 0.0)
        )
        return max(at_start - ended, 0.0), max(at_start - launched, 0.0)

    def _stepped_within(self, job: int, number: int) -> float:
        """Seconds the clock stepped back while the attempt was open (all of them
        where its launch was not seen). A step is an operation of the schedule, and
        each is followed by a check: an attempt open across one is seen open after it
        (its end is written by a pass)."""
        key = (job, number)
        if key not in self.back_at:
            return self.back
        return self.back_open.get(key, self.back_at[key]) - self.back_at[key]

    def _command(
        self, p: Promise, row: JobRow, mine: list[AttemptRow], rows: dict[int, JobRow]
    ) -> None:
        if p.faults or p.cancelled is not None:
            return
        if any(
            (o := rows.get(j)) is None or _never(k, o)
            for k, ids in p.spec.dependency.items()
            for j in ids
        ):
            return  # (checked above: it ends CANCELLED, never started; or it waits on a
            # job whose row was written behind the loop's back: its end is not known)
        want = expected_end(p)
        if want is None:
            return
        if want == "TIMEOUT" and row.status == "SUCCEEDED" and not self._could_time_out(p, mine):
            return  # it ended by itself before any pass could see it past its time
        if row.status != want:
            self.broken(
                f"command: job {p.job} ({' '.join(p.spec.command)}) had no fault aimed at it "
                f"and ended {row.status} ({row.reason}), not {want}"
            )
        failed = self._counted(p, mine)
        if p.command in ("false", "crash") and failed != p.spec.max_retries + 1:
            self.broken(
                f"command: job {p.job} ({' '.join(p.spec.command)}) ended after {failed} "
                f"failed attempts, not max_retries + 1 = {p.spec.max_retries + 1}"
            )

    def _could_time_out(self, p: Promise, mine: list[AttemptRow]) -> bool:
        """Whether a pass ran from its start to its end while a ``sleep`` was past its
        wall time and had not ended by itself: such a pass must time it out. One that
        began before its wall time was over, or was still running when it ended (a
        slow store can hold a pass for seconds, and the pass may look at it only after
        it ended), need not: as in Slurm, whose controller checks time limits now and
        then, a job that ends by itself before the check ends COMPLETED. Where the
        clock stepped back within the attempt, the times do not compare: such a pass
        is assumed."""
        if p.command != "sleep" or len(mine) != 1 or p.spec.wall_time is None:
            return True
        a = mine[0]
        if self._stepped_within(p.job, a.number) > 0:
            return True
        paused = self.paused.get((p.job, a.number), 0.0)
        work = float(p.spec.command[1]) if len(p.spec.command) > 1 else 5.0
        due, done = a.start_time + p.spec.wall_time + paused, a.start_time + work + paused
        return any(due <= began and ended <= done - SLACK for _, began, ended in self.good_passes)

    def _rounds(
        self,
        p: Promise,
        row: JobRow,
        rows: dict[int, JobRow],
        attempts: dict[int, list[AttemptRow]],
        skip: set[int],
    ) -> None:
        by_round: dict[int, list[JobRow]] = {}
        for task in rows.values():
            if task.parent == p.job:
                if task.id in skip:
                    return  # (a task's row written behind the loop's back: not judged)
                ref = (task.spec or {}).get("round_of") or {}
                by_round.setdefault(int(ref.get("round", -1)), []).append(task)
        ended_at = -math.inf  # when the last task of the rounds before had ended
        ended_back = 0.0  # the clock's steps back by then
        for number in sorted(by_round):
            tasks = by_round[number]
            starts = [(a.start_time, a) for t in tasks for a in attempts.get(t.id, [])]
            if starts:
                first, att = min(starts, key=lambda pair: pair[0])
                stepped = self.back_at.get((att.job_id, att.number), self.back) - ended_back
                if first < ended_at - SLACK - stepped:
                    self.broken(
                        f"rounds: job {p.job}'s round {number} started a task at "
                        f"{first:.2f}, before its round before had ended ({ended_at:.2f})"
                    )
            ends = [t.end_time for t in tasks if t.end_time is not None]
            ended_at = max(ends) if len(ends) == len(tasks) else math.inf
            last = [a for t in tasks for a in attempts.get(t.id, [])[-1:]]
            ended_back = min(
                (self.back_open.get((a.job_id, a.number), 0.0) for a in last), default=0.0
            )
        if row.status != "SUCCEEDED":
            return
        want = p.spec.rounds()
        good = [
            n
            for n, tasks in by_round.items()
            if len(tasks) == p.spec.gpus and all(t.status == "SUCCEEDED" for t in tasks)
        ]
        if sorted(by_round) != list(range(want)) or len(good) != want:
            made = {n: [t.status for t in ts] for n, ts in sorted(by_round.items())}
            self.broken(
                f"rounds: job {p.job} SUCCEEDED with rounds {made}; it has {want} rounds of "
                f"{p.spec.gpus} tasks"
            )


def _met(
    kind: str, other: JobRow, at: float, since_end: float = 0.0, since_start: float = 0.0
) -> bool:
    """Whether ``kind`` on ``other`` was met at ``at`` (from its final row), the
    clock having stepped back ``since_end`` seconds between the other's end and
    ``at`` (``since_start``: its start)."""
    ended = other.end_time is not None and other.end_time <= at + since_end + SLACK
    if kind == "after":
        began = other.first_start
        return (began is not None and began <= at + since_start + SLACK) or ended
    if kind == "afterany":
        return ended
    if kind == "afterok":
        return ended and other.status == "SUCCEEDED"
    if kind == "afternotok":
        return ended and other.status in ENDED - {"SUCCEEDED"}
    return True


def _never(kind: str, other: JobRow) -> bool:
    """Whether ``kind`` on ``other`` can never be met (from its final row)."""
    if kind == "afterok":
        return other.status in ENDED - {"SUCCEEDED"}
    if kind == "afternotok":
        return other.status == "SUCCEEDED"
    return False
