"""What the scheduler loop knows: its parts, its view of jobs and GPUs, and the
small helpers every stage of the loop uses (see :mod:`corral.runtime.loop.scheduler`)."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

import numpy as np
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError, StatementError

from corral.model.cluster import Cluster, Links, Node
from corral.model.jobs import JobStatus
from corral.model.state import DONE, FAILED, REJECTED
from corral.perf.memory import gpu_memory_gb, memory_left
from corral.policies import POLICIES, make_policy, policy_key, policy_options
from corral.policies.base import Policy
from corral.runtime.execution.executor import (
    Executor,
    GpuSlot,
)
from corral.runtime.execution.identity import check_identities
from corral.runtime.jobspec.config import ServiceConfig
from corral.runtime.jobspec.specs import RoundOf
from corral.runtime.loop.inbox import (
    NO_WORK_LEFT,
    Answers,
    Inbox,
    MemoryReport,
    NodesChanged,
    PassAsked,
    ViewAsked,
    WorkLeft,
)
from corral.runtime.loop.job_book import Attempt, JobBook, report_illegal
from corral.runtime.loop.live_state import LiveJobs
from corral.runtime.loop.loop_metrics import LoopMetrics
from corral.runtime.loop.records import Faulted, check_record
from corral.runtime.loop.round_policy import KEEPER_AFFINITY, LiveRounds, plans_rounds
from corral.runtime.storage.store import Store

if TYPE_CHECKING:
    from corral.runtime.execution.gpu_driver import GpuUsage
    from corral.runtime.jobspec.specs import JobSpec
    from corral.runtime.storage.store import JobRow

T = TypeVar("T")
TERMINAL = [s.value for s in JobStatus if s.terminal]
NOT_ENDED = [s.value for s in JobStatus if not s.terminal]
"""The states of jobs not yet ended, named (a query by them reads an index's ranges)."""
VIEW_WAIT = 2.0
"""Seconds a job's page waits for the loop to answer for its policy's view."""
PASS_WAIT = 5.0
"""Seconds a route that stored a request waits for the pass that carries it out."""
VIEW_WAKE_EVERY = 0.5
"""Job pages wake the loop at most this often, whoever asks and however fast (a
question asked meanwhile is answered by the next pass: the tick's, or the next wake)."""


@dataclass
class Turns:
    """Jobs on one GPU set taking turns (Gandiva's time-slicing), by job id; the
    loop keeps them by the job that holds the GPUs."""

    members: list[int]
    """The jobs on the set in the order they joined, the holder first."""
    quantum: float
    turn: int
    """The job whose turn it is."""
    switch_at: float | None = None
    """When the turn passes to the next (None until it has begun)."""


def store_trouble(exc: BaseException) -> bool:
    """Whether ``exc`` is the store's own trouble (a full disk, a lost connection,
    a lock), not a job's value the store could not take."""
    return isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, SQLAlchemyError) and not isinstance(exc, StatementError)
    )


class JobFault(Exception):
    """The loop failed while handling one job (raised out of the pass by
    :meth:`LoopState.handling`): the pass is undone, and the job set aside."""

    def __init__(self, job: int, what: str, exc: BaseException) -> None:
        self.job = job
        self.why = f"while {what}: {type(exc).__name__}: {exc}"[:400]
        super().__init__(f"job {job}: {self.why}")


def cluster_from_slots(slots: list[GpuSlot], links: Links | None = None) -> Cluster:
    """The policy's cluster: one node per executor node, GPUs numbered as the slots,
    linked as the driver reports (None: the model's default)."""
    nodes: list[Node] = []
    for slot in slots:
        if nodes and nodes[-1].name == slot.node:
            last = nodes[-1]
            if last.gpu_type != slot.gpu_type:
                raise ValueError(f"node {slot.node} mixes GPU types")
            nodes[-1] = Node(last.name, last.gpu_type, last.gpus + 1)
        else:
            nodes.append(Node(slot.node, slot.gpu_type, 1))
    return Cluster("live", nodes, links=links)


