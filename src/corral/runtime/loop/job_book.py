"""The loop's one book of jobs: a :class:`LiveJob` record per job it holds, in a
phase that changes only through :meth:`JobBook.move`, checked against a table.

Before the book, what the loop knew of a job was spread over some thirty dicts
and sets on the loop (its attempt, its launch, its back-off, its sharing, its
measurements...), each added to and removed from by hand wherever the job
changed, so an entry could be left behind (a job's reason, its measured speed,
its spec stayed for ever after it ended) or one change could miss a dict. Now:

- **One record, one lifetime.** Everything the loop keeps about a job is a
  field of its record; the record goes when the job is over for the loop (it
  has ended and no process of it is left), and everything with it.
- **Phases through one door.** A job's phase in the policy's eyes (queued,
  placed, running, held, blocked, in back-off, ended) changes only through
  :meth:`JobBook.move`, which checks the change against :data:`PHASE_MOVES` and
  carries it into the policy's state (:class:`~corral.runtime.loop.live_state.LiveJobs`),
  so the two cannot drift apart. An illegal change is an error under
  ``CORRAL_STRICT_TRANSITIONS=1`` (the test suite) and, live, a logged event
  that does not stop the pass.
- **Indexes kept by the book.** The loop walks some fields over all jobs each
  pass (the attempts in flight, the jobs a back-off or a dependency holds, the
  packed guests); the book keeps a read-only mapping for each such field,
  updated whenever a record's field is set, so no index can disagree with the
  records.

What is kept per GPU (who holds it, drained or failed GPUs, fences), per
time-sliced pair, or about other jobs (the ended jobs that dependencies
name) stays with the loop: it is not one job's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from corral.model.state import DONE, FUTURE, PENDING, REJECTED, RUNNING
from corral.runtime.loop.live_state import LiveJobs
from corral.runtime.storage.store import STRICT_TRANSITIONS_ENV

if TYPE_CHECKING:
    from corral.runtime.execution.executor import ProcessRef
    from corral.runtime.jobspec.specs import JobSpec, RoundOf, WarningSignal
    from corral.runtime.loop.estimates import LossHistory


@dataclass
class Attempt:
    """A process in flight, as the loop tracks it."""

    job: int
    id: int
    number: int
    phase: str
    ref: ProcessRef | None
    gpus: tuple[int, ...]
    dir: Path
    started: float
    wall_limit: float | None
    stop: str | None = None
    kill_at: float | None = None
    paused_at: float | None = None
    """When its processes were paused for another job's time slice (None: running)."""
    paused_total: float = 0.0
    """Seconds spent paused so far (they do not count against its wall time)."""
    resumed_at: float = 0.0
    """When it was last resumed (its heartbeats restart from then)."""
    force_pause_at: float | None = None
    """When to stop its processes where they are if it has not paused by itself."""
    parked: bool = False
    """Preempted by pausing (its state kept resident): its preemption is counted
    already, whether it resumes in place or is stopped later."""
    troubles: set[str] = field(default_factory=set)
    """Executor calls about it that have failed (poll, signal, kill): each recorded
    once, and retried at every pass."""
    warning: WarningSignal | None = None
    """Its job's ``--signal``: sent before its time limit, and before a preemption."""
    warned: bool = False
    """Whether the warning of its time limit was sent (once an attempt)."""
    term_at: float | None = None
    """When a stop put off for its warning sends SIGTERM (None: not put off)."""
    batch_script: bool = False
    """Whether it runs a batch script (a warning without ``B:`` then spares its shell)."""

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def ran_for(self, now: float) -> float:
        """Seconds it has run, not counting time paused."""
        paused = self.paused_total + (now - self.paused_at if self.paused_at is not None else 0.0)
        return now - self.started - paused

    @property
    def log(self) -> Path:
        return self.dir / "log.txt"


@dataclass
class Waiting:
    """What a queued job waits for before the policy sees it (sbatch's holds)."""

    dependency: dict[str, list[int]]
    any_of: bool = False
    """Any one met condition is enough (Slurm's '?')."""
    singleton: tuple[str, str] | None = None
    """(user, name): wait until the earlier live jobs of this user and name end."""
    array_job: int | None = None
    limit: int | None = None
    """At most ``limit`` tasks of ``array_job`` queued or running at once (``%N``)."""
    begin: float = 0.0
    """Not before this time (Unix)."""
    admission: str | None = None
    """Admission delayed it until ``begin``: the reason it shows meanwhile."""


