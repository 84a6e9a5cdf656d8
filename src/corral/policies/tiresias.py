"""Tiresias: discretised 2D-LAS and 2D-Gittins (Gu et al., NSDI '19).

Durations are unknown, so a job's priority comes from its 2D attained service
(GPUs x seconds run, counted since its last promotion). The service axis is
cut into K queues by thresholds: every job starts in queue 0 and moves down
when its service crosses the queue's threshold. Queues are served in order;
within a queue, 2D-LAS runs jobs first come first served (a running job keeps
its place ahead of waiting ones, so equals do not thrash) and 2D-Gittins runs
the highest Gittins index first. Jobs are walked in that order and each takes
its GPUs if they are still free; a running job that no longer fits is
preempted and a waiting job that does not fit is skipped so smaller ones
behind it can start.

Starvation guard (PROMOTE_KNOB): a job that has run, and since then waited
longer than ``promote_knob`` x its run time, goes back to queue 0 with its
queue service reset. Off (0) by default, as in Tiresias' simulator.

Placement (unless ``--placement`` says otherwise) is Tiresias' own: jobs of
placement-sensitive models are consolidated, others take any free GPUs, and
models on neither list follow ``unknown_models`` (``consolidate`` or ``any``).

Defaults are those of Tiresias' simulator: 3 queues, thresholds 3250 / 7200 /
18000 GPU-seconds (with K queues the first K-1 thresholds are used, so the
default demotes at 3250 and 7200), Gittins delta 3250.

Three options reproduce how Tiresias' published simulator behaves where it
differs from the policy as described (``--preset tiresias-sim`` sets all):

* ``queue_order=list``: each queue is a list. Arriving, demoted and promoted
  jobs are appended at its end, behind the jobs already waiting there (so a
  demoted job that is still running is walked after them in the next pass),
  and after each pass running jobs move ahead of waiting ones, each group in
  its list order. The default, ``entry``, keeps a running job ahead of the
  waiting jobs of its queue at all times, in order of queue entry.
* ``demotion_wakeup=run-time``: the simulator computes when a running job will
  next cross a threshold from its run time instead of its GPU time, so a
  multi-GPU job's demotion is noticed only at the next event after it
  happens (its own quirk; the default, ``exact``, wakes at the crossing).
* ``index_table=stepped`` (2D-Gittins): the simulator's own Gittins table, one
  rounded entry per sample size read as a step function of whole
  GPU-seconds (:class:`~corral.estimate.gittins.SteppedGittinsTable`); the
  default, ``exact``, evaluates the index at the attained service itself.

``queue_order=strict`` (LAS) is how Pollux's artifact runs Tiresias
(``--preset pollux-sim``): jobs in order of queue entry alone, so a waiting
job that entered first takes its GPUs back from a running one that entered
after it, each such preemption paying the restart cost.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import numpy as np

from corral.errors import CorralError
from corral.estimate.gittins import (
    DEFAULT_DELTA,
    GittinsTable,
    OnlineGittins,
    SteppedGittinsTable,
    load_distribution,
)
from corral.model.plan import Plan
from corral.model.state import DONE, PENDING, SchedulerState
from corral.placement.sensitivity import ModelAware
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import Policy
from corral.policies.options import Option
from corral.policies.priority import on_grid, priority_pass, tie_resolution
from corral.timespan import span

DEFAULT_THRESHOLDS = (3250.0, 7200.0, 18000.0)


def parse_thresholds(value: Any) -> tuple[float, ...]:
    """Thresholds from a tuple or from text such as ``3250,7200`` or ``3250/7200``."""
    if isinstance(value, int | float):
        items: list[Any] = [value]
    elif isinstance(value, str):
        items = [v for v in value.replace("/", ",").replace(";", ",").split(",") if v.strip()]
    else:
        items = list(value)
    try:
        out = tuple(float(v) for v in items)
    except ValueError:
        raise ValueError(f"thresholds must be numbers, got '{value}'") from None
    if any(b <= a for a, b in itertools.pairwise(out)) or any(v <= 0 for v in out):
        raise ValueError(f"thresholds must be positive and increasing, got {value}")
    return out


class TiresiasLas(Policy):
    name = "tiresias-las"
    options: ClassVar[dict[str, Option]] = {
        "queues": Option("number of priority queues (K)", "integer", low=1),
        "thresholds": Option(
            "attained GPU-seconds at which a job moves down, comma-separated (the first K-1 are "
            "used)",
            "text",
        ),
        "promote_knob": Option(
            "a job waiting longer than this x its run time returns to the top queue (0: never)",
            low=0,
        ),
        "unknown_models": Option(
            "placement of models not known to be placement-sensitive or not",
            "choice",
            choices=("consolidate", "any"),
        ),
        "queue_order": Option(
            "within a queue: by entry time with running jobs first, as lists where a demoted "
            "job joins the end (Tiresias' simulator), or by entry time alone (Pollux's "
            "artifact)",
            "choice",
            choices=("entry", "list", "strict"),
        ),
        "demotion_wakeup": Option(
            "when a running job's demotion is noticed: exactly, or from run time as Tiresias' "
            "simulator does",
            "choice",
            choices=("exact", "run-time"),
        ),
    }
    description = "Tiresias discretised 2D-LAS: K queues by GPU-time, FIFO within a queue"

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        queues: int = 3,
        thresholds: Any = DEFAULT_THRESHOLDS,
        promote_knob: float = 0.0,
        unknown_models: str = "consolidate",
        queue_order: str = "entry",
        demotion_wakeup: str = "exact",
    ) -> None:
        if queue_order not in ("entry", "list", "strict"):
            raise ValueError(f"queue_order must be 'entry', 'list' or 'strict', got {queue_order}")
        if demotion_wakeup not in ("exact", "run-time"):
            raise ValueError(
                f"demotion_wakeup must be 'exact' or 'run-time', got {demotion_wakeup}"
            )
        try:
            default = ModelAware(unknown_models)
        except CorralError as exc:
            raise ValueError(str(exc)) from None
        super().__init__(placement or default)
        if int(queues) != queues or queues < 1:
            raise ValueError(f"queues must be a whole number >= 1, got {queues}")
        limits = parse_thresholds(thresholds)
        if len(limits) < queues - 1:
            raise ValueError(f"{queues} queues need {queues - 1} thresholds, got {len(limits)}")
        if promote_knob < 0:
            raise ValueError(f"promote_knob must be >= 0, got {promote_knob}")
        self.queues = int(queues)
        self.thresholds = np.asarray(limits[: self.queues - 1], dtype=np.float64)
        self.promote_knob = float(promote_knob)
        self.list_order = queue_order == "list"
        self.strict_order = queue_order == "strict"
        self.run_time_wakeup = demotion_wakeup == "run-time"
        self._n = -1

    @property
    def ordered(self) -> bool:
        """True when the within-queue key alone orders jobs (Gittins, list
        order, or strict entry order, where a waiting job that entered its queue
        first takes its GPUs from a running one that entered later); False keeps
        running jobs ahead of waiting ones of the same queue (LAS)."""
        return self.list_order or self.strict_order

    # ------------------------------------------------------------ per job
    def _init(self, n: int) -> None:
        self._n = n
        self.base = np.zeros(n)
        """Attained service at the last promotion (queue service = attained - base)."""
        self.ref = np.full(n, np.nan)
        """When the job first ran since its last promotion (its waiting clock starts there)."""
        self.queue = np.full(n, -1, dtype=np.int64)
        self.entry = np.zeros(n)
        """When the job entered its current queue."""
        self.promotions = np.zeros(n, dtype=np.int64)
        self.svc = np.zeros(n)
        """Queue service (GPU-seconds since the last promotion), refreshed each pass."""
        self._mark = np.zeros(n, dtype=bool)
        self.pos = np.zeros(n)
        """List order: a job's place in its queue's list (``queue_order=list``)."""
        self._appended = 0.0

    def view(self, state: SchedulerState, job: int) -> dict[str, str]:
        if job >= len(getattr(self, "queue", ())) or self.queue[job] < 0:
            return {}
        queues = len(self.thresholds) + 1
        level = int(self.queue[job])
        limit = (
            f", moves down at {span(self.thresholds[level])}"
            if level < len(self.thresholds)
            else ""
        )
        return {
            "queue": f"{level + 1} of {queues} (1 runs first)",
            "service in this queue": f"{span(self.svc[job])} GPU-time{limit}",
            "promotions": str(int(self.promotions[job])),
        }

    def queue_service(self, state: SchedulerState, idx: np.ndarray) -> np.ndarray:
        """Service of jobs seen this pass (running or pending when the pass began)."""
        out: np.ndarray = self.svc[idx]
        return out

    def _update_queues(
        self, state: SchedulerState, running: np.ndarray, pending: np.ndarray
    ) -> bool:
        """Refresh the queue service and queue of every job seen this pass;
        True when a running job moved to another queue."""
        now = state.now
        ref = self.ref
        fresh = running[np.isnan(ref[running])]
        ref[fresh] = state.seg_start[fresh]
        both = np.concatenate((running, pending))
        base = self.base
        if self.promote_knob > 0 and len(pending):
            executed = (state.attained_base[pending] - base[pending]) / state.gpus[pending]
            waited = now - ref[pending] - executed
            promote = (
                (self.queue[pending] > 0)
                & (executed > 0)
                & (waited >= self.promote_knob * executed)
            )
            up = pending[promote]
            base[up] = state.attained_base[up]
            ref[up] = np.nan
            self.queue[up] = 0
            self.entry[up] = now
            self.promotions[up] += 1
        # a waiting job holds no GPUs, so its attained service is its base: one
        # expression serves both groups
        svc = state.attained(both) - base[both]
        self.svc[both] = svc
        old_q = self.queue[both]
        # (to the millisecond: a job whose service reached a threshold at the instant
        # it was due to is in the lower queue, whichever way the sums rounded)
        new_q = tie_resolution(self.thresholds).searchsorted(tie_resolution(svc), side="right")
        moved = (new_q != old_q).nonzero()[0]
        if len(moved):
            jobs = both[moved]
            arrived = old_q[moved] < 0
            self.entry[jobs] = np.where(arrived, state.submit[jobs], now)
            if self.list_order:
                # appended at the end of their new queue: arrivals first, then the
                # jobs that moved between queues, each in submit order
                new = jobs[np.lexsort((jobs, ~arrived))]
                self.pos[new] = self._appended + np.arange(len(new))
                self._appended += len(new)
            self.queue[both] = new_q
        return bool(len(moved)) and int(moved[0]) < len(running)  # running jobs come first

    def _next_change(
        self, state: SchedulerState, running: np.ndarray, pending: np.ndarray
    ) -> float:
        """The next instant a job crosses a threshold or becomes due for promotion."""
        now = state.now
        best = np.inf
        q = self.queue[running]
        lower = (q < self.queues - 1).nonzero()[0]
        if len(lower):
            r = running[lower]
            gpus = state.gpus[r]
            service = self.queue_service(state, r)
            limits = self.thresholds[q[lower]]
            if self.run_time_wakeup:  # the peer's reading: run time against GPU-time limits
                left = np.floor(np.maximum(limits - service / gpus, 0.0) / gpus)
            else:
                left = np.maximum(limits - service, 0.0) / gpus
            best = min(best, now + float(np.minimum.reduce(left)))
        if self.promote_knob > 0 and len(pending):
            executed = (state.attained_base[pending] - self.base[pending]) / state.gpus[pending]
            waited = now - self.ref[pending] - executed
            due = (self.queue[pending] > 0) & (executed > 0)
            if due.any():
                at = now + self.promote_knob * executed[due] - waited[due]
                best = min(best, float(np.min(at)))
        return best

    # ------------------------------------------------------------ ranking
    def within_queue_key(
        self, state: SchedulerState, idx: np.ndarray, running: bool
    ) -> tuple[np.ndarray, ...]:
        """FIFO by queue entry, running jobs ahead of waiting ones (or list order)."""
        return (self.pos[idx] if self.list_order else self.entry[idx],)

    def schedule(self, state: SchedulerState) -> Plan:
        n = len(state.submit)
        if self._n != n:
            self._init(n)
        running = state.running.array()
        pending = state.pending.array()
        self._before_pass(state)
        running_moved = self._update_queues(state, running, pending)
        within = self._within_key_of_all(state, running, pending)
        if within is not None:
            # queue, then (LAS) running jobs ahead of waiting ones, then the
            # within-queue key, ties in submit order: one key for every
            # candidate, its status saying which it is
            order = within

            def rank(idx: np.ndarray) -> tuple[np.ndarray, ...]:
                primary = self.queue[idx] * 2
                if not self.ordered:
                    primary += state.status[idx] == PENDING
                return (primary, order[idx])

            builder = priority_pass(state, self.placement, rank, running_key=rank)
        else:

            def key(running_flag: bool) -> Any:
                def rank(idx: np.ndarray) -> tuple[np.ndarray, ...]:
                    # queue first; within LAS queues running jobs stay ahead of waiting ones
                    primary = self.queue[idx] * 2 + (0 if running_flag or self.ordered else 1)
                    return (primary, *self.within_queue_key(state, idx, running_flag))

                return rank

            builder = priority_pass(state, self.placement, key(False), running_key=key(True))
        plan = builder.plan
        starts = np.fromiter(plan.starts, dtype=np.int64, count=len(plan.starts))
        if len(starts):  # its waiting clock starts now (running jobs' was set above)
            fresh = starts[np.isnan(self.ref[starts])]
            self.ref[fresh] = state.now
        changed = bool(plan.stops) or bool(len(starts))
        if changed:
            mark = self._mark
            stops = np.asarray(plan.stops, dtype=np.int64)
            mark[stops] = True
            now_running = np.concatenate((running[~mark[running]], starts))
            mark[stops] = False
            still_pending = pending
            if self.promote_knob > 0 or self.list_order:  # only these read the waiting jobs
                mark[starts] = True
                still_pending = np.concatenate((pending[~mark[pending]], stops))
                mark[starts] = False
        else:
            now_running, still_pending = running, pending
        if self.list_order and self._relist(changed or running_moved):
            # running jobs move ahead of waiting ones, each group in list order
            for group in (now_running, still_pending):
                ordered = group[self._list_order(state, group)]
                self.pos[ordered] = self._appended + np.arange(len(ordered))
                self._appended += len(ordered)
        wake = self._next_change(state, now_running, still_pending)
        return builder.build(wake if np.isfinite(wake) and wake > state.now else None)

    def _before_pass(self, state: SchedulerState) -> None:
        """Hook for subclasses (the Gittins policy learns from finished jobs here)."""

    def _within_key_of_all(
        self, state: SchedulerState, running: np.ndarray, pending: np.ndarray
    ) -> np.ndarray | None:
        """This pass's within-queue key of every job, indexed by job, where one
        array serves running and waiting jobs alike with ties in submit order
        (then a pass ranks all candidates in one call); None sends the pass
        down the general path, :meth:`within_queue_key` per group. LAS: the
        list position or the time the job entered its queue."""
        return self.pos if self.list_order else self.entry

    def _list_order(self, state: SchedulerState, group: np.ndarray) -> np.ndarray:
        """List order: how a group (running or waiting jobs) is laid out after a
        pass, as positions into ``group``. LAS keeps its lists' order."""
        out: np.ndarray = self.pos[group].argsort(kind="stable")
        return out

    def _relist(self, changed: bool) -> bool:
        """Whether the lists need laying out again after a pass. LAS' lists
        already have running jobs ahead of waiting ones unless a job started or
        stopped, or a running job was appended to a new queue (``changed``;
        arrivals are appended behind everything, where waiting jobs belong)."""
        return changed


