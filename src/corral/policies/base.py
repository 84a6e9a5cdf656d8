"""What every policy is: a placement strategy plus the logic that ranks jobs.

A policy reads a :class:`~corral.model.state.SchedulerState` and answers with a
:class:`~corral.model.plan.Plan`. It builds the plan with a
:class:`PlanBuilder`, which keeps a scratch copy of the free GPUs so the plan
is consistent by construction (a stopped job's GPUs are free for the jobs the
plan starts; no GPU is handed out twice).
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from corral.model.free_gpus import FreeGPUs
from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.placement.strategies import Consolidate, PlacementStrategy
from corral.policies.admission import ADMIT, Admission, Verdict
from corral.policies.options import Option


class PlanBuilder:
    """Accumulates stops and starts against a scratch copy of the free GPUs."""

    __slots__ = ("_free", "plan", "state")

    def __init__(self, state: SchedulerState) -> None:
        self.state = state
        self.plan = Plan()
        self._free: FreeGPUs | None = None

    @property
    def free(self) -> FreeGPUs:
        if self._free is None:
            self._free = self.state.free.copy()
        return self._free

    @property
    def free_total(self) -> int:
        """How many GPUs are free so far in the plan (without copying the
        free-GPU records when the plan has not touched them yet)."""
        return (self._free if self._free is not None else self.state.free).total

    def stop(self, i: int) -> None:
        """Stop job ``i`` (the guests packed on it are stopped first)."""
        state = self.state
        gpus = state.alloc[i]
        if gpus is None:
            raise ValueError(f"job {i} is not running")
        if state.guest[i] >= 0:
            for guest in state.guests[i]:
                if guest not in self.plan.stops:
                    self.plan.stops.append(guest)
        if state.host[i] < 0:
            self.free.release(gpus)
        self.plan.stops.append(i)

    def unstop(self, i: int) -> None:
        """Undo :meth:`stop` of job ``i`` before the plan is built: it keeps its
        GPUs (which must still be free in the plan; a guest stopped with it
        stays stopped)."""
        gpus = self.state.alloc[i]
        if gpus is None or i not in self.plan.stops:
            raise ValueError(f"job {i} is not stopped by this plan")
        if self.state.host[i] < 0:
            self.free.take(gpus)
        self.plan.stops.remove(i)

    def pack(
        self,
        i: int,
        host: int,
        guest_factor: float,
        host_factor: float,
        gpus: tuple[int, ...] | None = None,
    ) -> None:
        """Start job ``i`` on the GPUs of job ``host`` (running, or started
        earlier in this plan), or on ``gpus``, some of them; no GPUs are taken."""
        shared = self.plan.starts.get(host) or self.state.alloc[host]
        if shared is None:
            raise ValueError(f"job {host} is not running")
        if gpus is not None and not set(gpus) <= set(shared):
            raise ValueError(f"job {i} would share GPUs job {host} does not hold")
        self.plan.starts[i] = tuple(gpus) if gpus is not None else shared
        self.plan.packs[i] = (host, guest_factor, host_factor)

    def start(self, i: int, gpus: list[int] | tuple[int, ...]) -> None:
        self.free.take(gpus)
        self.plan.starts[i] = tuple(gpus)

    def usable(self, i: int, free: FreeGPUs | None = None) -> FreeGPUs:
        """The free GPUs (``free``, else the plan's) that job ``i`` may run on: of its
        bound type, and never of a type where its speed is 0 (see ``runs_on``)."""
        free = self.free if free is None else free
        allowed = self.state.runs_on(i)
        return free if allowed is None else free.of_types(allowed)

    def place(self, i: int, placement: PlacementStrategy) -> bool:
        """Start job ``i`` where the strategy says; False if it cannot be placed now.

        A job is placed among the free GPUs of the types it runs on (see ``usable``).
        """
        free = self.usable(i)
        gpus = placement.choose_for(free, self.state, i)
        if gpus is None:
            return False
        self.start(i, gpus)
        return True

    def build(self, next_wakeup: float | None = None) -> Plan:
        self.plan.next_wakeup = next_wakeup
        self.plan.free_after = self._free
        return self.plan


class Policy(ABC):
    """A scheduling policy. Subclasses set the class attributes and ``schedule``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    oracle: ClassVar[bool] = False
    """True when the policy uses what a real scheduler cannot know (durations)."""
    elastic: ClassVar[bool] = False
    """True when the policy may run a job on a multiple of the GPUs it asked for."""
    resizes: ClassVar[bool] = False
    """True when the policy may run a job on any number of GPUs (Optimus, Pollux:
    the job's ask is where it starts, not a gang it must keep); the speed of
    another size comes with the plan's ``factors``."""
    reads_durations: ClassVar[bool] = False
    """True when the policy ranks by work left (oracles, finish-time fairness)."""
    shares_gpus: ClassVar[bool] = False
    """True when the policy may pack two jobs on one GPU set (the live service
    then measures the jobs' speeds from their heartbeats for it to judge)."""
    node_layouts: ClassVar[bool] = True
    """False when the policy places jobs its own way that cannot honour a job's
    node layout (``SchedulerState.nodes_req``: HiveD's cells). Policies that
    resize jobs or share GPUs cannot either; the service refuses such jobs."""
    simulator_only: ClassVar[dict[str, str]] = {}
    """Options ``corral serve`` cannot honour, with why (refused when set)."""
    live_note: ClassVar[str] = ""
    """What ``corral serve`` does differently from the simulator for this policy."""
    options: ClassVar[dict[str, Option]] = {}
    """The options ``__init__`` takes, declared (see :mod:`corral.policies.options`):
    what each means and accepts; ``__init__``'s signature gives the defaults."""

    def __init__(self, placement: PlacementStrategy | None = None, **params: Any) -> None:
        if params:
            unknown = ", ".join(sorted(params))
            raise TypeError(f"policy '{self.name}' takes no option(s) {unknown}")
        self.placement = placement or Consolidate()

    admission: Admission | None = None
    """An admission rule given to this policy (``--admission``); None: admit all."""

    def admit(self, state: SchedulerState, i: int) -> Verdict:
        """Whether arriving job ``i`` is queued now, later or never (see
        :mod:`corral.policies.admission`): the given rule's verdict, else admitted.
        Override it for a policy with admission of its own."""
        return ADMIT if self.admission is None else self.admission.admit(state, i)

    def view(self, state: SchedulerState, job: int) -> dict[str, str]:
        """What this policy thinks of job ``job`` (a row of ``state``), in words a
        dashboard shows: Tiresias' queue, Gavel's share. Empty where it keeps nothing
        per job beyond the shared state."""
        return {}

    @property
    def label(self) -> str:
        """The name as reports show it: oracles say so."""
        return f"{self.name} (oracle)" if self.oracle else self.name

    @abstractmethod
    def schedule(self, state: SchedulerState) -> Plan:
        """Decide what runs next."""

    def waiting_reasons(self, state: SchedulerState) -> dict[int, str]:
        """Why waiting jobs wait, in the policy's words (e.g. ``QuotaExceeded``),
        where it knows better than "not enough GPUs"; the live service shows
        them as pending reasons. Asked only live, so the simulator pays nothing."""
        return {}

    def running_notes(self, state: SchedulerState) -> dict[int, str]:
        """How running jobs run where it is not the plain way (``Opportunistic``:
        evicted first when owners need the GPUs); the live service shows them as
        running jobs' reasons. Asked only live."""
        return {}


def greedy_fit(gpus_in_order: np.ndarray, capacity: int) -> np.ndarray:
    """Walk jobs in priority order, taking each whose GPUs still fit (others are skipped).

    Returns a boolean mask over the input. Vectorised for the common case: the
    prefix that fits is found with a cumulative sum; past it, only jobs no
    wider than what the prefix left can ever fit (what is left only shrinks),
    so those few are found in one pass and walked in Python.
    """
    take = np.zeros(len(gpus_in_order), dtype=bool)
    if capacity <= 0 or not len(gpus_in_order):
        return take
    cum = np.add.accumulate(gpus_in_order)
    k = int(cum.searchsorted(capacity, side="right"))
    take[:k] = True
    left = capacity - (int(cum[k - 1]) if k else 0)
    if left <= 0 or k + 1 >= len(gpus_in_order):
        return take
    tail = gpus_in_order[k + 1 :]
    small = (tail <= left).nonzero()[0]
    if not len(small):
        return take
    for j, g in zip(small.tolist(), tail[small].tolist(), strict=True):
        if g <= left:
            take[k + 1 + j] = True
            left -= g
            if not left:
                break
    return take


def in_order_until_failure(
    jobs: np.ndarray, classes: np.ndarray, attempt: Callable[[int], bool]
) -> None:
    """Try ``attempt`` on jobs in the given order, except that once a job of
    some class fails, later jobs of that class are not tried.

    For passes whose attempts can only get harder as the pass goes on (GPUs and
    partners are used up), jobs alike fail alike; this makes a pass cost the
    number of classes and successes, not the length of the queue. A heap of
    each class's next job keeps the overall order.
    """
    if not len(jobs):
        return
    _, cls = np.unique(classes, return_inverse=True)
    by_class = np.argsort(cls, kind="stable")
    bounds = np.searchsorted(cls[by_class], np.arange(int(cls.max()) + 2))
    by_class_list = by_class.tolist()
    heap = [(by_class_list[bounds[k]], int(bounds[k]), k) for k in range(len(bounds) - 1)]
    heapq.heapify(heap)
    jobs_list = jobs.tolist()
    while heap:
        pos, at, k = heapq.heappop(heap)
        if attempt(jobs_list[pos]) and at + 1 < bounds[k + 1]:
            heapq.heappush(heap, (by_class_list[at + 1], at + 1, k))


def type_holds(state: SchedulerState, jobs: np.ndarray | None = None) -> np.ndarray:
    """jobs x types: True where one GPU type has room for the job's gang, and for
    its node layout (``nodes_req`` nodes with ``gpus / nodes`` GPUs each) when it
    asks for one. A gang over two nodes where each type is one node fits no type:
    type-aware policies that gave it a type would never start it."""
    jobs = np.arange(len(state.gpus)) if jobs is None else jobs
    cluster = state.cluster
    gpus = state.gpus[jobs]
    out: np.ndarray = gpus[:, None] <= cluster.type_gpus[None, :]
    nodes = state.nodes_req[jobs]
    laid = np.flatnonzero(nodes > 0)
    if len(laid):
        node_type = cluster.gpu_type_id[cluster.node_first_gpu]
        per_node = gpus[laid] // nodes[laid]
        for k, per in set(zip(nodes[laid].tolist(), per_node.tolist(), strict=True)):
            big = cluster.node_gpus >= per
            held = np.bincount(node_type[big], minlength=len(cluster.type_gpus)) >= k
            rows = laid[(nodes[laid] == k) & (per_node == per)]
            out[rows] &= held[None, :]
    return out


def wider_than_any_type(state: SchedulerState) -> np.ndarray:
    """Mask of jobs that no single GPU type can hold (:func:`type_holds`): a gang
    larger than every type's pool, or a node layout no type's nodes make.

    Type-aware policies run a job on one type; these jobs can only run across
    types (at the slowest member's pace), so such policies place them on any
    free GPUs after the jobs their allocation chose.
    """
    out: np.ndarray = state.gpus > state.cluster.type_gpus.max()
    laid = np.flatnonzero(state.nodes_req)  # (the only jobs the size alone may not judge)
    if len(laid):
        out[laid] = np.logical_not(type_holds(state, laid).any(axis=1))
    return out


def place_wide_jobs(
    state: SchedulerState, builder: PlanBuilder, placement: PlacementStrategy
) -> None:
    """Start waiting jobs wider than any type on whatever GPUs are free, oldest first."""
    wide = wider_than_any_type(state)
    for i in state.pending_order:
        if wide[i] and i not in builder.plan.starts and not builder.place(i, placement):
            break


def option_flag(value: Any, name: str) -> bool:
    """A policy's yes/no option, as a bool or as text (``--policy-opt x=false``), for
    an ``__init__`` called directly (declared options arrive converted already)."""
    try:
        return bool(Option(name, "flag").convert(value))
    except ValueError as exc:
        raise ValueError(f"{name} {exc}") from None