class Phase(StrEnum):
    """Where a job stands for the loop (its process is the record's ``attempt``:
    a job queued again may still have one that is being stopped)."""

    NEW = "new"
    """In the book, not yet put anywhere (entered, or its policy state rebuilt)."""
    HELD = "held"
    """Kept from the policy: suspended, held, or run as rounds (its tasks are queued)."""
    BLOCKED = "blocked"
    """Kept from the policy until what it waits for holds (``waiting``: a dependency,
    a begin time, a singleton, its array's throttle, an admission delay)."""
    BACKOFF = "backoff"
    """Kept from the policy until ``eligible_at`` (a retry's back-off)."""
    QUEUED = "queued"
    """In the policy's queue."""
    PLACED = "placed"
    """The plan started it on ``placed_on``; its process is not launched yet."""
    RUNNING = "running"
    """Its process runs, as the plan wants."""
    ENDED = "ended"
    """Over for the scheduler (its last process may still be leaving)."""


_N, _H, _B, _O = Phase.NEW, Phase.HELD, Phase.BLOCKED, Phase.BACKOFF
_Q, _P, _R, _E = Phase.QUEUED, Phase.PLACED, Phase.RUNNING, Phase.ENDED

PHASE_MOVES: dict[Phase, frozenset[Phase]] = {
    # entered (or its state rebuilt): put where its stored row says
    _N: frozenset({_H, _B, _O, _Q, _P, _R, _E}),
    # held: released or resumed (queued, or blocked by its dependency), held again
    # (an admin's hold over a user's), its process failed while being suspended
    # (back-off), or ended
    _H: frozenset({_H, _Q, _B, _O, _E}),
    # blocked: its wait is over, it waits again (an admission delay), it is held
    # (suspended, held), or it ends (a dependency never met, cancelled, refused)
    _B: frozenset({_B, _Q, _H, _E}),
    # in back-off: over, held, or ended
    _O: frozenset({_Q, _H, _E}),
    # queued: placed by a plan, held, its process (stopped by a plan) failed while
    # leaving (back-off), its begin time ahead again (the clock stepped back), or ended
    _Q: frozenset({_P, _H, _O, _B, _E}),
    # placed: launched (or resumed in place), stopped before its launch, held, its
    # earlier process failed under it (back-off), or ended
    _P: frozenset({_R, _Q, _H, _O, _E}),
    # running: preempted or requeued, suspended, failed (back-off), or ended
    _R: frozenset({_Q, _H, _O, _E}),
    # ended: a job ends once (closing it again, as its process's end does after a
    # cancel or a timeout, changes nothing)
    _E: frozenset({_E}),
}
"""Which phase a job may go to from each."""

_STATE_OF: dict[Phase, tuple[int, ...]] = {
    _N: (FUTURE,),
    _H: (FUTURE,),
    _B: (FUTURE,),
    _O: (FUTURE,),
    _Q: (PENDING,),
    _P: (RUNNING,),
    _R: (RUNNING,),
    _E: (DONE, REJECTED),
}
"""The policy state's status of a job in each phase (checked by :meth:`JobBook.check`)."""

_DATA = {_B: "waiting", _O: "eligible_at", _P: "placed_on"}
"""The field that holds what a phase needs (cleared when the job leaves it)."""


class IllegalMove(RuntimeError):
    """A phase change outside :data:`PHASE_MOVES` (raised under strict checking)."""


def strict() -> bool:
    """Whether illegal changes raise (the test suite sets this) or are logged."""
    return os.environ.get(STRICT_TRANSITIONS_ENV) == "1"


_INDEXED = frozenset(
    {
        "attempt",
        "placed_on",
        "waiting",
        "eligible_at",
        "packed_on",
        "goal",
        "loss_history",
        "batch_size",
        "gpu_memory",
        "staging",
        "low_priority",
        "uncapped",
        "exclusive",
        "beating",
        "preempted",
        "aside",
    }
)
"""Fields the book keeps an index of (job -> value, for records where it is set)."""