class TiresiasGittins(TiresiasLas):
    name = "tiresias-gittins"
    options: ClassVar[dict[str, Option]] = {
        "queue_order": Option(
            "within a queue: by entry time, or as lists where a demoted job joins the end "
            "(Tiresias' simulator)",
            "choice",
            choices=("entry", "list"),
        ),
        "distribution": Option(
            "GPU-time distribution for the Gittins index: online, yarn-gput1000/5000/10000 or a "
            "CSV with a duration column",
            "text",
        ),
        "delta": Option("service quantum of the Gittins index (GPU-seconds)", above=0),
        "ties": Option("order of jobs with equal indices", "choice", choices=("fifo", "lifo")),
        "index_table": Option(
            "evaluate the index exactly, or read Tiresias' simulator's rounded table",
            "choice",
            choices=("exact", "stepped"),
        ),
    }
    description = "Tiresias discretised 2D-Gittins: K queues, Gittins index within a queue"

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        queues: int = 3,
        thresholds: Any = DEFAULT_THRESHOLDS,
        promote_knob: float = 0.0,
        unknown_models: str = "consolidate",
        distribution: str = "online",
        delta: float = DEFAULT_DELTA,
        ties: str = "fifo",
        queue_order: str = "entry",
        demotion_wakeup: str = "exact",
        index_table: str = "exact",
    ) -> None:
        if queue_order not in ("entry", "list"):  # (strict order is LAS's: Gittins ranks by index)
            raise ValueError(f"queue_order must be 'entry' or 'list', got {queue_order}")
        super().__init__(
            placement,
            queues,
            thresholds,
            promote_knob,
            unknown_models,
            queue_order,
            demotion_wakeup,
        )
        if ties not in ("fifo", "lifo"):
            raise ValueError(f"ties must be 'fifo' or 'lifo', got {ties}")
        if index_table not in ("exact", "stepped"):
            raise ValueError(f"index_table must be 'exact' or 'stepped', got {index_table}")
        self.ties = ties
        self.distribution = distribution
        stepped = index_table == "stepped"
        self.online: OnlineGittins | None = None
        self.table: GittinsTable | SteppedGittinsTable | None = None
        try:
            if distribution == "online":
                self.online = OnlineGittins(delta, stepped=stepped)
            else:
                self.table = load_distribution(distribution, delta, stepped)
        except CorralError as exc:
            raise ValueError(str(exc)) from None
        self._seen = 0
        self._minus_index = np.zeros(0)

    @property
    def ordered(self) -> bool:
        return True

    def _init(self, n: int) -> None:
        super()._init(n)
        self._minus_index = np.zeros(n)
        """Minus each job's Gittins index (the key that ranks a higher index
        first), valid while its service is ``_index_svc``."""
        self._index_svc = np.full(n, np.nan)
        """The service each job's index was taken at (NaN: none under the current table)."""

    def _before_pass(self, state: SchedulerState) -> None:
        if self.online is None:
            return
        new = state.finished[self._seen :]
        if new:
            idx = np.asarray(new, dtype=np.int64)
            self.online.add(on_grid(state.attained_base[idx][state.status[idx] == DONE]))
            self._seen = len(state.finished)
        table = self.online.table()
        if table is not self.table:
            self._index_svc.fill(np.nan)
        self.table = table

    def within_queue_key(
        self, state: SchedulerState, idx: np.ndarray, running: bool
    ) -> tuple[np.ndarray, ...]:
        """Highest index first; equal indices in submit order (or reversed,
        ``ties=lifo``). In list order, jobs submitted at the same instant keep
        their places in the list (the simulator sorts its lists in place, with a
        stable sort)."""
        service = self.queue_service(state, idx)
        if self.table is None:
            # nothing learned yet: every index is equal, so jobs keep their
            # order (a least-attained key here would swap a running job for a
            # waiting one at every pass; live, passes come every few seconds)
            primary = np.zeros(len(idx))
        elif running:
            primary = -self.table.index(on_grid(service))
        else:
            self._refresh_index(idx, service)
            primary = self._minus_index[idx]
        sign = 1.0 if self.ties == "fifo" else -1.0
        if self.list_order:
            return (primary, sign * state.submit[idx], self.pos[idx])
        return (primary, sign * idx)

    def _relist(self, changed: bool) -> bool:
        return True  # indices move with service: the sort order does too

    def _within_key_of_all(
        self, state: SchedulerState, running: np.ndarray, pending: np.ndarray
    ) -> np.ndarray | None:
        """Minus the Gittins index, from one table lookup for the jobs whose
        service moved since their index was taken (running jobs, and waiting
        jobs that ran or arrived since); the general path where ties are LIFO
        or lists keep their own order."""
        if self.list_order or self.ties != "fifo":
            return None
        if self.table is None:  # nothing learned yet: every index is equal
            return np.zeros(len(self._minus_index))
        both = np.concatenate((running, pending))
        self._refresh_index(both, self.svc[both])
        return self._minus_index

    def _list_order(self, state: SchedulerState, group: np.ndarray) -> np.ndarray:
        """The simulator's lists after a pass: each sorted as it was walked."""
        return np.lexsort(tuple(reversed(self.within_queue_key(state, group, running=True))))

    def _refresh_index(self, idx: np.ndarray, service: np.ndarray) -> None:
        """Bring ``_minus_index`` of jobs ``idx`` to their ``service``, looking up
        in the table only those whose service moved since their index was taken."""
        assert self.table is not None
        stale = (~(self._index_svc[idx] == service)).nonzero()[0]  # NaN: never computed
        if len(stale):
            jobs = idx[stale]
            self._minus_index[jobs] = -self.table.index(on_grid(service[stale]))
            self._index_svc[jobs] = service[stale]
