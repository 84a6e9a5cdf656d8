"""The state store: the service's source of truth, through SQLAlchemy.

Four tables hold everything a restarted service needs: ``jobs`` (spec, state,
pending reason, pending requests from the API), ``attempts`` (one row per
process launch: GPUs, pid, exit, cause), ``events`` (an append-only history)
and ``nodes``. ``meta`` keeps the service epoch (the zero of the scheduler's
clock). Every change is one transaction, so a crash leaves either the old or
the new state, never half of one. The schema is versioned: opening a store
brings it to this release's revision (:mod:`corral.runtime.storage.migrate`).

SQLite is the default (an embedded file, WAL mode so the API can read while
the scheduler writes); any SQLAlchemy URL works, e.g. PostgreSQL.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    create_engine,
    event,
    insert,
    select,
    text,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.orm.base import NO_VALUE

from corral.model.status import TRANSITIONS, JobStatus
from corral.runtime.storage.migrate import upgrade

if TYPE_CHECKING:
    from corral.runtime.jobspec.specs import JobSpec


class Base(DeclarativeBase):
    @classmethod
    def table(cls) -> Table:
        """The class's table, for inserts of many rows at once through the connection
        (the ORM's bulk path costs several times more per row)."""
        return cls.metadata.tables[cls.__tablename__]


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_user_name", "user", "name"),
        # a user's jobs not yet ended, counted at each submission (max_jobs_per_user)
        # without reading the jobs the user ran before
        Index("ix_jobs_user_status", "user", "status"),
        # the few jobs with a request waiting for the loop, found each pass without
        # reading the whole table (an index of those rows only)
        Index(
            "ix_jobs_request",
            "request",
            sqlite_where=text("request IS NOT NULL"),
            postgresql_where=text("request IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(64), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    """Why a job waits (PENDING) or how it ended (terminal states)."""
    priority: Mapped[int] = mapped_column(Integer, default=0)
    submit_time: Mapped[float] = mapped_column(Float)
    first_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpus: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    """GPUs assigned while STARTING or RUNNING."""
    phase: Mapped[str] = mapped_column(String(8), default="main")
    """``prerun`` while the 1-GPU pre-run is due, then ``main``."""
    failures: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    eligible_at: Mapped[float] = mapped_column(Float, default=0.0)
    """Retry back-off: the job may not start before this time."""
    request: Mapped[str | None] = mapped_column(String(16), nullable=True)
    """An API request the scheduler has not carried out yet (cancel, suspend, resume)."""
    held: Mapped[str | None] = mapped_column(String(8), nullable=True)
    """Who holds a waiting job back (``user`` or ``admin``; None: not held). A held
    job stays PENDING, as in Slurm, with the reason JobHeldUser or JobHeldAdmin."""
    steps: Mapped[float] = mapped_column(Float, default=0.0)
    throughput: Mapped[float | None] = mapped_column(Float, nullable=True)
    throughput_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When the window the throughput covers began (None: the job did not say)."""
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    loss_curve: Mapped[dict[str, list[float]] | None] = mapped_column(JSON, nullable=True)
    """(step, loss) points of a job that trains to a target loss (Optimus' fit)."""
    progress: Mapped[dict[str, list[Any]] | None] = mapped_column(JSON, nullable=True)
    """The heartbeats' history, thinned (times, steps, throughput, loss): for charts."""
    batch_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    grad_noise_scale: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_utilization: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Percent, the mean over its GPUs, as the driver last measured it (real GPUs only)."""
    gpu_memory_gb: Mapped[float | None] = mapped_column(Float, nullable=True)
    """GPU memory its processes held when the driver last looked."""
    last_heartbeat: Mapped[float | None] = mapped_column(Float, nullable=True)
    checkpoint_step: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    parent: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    """For a task of a round (hare): the job it is a task of."""

    @classmethod
    def queued(
        cls,
        spec: JobSpec,
        user: str,
        priority: int,
        reason: str,
        phase: str = "main",
        parent: int | None = None,
        submit_time: float | None = None,
    ) -> JobRow:
        """A new job, queued (now, unless ``submit_time`` says when): a submission,
        or a task of a round."""
        return cls(
            name=spec.name,
            user=user,
            spec=spec.model_dump(mode="json"),
            status=JobStatus.PENDING,
            reason=reason,
            priority=priority,
            submit_time=time.time() if submit_time is None else submit_time,
            phase=phase,
            parent=parent,
        )


STRICT_TRANSITIONS_ENV = "CORRAL_STRICT_TRANSITIONS"
"""Set to 1 (the test suite does) to make a status change outside the life cycle
an error; otherwise it is refused, logged, and the job keeps its status."""


class IllegalTransition(RuntimeError):
    """A job's status was set to one its life cycle does not allow from where it is."""


ILLEGAL_SEEN: deque[str] = deque(maxlen=100)
"""The last status changes refused as outside the life cycle (raised or logged):
a harness reads them even where the loop caught what was raised."""


@event.listens_for(JobRow.status, "set", retval=True, active_history=True)
def _checked_status(row: JobRow, new: Any, old: Any, _initiator: Any) -> Any:
    """Every status any part of the service writes goes through this check against
    the life-cycle table (:data:`corral.model.status.TRANSITIONS`): a job ends
    once, and an ended job never changes again. A value outside the known states
    (a record written behind the service's back) is left for the loop's record
    checks, which set such a job aside."""
    if new == old or old is None or isinstance(old, type(NO_VALUE)):
        return new
    try:
        before, after = JobStatus(old), JobStatus(new)
    except ValueError:
        return new
    if after in TRANSITIONS[before]:
        return new
    message = f"job {row.id}: status {before} -> {after} is outside the life cycle"
    ILLEGAL_SEEN.append(message)
    if os.environ.get(STRICT_TRANSITIONS_ENV) == "1":
        raise IllegalTransition(message)
    print(f"corral: {message}; it stays {before}", file=sys.stderr, flush=True)
    return old


class AttemptRow(Base):
    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(8))
    gpus: Mapped[list[int]] = mapped_column(JSON)
    start_time: Mapped[float] = mapped_column(Float)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pid_start: Mapped[str | None] = mapped_column(String(32), nullable=True)
    """The process's start time as the OS reports it: a reused pid is not mistaken for ours."""
    dir: Mapped[str] = mapped_column(Text)
    token_sha256: Mapped[str] = mapped_column(String(64))
    stop: Mapped[str | None] = mapped_column(String(16), nullable=True)
    """Why the scheduler is stopping it (preempt, suspend, cancel, timeout, lost)."""
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    signal: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cause: Mapped[str | None] = mapped_column(String(16), nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    steps_start: Mapped[float] = mapped_column(Float, default=0.0)
    steps_end: Mapped[float | None] = mapped_column(Float, nullable=True)


class ArchivedJobRow(Base):
    """A job moved out of the hot tables once it had ended long enough ago
    (``archive_after``; ``corral store archive``): its accounting as ``corral history``
    shows it, and its spec. Its attempts and events are not kept (Slurm's controller
    likewise forgets a job after ``MinJobAge``; its accounting keeps the totals)."""

    __tablename__ = "archived_jobs"
    __table_args__ = (Index("ix_archived_jobs_user_submit", "user", "submit_time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    gpus: Mapped[int] = mapped_column(Integer)
    submit_time: Mapped[float] = mapped_column(Float)
    first_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    elapsed: Mapped[float] = mapped_column(Float)
    """Seconds its attempts ran, summed."""
    gpu_hours: Mapped[float] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer)
    preemptions: Mapped[int] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    archived_at: Mapped[float] = mapped_column(Float)


ECHO = "corral_echo"
"""Where a session keeps its events for :attr:`Store.echo` until it commits."""


class JobInputRow(Base):
    """What a batch job was submitted with beyond its spec: the script's text as it was
    at submission (sbatch stores it: an edit or a deletion afterwards changes nothing)
    and the submitting shell's environment (``--export``). Kept once for a job and
    all its array's tasks, under the first job's id, so a 2,000-task array stores
    them once."""

    __tablename__ = "job_inputs"

    job_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    script: Mapped[str | None] = mapped_column(Text, nullable=True)
    environment: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float)
    job_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    kind: Mapped[str] = mapped_column(String(32))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(32))
    gpus: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default="up")
    failures: Mapped[int] = mapped_column(Integer, default=0)
    """Node failures in a row (reset by a clean exit)."""
    virtual: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
    """Why it is drained (an admin's words, failures in a row, a GPU's fault)."""


class MetaRow(Base):
    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


IN_CHUNK = 500
"""Values per ``IN (...)`` of one statement: well under any database's limit on bound
values (PostgreSQL's is 65,535), however many jobs a list names."""


def in_chunks(values: list[int]) -> Iterator[list[int]]:
    """``values`` in pieces of :data:`IN_CHUNK`, one statement's worth each."""
    for k in range(0, len(values), IN_CHUNK):
        yield values[k : k + IN_CHUNK]


CACHE_ENTRIES = 256
"""What :meth:`Store.cached` keeps at most."""
CACHE_WEIGHT = 1_000_000
"""What :meth:`Store.cached` keeps at most in weight (cells, for listings: tens of
megabytes): a few listings of ten thousand jobs beside a dashboard's pages, and
no more however many different listings are asked for."""
_WROTE = "corral_wrote"
_READS = ("SELECT", "PRAGMA", "EXPLAIN", "SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "SHOW")
T = TypeVar("T")


def _note_writes(conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
    """Mark a connection that ran anything but a read (counted when it is checked in)."""
    if not statement.lstrip()[:9].upper().startswith(_READS):
        conn.info[_WROTE] = True


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class Encoded(dict[str, Any]):
    """A JSON column's value whose text is made already: the rows of one statement
    that share a value, or differ in one field (a 2,000-task array's specs and its
    events, whose encoding one row at a time was a third of the submission)."""

    __slots__ = ("text",)

    def __init__(self, value: dict[str, Any], text: str) -> None:
        super().__init__(value)
        self.text = text


def to_json(value: Any) -> str:
    """The store's JSON encoder: an :class:`Encoded` value's own text, else ``json.dumps``."""
    return value.text if type(value) is Encoded else json.dumps(value)


def encoded_with(value: dict[str, Any], key: str, values: list[Any]) -> list[dict[str, Any]]:
    """``value`` with ``key`` set to each of ``values`` (whole numbers), each carrying its
    JSON text made from one encoding of ``value`` (plain copies where the key's place
    cannot be found once in that text)."""
    mark = -7_193_311_777  # (a number no spec holds, found once or not used)
    text = json.dumps({**value, key: mark})
    head, found, tail = text.partition(f"{json.dumps(key)}: {mark}")
    if not found or str(mark) in tail:
        return [{**value, key: v} for v in values]
    return [Encoded({**value, key: v}, f"{head}{json.dumps(key)}: {int(v)}{tail}") for v in values]


class Store:
    """Sessions on the store, and the few queries more than one part needs."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.clock = clock
        self.echo: Callable[[list[tuple[float, str, int | None, dict[str, Any]]]], None] | None = (
            None
        )
        """Told each transaction's events once it has committed (the service's log)."""
        """What stamps events: the wall clock, or a test's virtual one."""
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(url, future=True, json_serializer=to_json)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self.upgrade = upgrade(self.engine, url, Base.metadata)
        """What opening did to the schema (see :mod:`corral.runtime.storage.migrate`)."""
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.version = 0
        """Counts the transactions that wrote (each counted once its connection is back in
        the pool, after its commit): what was read while it had a value is still what
        the store holds while it keeps it. Writes from this process only (the service
        is the store's one writer while it holds the store's lock)."""
        self._cache: OrderedDict[Hashable, tuple[int, Any, int]] = OrderedDict()
        self._cache_weight = 0
        self._cache_lock = threading.Lock()
        event.listen(self.engine, "before_cursor_execute", _note_writes)
        event.listen(self.engine, "checkin", self._count_write)
        self.epoch = self._epoch()

    def _count_write(self, _dbapi_connection: Any, record: Any) -> None:
        if record.info.pop(_WROTE, False):
            with self._cache_lock:
                self.version += 1

    def cached(
        self, key: Hashable, compute: Callable[[], T], weigh: Callable[[T], int] | None = None
    ) -> T:
        """``compute()``, or what it gave for ``key`` when nothing has been written since.

        ``compute`` opens its own transaction, after the count is read here, so what
        it reads is at least as new as the count it is kept under: a write committed
        meanwhile makes the entry look older than it is, never newer. The latest
        entries are kept, at most :data:`CACHE_ENTRIES` of them and
        :data:`CACHE_WEIGHT` in all by ``weigh`` (each 1 without it): a dashboard's
        polls, or ``corral queue`` again, over ten thousand jobs that did not change
        cost lookups, not queries."""
        with self._cache_lock:
            version = self.version
            hit = self._cache.get(key)
            if hit is not None and hit[0] == version:
                self._cache.move_to_end(key)
                return cast("T", hit[1])
        value = compute()
        weight = 1 if weigh is None else max(1, weigh(value))
        with self._cache_lock:
            old = self._cache.pop(key, None)
            if old is not None:
                self._cache_weight -= old[2]
            if weight <= CACHE_WEIGHT:
                self._cache[key] = (version, value, weight)
                self._cache_weight += weight
            while len(self._cache) > CACHE_ENTRIES or self._cache_weight > CACHE_WEIGHT:
                self._cache_weight -= self._cache.popitem(last=False)[1][2]
        return value

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back on error."""
        with self._sessions() as session:
            with session.begin():
                yield session
            said = session.info.pop(ECHO, None)
        if said and self.echo is not None:
            self.echo(said)

    def _epoch(self) -> float:
        with self.session() as s:
            row = s.get(MetaRow, "epoch")
            if row is None:
                row = MetaRow(key="epoch", value=repr(time.time()))
                s.add(row)
            return float(row.value)

    def event(self, session: Session, kind: str, job_id: int | None = None, **detail: Any) -> None:
        now = self.clock()
        session.add(EventRow(time=now, job_id=job_id, kind=kind, detail=detail))
        if self.echo is not None:
            session.info.setdefault(ECHO, []).append((now, kind, job_id, detail))

    def events(self, session: Session, kind: str, jobs: list[int], **detail: Any) -> None:
        """The same event for many jobs, in one statement (a bulk action's ten thousand;
        said in the log as one, with their count and first and last ids)."""
        if jobs:
            now = self.clock()
            text = Encoded(detail, json.dumps(detail))  # (one encoding for every row)
            rows = [{"time": now, "job_id": j, "kind": kind, "detail": text} for j in jobs]
            session.connection().execute(insert(EventRow.table()), rows)  # (not the ORM's
            # bulk path: a 2,000-task array's events cost it 4x more)
            if self.echo is not None:
                many = {"jobs": len(jobs), "ids": f"{jobs[0]}-{jobs[-1]}", **detail}
                first = (now, kind, jobs[0], detail) if len(jobs) == 1 else (now, kind, None, many)
                session.info.setdefault(ECHO, []).append(first)

    def closed_attempt_seconds(
        self, session: Session, jobs: list[int], per_gpu: bool = False
    ) -> dict[int, float]:
        """Seconds each job's ended attempts ran, summed (x their GPUs when ``per_gpu``:
        the 2D attained service policies rank by)."""
        out: dict[int, float] = {}
        if not jobs:
            return out
        closed = session.scalars(
            select(AttemptRow).where(AttemptRow.job_id.in_(jobs), AttemptRow.end_time.is_not(None))
        )
        for att in closed:
            span = max((att.end_time or att.start_time) - att.start_time, 0.0)
            out[att.job_id] = out.get(att.job_id, 0.0) + (len(att.gpus) if per_gpu else 1) * span
        return out

    def open_attempts(self, session: Session) -> list[AttemptRow]:
        return list(session.scalars(select(AttemptRow).where(AttemptRow.end_time.is_(None))))

    def dispose(self) -> None:
        self.engine.dispose()