@dataclass(eq=False)
class LiveJob:
    """Everything the loop keeps about one job, for as long as it holds the job."""

    id: int
    _phase: Phase = Phase.NEW
    # what its phase needs
    waiting: Waiting | None = None
    """BLOCKED: what it waits for."""
    eligible_at: float | None = None
    """BACKOFF: when it may run again (Unix seconds)."""
    placed_on: tuple[int, ...] | None = None
    """PLACED: the GPUs the plan gave it (still in use until its process launches)."""
    # its process
    attempt: Attempt | None = None
    """Its process in flight (a job queued again may still have one leaving)."""
    beating: bool = False
    """Its current attempt has sent a heartbeat (it uses corral.train)."""
    startup: float = 0.0
    """Seconds a start of it costs before it progresses: for a job given as a task
    that was stopped while still starting (before its first heartbeat), twice what
    that attempt ran. Charged like the simulator's switch cost, so a minimum-run
    quantum shorter than a cold start cannot keep such a job from ever progressing."""
    start_note: str | None = None
    """How the plan's start of it will run (Opportunistic, Shared), for its row at launch."""
    staging: tuple[ProcessRef, Path] | None = None
    """Its inputs are being staged ahead of its start (Liquid)."""
    gpu_fault: str | None = None
    """It was stopped because a GPU of its failed: that GPU's fault."""
    # what it is, as checked where it entered the loop's view
    spec: JobSpec | None = None
    """Its spec, checked once where it entered (see runtime.loop.records): the loop
    never re-validates a stored spec."""
    aside: str | None = None
    """Set aside because its record is unusable: why (one still running is stopped
    and ends FAILED with that reason)."""
    round_ref: RoundOf | None = None
    """The job and round it is a task of (policies that plan rounds)."""
    exclusive: bool = False
    """It asked for its nodes alone (sbatch --exclusive)."""
    reason: str | None = None
    """The reason its row shows, as the loop last wrote it."""
    preempted: bool = False
    """Queued again because its last attempt was preempted (its reason says so)."""
    spared: bool = False
    """An interactive allocation a plan asked to stop, and which was not (said once)."""
    # what it measures and what its policy set
    goal: int | None = None
    """The total steps it gave (heartbeats measure the rest)."""
    loss_history: LossHistory | None = None
    """For a job that trains to a target loss: the curve its heartbeats trace."""
    duration_source: str = "default"
    """Where its expected run time comes from (see runtime.loop.estimates)."""
    batch_size: int | None = None
    """The global batch size its policy set (Pollux): passed at launch and in
    heartbeat answers."""
    gpu_memory: float | None = None
    """Peak GPU memory per GPU (bytes) its last heartbeat reported."""
    low_priority: float | None = None
    """Started at low priority by the plan: its GPU memory fraction."""
    uncapped: bool = False
    """Upgraded from opportunistic while running: its memory cap is lifted."""
    # sharing
    packed_on: int | None = None
    """The job whose GPUs it shares (a packed guest -> its host)."""
    alone_rate: float | None = None
    """Its throughput (steps/s) last measured while it ran alone."""
    share_changed: float | None = None
    """When its attempt began or its sharing last changed (its throughput is read
    as alone or shared only from a while after)."""
    stepping_since: float | None = None
    """When its current attempt's first throughput window began."""
    _book: JobBook | None = field(default=None, repr=False)

    @property
    def phase(self) -> Phase:
        """Changed only by :meth:`JobBook.move`."""
        return self._phase

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _INDEXED:
            book = self.__dict__.get("_book")
            if book is not None:
                book._reindex(self.id, name, value)


BLANK = LiveJob(-1)
"""What :meth:`JobBook.peek` answers for a job the book does not hold (all defaults;
read it, never write it)."""