class LoopState:
    """What the scheduler loop knows, and the helpers every stage uses. The stages
    (:mod:`~corral.runtime.loop.scheduler` lists them) are plain objects handed this
    state; the jobs themselves are in its :class:`~corral.runtime.loop.job_book.JobBook`."""

    def __init__(
        self,
        config: ServiceConfig,
        store: Store,
        executor: Executor,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.store = store
        self.executor = executor
        self.clock = clock
        self.slots = executor.slots()
        self.cluster = cluster_from_slots(self.slots, executor.links())
        self.book = JobBook(LiveJobs(self.cluster), report_illegal)
        """Every job the loop holds: its phase, attempt, sharing, measurements."""
        self.policy = self.new_policy()
        self.holders: dict[int, int] = {}
        """GPU -> job whose process runs on it (physical use, not the plan's view)."""
        self.reserved: set[int] = set()
        """GPUs of drained nodes, taken away from the policy."""
        self.failed_gpus: dict[int, str] = {}
        """GPUs the driver reported failed -> the reason their node was drained for."""
        self.gpus_polled_at = -math.inf
        """When the driver was last asked about the GPUs' health and use."""
        self.gpu_readings: Mapping[int, GpuUsage] = MappingProxyType({})
        """GPU -> the driver's last reading of its use (empty without a driver); swapped
        whole at each poll, so the API's metrics read it from their thread."""
        self.job_usage: Mapping[int, tuple[float, float | None]] = MappingProxyType({})
        """Running job -> (utilisation %, GB of GPU memory its processes hold) as the
        driver last measured them; swapped whole at each poll."""
        self.lost_nodes: frozenset[str] = frozenset()
        """Nodes the executor has lost (Ray's dead nodes), as of the last node sync."""
        self.usable = np.ones(len(self.slots), dtype=bool)
        """GPUs on nodes that are not drained (busy or not)."""
        self.ended_of: dict[int, tuple[str, bool]] = {}
        """Jobs that queued jobs wait for and that have ended -> (status, has started):
        an ended job never changes, so each pass asks the store only about the others
        (a job may name twenty thousand)."""
        self.observed_at = 0.0
        """When heartbeats' progress was last read into the policy's state."""
        self.turns: dict[int, Turns] = {}
        """Time-sliced pairs, by guest: whose turn it is and until when."""
        self.metrics = LoopMetrics()
        """Pass times, for the API's ``/metrics``."""
        self.turn_wakeup: float | None = None
        """When the next time-sliced pair swaps turns."""
        self.inbox = Inbox()
        """What the API's threads post for the loop (a heartbeat's GPU memory, a node
        drained, a job page's question for the policy's view)."""
        self._view_woke_at = -math.inf
        """When a job page last woke the loop (monotonic seconds)."""
        self.loop_thread: threading.Thread | None = None
        """The thread the loop runs on (None: stepped by its caller, as tests do)."""
        self.answers = Answers()
        """What the API answers from the loop's view, published after each pass."""
        self.fenced: set[int] = set()
        """Free GPUs taken from the policy because an exclusive job runs on their node."""
        self.exclusive_skipped: set[int] = set()
        """Exclusive jobs whose start the last plan gave but their nodes were not idle."""
        self.identities = check_identities(config)
        """API user -> Unix user their jobs run as (the service runs as root)."""
        self.user_configs = {u.name: u for u in config.users}
        """API user -> their config (per-user limits, fair-share shares)."""
        self.share_bonus: dict[str, int] = {}
        """User -> priority points their fair-share factor gives their jobs now."""
        self.shares_at = -math.inf
        """When the users' fair-share factors were last computed."""
        self.seen = 0
        self.next_wakeup: float | None = None
        self.dirty = True
        self.wake = threading.Event()
        self._passes = 0
        self._cv = threading.Condition()
        self.awaiting: list[PassAsked] = []
        """Routes waiting for the end of a pass that has read what they stored
        (answered at the end of the pass that took them from the inbox, or of the
        next one that completes if it fails)."""
        self.errors = 0
        self.faulted: dict[int, str] = {}
        """Jobs the loop failed on while handling them -> what it was doing: each is
        set aside (stopped if running, then FAILED) as the loop resyncs (kept across
        resyncs, forgotten once the job has ended)."""
        self.faults = 0
        """Passes undone because the loop failed on one job (each set aside)."""
        self.last_fault: str | None = None
        """The last such failure: the job and what the loop was doing."""
        self.resync_due = False
        """A pass failed: the loop's memory may differ from the store, so the next
        step forgets it and recovers from the store first."""
        self.nodes_dirty = False

    @property
    def live(self) -> LiveJobs:
        """The policy's state (the book keeps it in step with its records)."""
        return self.book.live

    @live.setter
    def live(self, state: LiveJobs) -> None:
        """A rebuilt policy state: the book's jobs are put where they belong again."""
        self.book.rebase(state)

    @property
    def attempts(self) -> Mapping[int, Attempt]:
        """Job -> its process in flight (the book's index; read-only)."""
        return self.book.attempts

    def new_policy(self) -> Policy:
        options = dict(self.config.policy_options)
        if plans_rounds(self.config.policy):
            rounds = LiveRounds.named(self.config.policy, **options)
            rounds.round_of = self._round_ref
            if self.config.workers.keep:  # a task goes where its job is held, all else equal
                rounds.switch_s = KEEPER_AFFINITY
            return rounds
        if self.config.vcs is not None and "quotas" in policy_options(
            POLICIES[policy_key(self.config.policy)]
        ):
            options.setdefault("quotas", self.config.vcs)
        return make_policy(
            self.config.policy, self.config.placement, admission=self.config.admission, **options
        )

    def _round_ref(self, i: int) -> RoundOf | None:
        """The job and round the job in state row ``i`` is a task of (None: not a task)."""
        ids = self.live.ids
        return self.book.peek(ids[i]).round_ref if i < len(ids) else None

    def spec_of(self, row: JobRow) -> JobSpec:
        """The job's spec as checked where it entered the loop (raises BadRecord
        when the stored record is unusable)."""
        if row.id in self.faulted:
            raise Faulted(row.id, self.faulted[row.id])
        rec = self.book.get(row.id)
        spec = None if rec is None else rec.spec
        if spec is None:
            spec = check_record(row)
            if rec is not None:
                rec.spec = spec
        return spec

    def rel(self, t: float) -> float:
        """Wall-clock time as the policy's clock (seconds since the store's epoch)."""
        return t - self.store.epoch

    def contained(
        self, a: Attempt, what: str, call: Callable[..., T], *args: object
    ) -> tuple[bool, T | None]:
        """An executor call about one attempt, whose failure is that attempt's and never
        the pass's: (True, its value), or (False, None) when it raised. A failure is
        recorded once per attempt and kind of call (an ``executor_error`` event and a
        line in the log) and the call is made again at the next pass; the attempt keeps
        its GPUs meanwhile (a process the service cannot see may still be running on
        them). The store's own trouble still fails the pass (the loop then resyncs)."""
        try:
            return True, call(*args)
        except SQLAlchemyError:
            raise
        except Exception as exc:
            if what not in a.troubles:
                a.troubles.add(what)
                error = f"{type(exc).__name__}: {exc}"[:300]
                print(f"corral: job {a.job}: the executor's {what} failed: {error}",
                      file=sys.stderr)  # fmt: skip
                with self.store.session() as s:
                    self.store.event(
                        s, "executor_error", a.job, call=what, attempt=a.number, error=error
                    )
            return False, None

    @contextmanager
    def handling(self, job: int, what: str) -> Iterator[None]:
        """The loop's work on one job: an error in it that is not the store's own
        trouble is that job's, raised as :class:`JobFault` (the pass is undone, the
        job set aside, and everyone else's jobs go on at the next pass)."""
        try:
            yield
        except JobFault:
            raise
        except Exception as exc:
            if store_trouble(exc):
                raise
            raise JobFault(job, what, exc) from exc

    def notify(self) -> None:
        self.wake.set()

    def nodes_changed(self) -> None:
        """An admin drained or resumed a node: re-read node states on the next pass
        (any thread)."""
        self.inbox.post(NodesChanged())
        self.wake.set()

    @property
    def passes(self) -> int:
        with self._cv:
            return self._passes

    def answered_by_loop(self) -> bool:
        """Whether a question from this thread is answered by a loop thread (one runs,
        and it is not this one): else the caller reads or returns at once."""
        runs = self.loop_thread
        return runs is not None and runs.is_alive() and runs is not threading.current_thread()

    def after_a_pass(self, timeout: float = PASS_WAIT) -> bool:
        """Wait for the loop to carry out what the caller (an API route, any thread but
        the loop's) has just stored: until the end of a pass that read the store after
        the call. False at once where no loop thread runs (a test stepping the loop,
        a stopped service), and after ``timeout`` if no pass ends (one that long, or
        a loop failing its passes): the caller then answers from the store as it is."""
        if not self.answered_by_loop():
            return False
        asked = PassAsked()
        self.inbox.post(asked)
        self.wake.set()
        try:
            asked.done.result(timeout)
        except FutureTimeout:
            return False
        return True

    def answer_awaiting(self) -> None:
        """The end of a pass: the routes waiting for it are answered (the loop's thread)."""
        awaiting, self.awaiting = self.awaiting, []
        for asked in awaiting:
            asked.done.set_result(None)

    def node_of(self, gpu: int) -> str:
        return self.slots[gpu].node

    def slots_of(self, gpus: Iterable[int]) -> tuple[GpuSlot, ...]:
        return tuple(self.slots[g] for g in gpus)

    def remaining_open(self) -> WorkLeft:
        """The seconds of work the policy believes each job it holds (queued or running,
        not ended) has left, and where the figure comes from, for those with a finite
        figure (the loop's thread; the API reads :attr:`Answers.remaining`). Taken
        whole each pass, so in arrays: a queue of ten thousand costs little."""
        index = self.live.index
        if not index:
            return NO_WORK_LEFT
        jobs = np.fromiter(index.keys(), dtype=np.int64, count=len(index))
        slots = np.fromiter(index.values(), dtype=np.int64, count=len(index))
        st = self.live.state
        keep = ~np.isin(st.status[slots], (DONE, REJECTED, FAILED))
        jobs, left = jobs[keep], st.remaining_time(slots[keep])
        finite = np.isfinite(left)
        records = self.book.records.items()
        sources = {job: r.duration_source for job, r in records if r.duration_source != "default"}
        return WorkLeft(jobs[finite], left[finite], sources)

    def policy_view(self, job: int) -> dict[str, str]:
        """The policy's own view of a queued or running job (empty when it has none);
        on the loop's thread (other threads: :meth:`ask_view`)."""
        i = self.live.index.get(job)
        if i is None or int(self.live.state.gpus[i]) == 0:  # (a CPU-only job is not its)
            return {}
        try:
            return self.policy.view(self.live.state, i)
        except Exception:  # (a policy's view, a plugin's too, never fails a pass or a page)
            return {}

    def ask_view(self, job: int, timeout: float = VIEW_WAIT) -> dict[str, str]:
        """:meth:`policy_view` from any thread: asked through the inbox and answered
        by the loop at the start of its next pass (empty if it does not answer within
        ``timeout``: a pass that long). Read directly where no loop thread runs (a
        test stepping the loop itself, a stopped service)."""
        if not self.answered_by_loop():
            return self.policy_view(job)
        asked = ViewAsked(job)
        self.inbox.post(asked)
        now = time.monotonic()
        if now - self._view_woke_at >= VIEW_WAKE_EVERY:  # (a user polling pages as fast as
            self._view_woke_at = now  # the API answers must not keep the loop passing)
            self.wake.set()
        try:
            return asked.answer.result(timeout)
        except FutureTimeout:
            return {}

    def memory_cap(self, job: int, sharers: dict[int, list[int]]) -> float | None:
        """The share of GPU memory an opportunistic (low-priority) job may use now:
        what the jobs sharing its GPUs (``sharers``: :meth:`gpu_sharers`) leave, by
        their last heartbeats (AntMan's dynamic scaling); its launch figure while
        none of them reports; None for a job that is not opportunistic."""
        rec = self.book.peek(job)
        configured = rec.low_priority
        if configured is None:
            return 1.0 if rec.uncapped else None
        memory = self.book.having("gpu_memory")
        caps = []
        for gpu, jobs in sharers.items():
            if job not in jobs:
                continue
            used = [memory[o] for o in jobs if o != job and o in memory]
            capacity = gpu_memory_gb(self.slots[gpu].gpu_type)
            if used and capacity:
                caps.append(memory_left(sum(used), capacity * 1e9))
        return min(caps) if caps else configured

    def report_memory(self, job: int, used: float) -> None:
        """A heartbeat's GPU memory (bytes per GPU), for the loop's next pass (any thread)."""
        self.inbox.post(MemoryReport(job, used))

    def _read_inbox(self) -> None:
        """What other threads posted: memory reports of jobs still running are kept;
        a change of nodes has their states read again in this pass."""
        for message in self.inbox.take():
            if isinstance(message, NodesChanged):
                self.nodes_dirty = True
            elif isinstance(message, ViewAsked):
                message.answer.set_result(self.policy_view(message.job))
            elif isinstance(message, PassAsked):
                self.awaiting.append(message)
            elif message.job in self.attempts:
                self.book[message.job].gpu_memory = message.used

    def _publish(self) -> None:
        """What the API answers from the loop's view (heartbeats, listings, the
        nodes' view) as of this pass, swapped in whole."""
        capped = {*self.book.having("low_priority"), *self.book.having("uncapped")}
        sharers = self.gpu_sharers()
        self.answers = Answers.of(
            dict(self.book.having("batch_size")),
            {job: self.memory_cap(job, sharers) for job in capped},
            self.remaining_open(),
            {gpu: tuple(jobs) for gpu, jobs in sharers.items()},
        )

    def gpu_use(self) -> dict[int, int]:
        """GPU -> job whose process runs on it now (a copy, safe to read from other threads)."""
        return dict(self.holders)

    def gpu_sharers(self) -> dict[int, list[int]]:
        """GPU -> the jobs on it now: its holder, then any job packed on the holder."""
        holders = dict(self.holders)
        guests: dict[int, list[int]] = {}
        for guest, host in list(self.book.packed_on.items()):
            guests.setdefault(host, []).append(guest)
        return {g: [job, *sorted(guests.get(job, []))] for g, job in holders.items()}