class JobBook:
    """The loop's records, by job id, and the policy's state they are kept in step with."""

    def __init__(self, live: LiveJobs, log: Any = None) -> None:
        self.live = live
        self._jobs: dict[int, LiveJob] = {}
        self.records: Mapping[int, LiveJob] = MappingProxyType(self._jobs)
        """Job -> its record, read-only (for loops over many jobs: one lookup each)."""
        self._index: dict[str, dict[int, Any]] = {name: {} for name in _INDEXED}
        self._unsure: set[int] = set()
        """Jobs that may be over for the loop since the last sweep (entered, ended, or
        their process or staging gone): the only ones a sweep looks at."""
        self._log = log
        """Called with (job, message) for an illegal change outside strict checking."""
        self.illegal: list[str] = []
        """Illegal changes seen (live: logged and let through)."""

    # ------------------------------------------------------------ records
    def __contains__(self, job: object) -> bool:
        return job in self._jobs

    def __getitem__(self, job: int) -> LiveJob:
        return self._jobs[job]

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[LiveJob]:
        return iter(list(self._jobs.values()))

    def get(self, job: int) -> LiveJob | None:
        return self._jobs.get(job)

    def peek(self, job: int) -> LiveJob:
        """The job's record to read, or a blank one (all defaults) if the book has none."""
        return self._jobs.get(job, BLANK)

    def enter(self, job: int) -> LiveJob:
        """The job's record, made (NEW) if the book has none."""
        rec = self._jobs.get(job)
        if rec is None:
            rec = LiveJob(job)
            rec._book = self
            self._jobs[job] = rec
            self._unsure.add(job)
        return rec

    def drop(self, job: int) -> None:
        """Forget the job and everything kept about it."""
        rec = self._jobs.pop(job, None)
        if rec is None:
            return
        for index in self._index.values():
            index.pop(job, None)
        object.__setattr__(rec, "_book", None)

    def sweep(self) -> int:
        """Drop the jobs that are over for the loop: ended (or never given a slot)
        with no process left. Returns how many went. Only the jobs that may have
        become so since the last sweep are looked at (a pass costs no more with a
        long queue)."""
        index, gone = self.live.index, []
        for job in self._unsure:
            rec = self._jobs.get(job)
            if (
                rec is not None
                and rec.attempt is None
                and rec.staging is None
                and (rec._phase is Phase.ENDED or job not in index)
            ):
                gone.append(job)
        self._unsure.clear()
        for job in gone:
            self.drop(job)
        return len(gone)

    def _reindex(self, job: int, name: str, value: Any) -> None:
        index = self._index[name]
        if value is None or value is False:
            if index.pop(job, None) is not None and name in ("attempt", "staging"):
                self._unsure.add(job)
        else:
            index[job] = value

    def having(self, name: str) -> Mapping[int, Any]:
        """Job -> the field's value, for every record where it is set (read-only)."""
        return MappingProxyType(self._index[name])

    @property
    def attempts(self) -> Mapping[int, Attempt]:
        """Job -> its process in flight."""
        return MappingProxyType(self._index["attempt"])

    @property
    def placed(self) -> Mapping[int, tuple[int, ...]]:
        """Jobs the plan started whose process is not launched yet -> their GPUs."""
        return MappingProxyType(self._index["placed_on"])

    @property
    def blocked(self) -> Mapping[int, Waiting]:
        return MappingProxyType(self._index["waiting"])

    @property
    def backoff(self) -> Mapping[int, float]:
        return MappingProxyType(self._index["eligible_at"])

    @property
    def packed_on(self) -> Mapping[int, int]:
        """Packed guest -> its host."""
        return MappingProxyType(self._index["packed_on"])

    # ------------------------------------------------------------- phases
    def move(self, job: int, to: Phase, **data: Any) -> LiveJob:
        """Change the job's phase (checked against :data:`PHASE_MOVES`), clearing what
        the phase it leaves needed and setting what the new one needs (``data``)."""
        rec = self.enter(job)
        was = rec._phase
        if to not in PHASE_MOVES[was]:
            message = f"phase {was} -> {to} is outside the loop's table"
            self.illegal.append(f"job {job}: {message}")
            if strict():
                raise IllegalMove(f"job {job}: {message}")
            if self._log is not None:
                self._log(job, message)
        if was in _DATA and was is not to:
            setattr(rec, _DATA[was], None)
        object.__setattr__(rec, "_phase", to)
        if to is Phase.ENDED:
            self._unsure.add(job)
        for name, value in data.items():
            setattr(rec, name, value)
        return rec

    def add(self, job: int, *args: Any, **values: Any) -> int:
        """Give the job a slot in the policy's state (:meth:`LiveJobs.add`'s arguments);
        it is NEW, to be put somewhere next."""
        rec = self.enter(job)
        if rec._phase is not Phase.NEW:
            self.move(job, Phase.NEW)  # (outside the table: reported)
        return self.live.add(job, *args, **values)

    def _slot(self, job: int) -> int:
        return self.live.index[job]

    def arrive(self, job: int, now: float) -> None:
        """Into the policy's queue (from a hold, a wait or a back-off)."""
        self.move(job, Phase.QUEUED)
        self.live.arrive(self._slot(job), now)

    def place(self, job: int, gpus: tuple[int, ...], host: int = -1) -> None:
        """The plan starts the job on ``gpus`` (``host``: the slot of the running job
        whose GPUs it shares); its process is launched once they are free."""
        self.move(job, Phase.PLACED, placed_on=gpus)
        self.live.start(self._slot(job), gpus, host=host)

    def replace(self, job: int, gpus: tuple[int, ...]) -> None:
        """At a rebuild: a job placed and not launched yet is placed again."""
        self.move(job, Phase.PLACED, placed_on=gpus)
        self.live.start(self._slot(job), gpus)

    def launched(self, job: int) -> None:
        """Its process is launched (or resumed in place) on the GPUs it was placed on."""
        self.move(job, Phase.RUNNING)

    def adopt(
        self, job: int, gpus: tuple[int, ...], since: float, now: float, host: int = -1
    ) -> None:
        """At a restart: a process found running is the job's, running since ``since``."""
        self.move(job, Phase.RUNNING)
        i = self._slot(job)
        self.live.arrive(i, now)
        self.live.start(i, gpus, since=since, host=host)

    def preempt(self, job: int) -> None:
        """Back to the queue, counted as a preemption."""
        self.move(job, Phase.QUEUED)
        self.live.preempt(self._slot(job))

    def requeue(self, job: int, gpus: int) -> None:
        """Back to the queue for its full gang, not counted as a preemption (its pre-run
        passed)."""
        self.move(job, Phase.QUEUED)
        self.live.requeue(self._slot(job), gpus)

    def hold(self, job: int) -> None:
        """Out of the policy's queues (suspended, held, run as rounds)."""
        self.move(job, Phase.HELD)
        self.live.hold(self._slot(job))

    def block(self, job: int, waiting: Waiting) -> None:
        """Out of the policy's queues until ``waiting`` holds."""
        self.move(job, Phase.BLOCKED, waiting=waiting)
        self.live.hold(self._slot(job))

    def back_off(self, job: int, until: float) -> None:
        """Out of the policy's queues until ``until`` (a retry's back-off)."""
        self.move(job, Phase.BACKOFF, eligible_at=until)
        self.live.hold(self._slot(job))

    def close(self, job: int) -> None:
        """Over for the scheduler (finished, failed, cancelled); a job without a slot
        (never entered the policy's state) only changes phase."""
        self.move(job, Phase.ENDED)
        i = self.live.index.get(job)
        if i is not None:
            self.live.close(i)

    def rebase(self, live: LiveJobs) -> None:
        """The policy's state was rebuilt (more jobs than slots, a node joined): every
        job is NEW again, to be put where it belongs; what it waited for and its
        back-off are read again from the store, what the plan placed is kept."""
        self.live = live
        self._unsure.update(self._jobs)
        for rec in self._jobs.values():
            object.__setattr__(rec, "_phase", Phase.NEW)
            rec.waiting = rec.eligible_at = None

    # ------------------------------------------------------------- checks
    def check(self) -> list[str]:
        """What is wrong between the records and the policy's state (empty: nothing):
        each job's phase matches its state's status, phase data is set exactly in its
        phase, and every job the state holds that has not ended has a record."""
        problems = []
        status = self.live.state.status
        for rec in self._jobs.values():
            for phase, name in _DATA.items():
                if (getattr(rec, name) is not None) != (rec._phase is phase):
                    problems.append(f"job {rec.id}: {name} set in phase {rec._phase}")
            i = self.live.index.get(rec.id)
            if i is None:
                continue
            if int(status[i]) not in _STATE_OF[rec._phase]:
                problems.append(
                    f"job {rec.id}: phase {rec._phase} but state status {int(status[i])}"
                )
        ids = np.fromiter(self.live.index.keys(), dtype=np.int64, count=len(self.live.index))
        slots = np.fromiter(self.live.index.values(), dtype=np.int64, count=len(ids))
        open_ = ~np.isin(status[slots], (DONE, REJECTED)) if len(ids) else np.array([], bool)
        for job in ids[open_].tolist():
            if job not in self._jobs:
                problems.append(f"job {job}: in the policy's state, not in the book")
        return problems


def report_illegal(job: int, message: str) -> None:
    """The live service's report of an illegal phase change: one line, the pass goes on."""
    print(f"corral: job {job}: {message}", file=sys.stderr, flush=True)
