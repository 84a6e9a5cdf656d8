"""What Optimus and Pollux share: jobs of any size, re-divided at intervals.

Both policies decide how many GPUs each job gets by minimising a sum of
per-job costs, one GPU at a time (the job whose cost drops most gets the
next one), and carry the result out by resizing jobs: a resized job stops and
restarts on its new GPUs from its checkpoint. Only the cost differs: Optimus
minimises predicted completion times, Pollux a generalised mean of speed-ups.

The pass, common to both:

* every ``interval`` the whole allocation is re-divided, except that a
  running job whose cost would change by less than ``min_change`` keeps its
  size (restarts have a price the cost does not see);
* between intervals, arriving jobs get free GPUs by the same rule and nobody
  is resized, unless a job arrives to no free GPU while running jobs hold
  more than they asked for: then the GPUs are re-divided at once;
* a job is placed on its size's fewest nodes, or on fewer GPUs where
  fragmentation leaves no room (Pollux weighs the layouts the free GPUs
  allow, :meth:`ResizingPolicy.pick_placement`); its speed there comes with
  the plan's ``factors``.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from corral.errors import CorralError
from corral.model.free_gpus import FreeGPUs
from corral.model.plan import Plan
from corral.model.state import DONE, SchedulerState
from corral.perf.speeds import SpeedModel
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy


def admit_one_each(
    order: list[int],
    pinned: dict[int, int],
    capacity: int,
    admits: Callable[[int], bool] | None = None,
) -> tuple[dict[int, int], int, list[int]]:
    """The first step of every allocation here: pinned jobs keep their GPUs, the
    others get one each in ``order`` while GPUs last (``admits`` may turn a job
    away, e.g. for want of another resource). Returns (GPUs per job, GPUs left,
    the jobs admitted in order)."""
    alloc = dict(pinned)
    left = capacity - sum(pinned.values())
    admitted: list[int] = []
    for j in order:
        if j in pinned:
            continue
        if left <= 0:
            break
        if admits is not None and not admits(j):
            continue
        alloc[j] = 1
        left -= 1
        admitted.append(j)
    return alloc, left, admitted


def exact_division(rows: list[np.ndarray], left: int) -> np.ndarray:
    """Extra GPUs per job that minimise the sum of costs exactly, by dynamic
    programming over jobs: ``rows[k][e]`` is job k's cost with ``e`` extra
    GPUs (``e`` = 0 .. len - 1), at most ``left`` extras in all. Whatever the
    shape of the costs (the greedy is exact only for convex ones). A job is
    never given extras past its cheapest count (more would cost no less and
    use more GPUs), so J jobs on G GPUs take J x G x (the longest such run)
    steps, vectorised per job: small when jobs' useful sizes are capped
    (Pollux's exploration cap), G x G per job at worst."""
    best = np.zeros(left + 1)  # best[g]: least cost of the jobs so far with g extras
    choices = np.zeros((len(rows), left + 1), dtype=np.int64)
    at = np.arange(left + 1)
    for k, full_row in enumerate(rows):
        row = full_row[: int(np.argmin(full_row)) + 1]
        n = len(row)
        # cand[g, e] = best[g - e] + row[e] (inf for e > g): windows of best with
        # n - 1 infinities before it, read backwards (a view: no index arrays)
        padded = np.concatenate([np.full(n - 1, np.inf), best])
        cand = sliding_window_view(padded, n)[:, ::-1] + row
        choices[k] = np.argmin(cand, axis=1)
        best = cand[at, choices[k]]
    extras = np.zeros(len(rows), dtype=np.int64)
    used = int(np.argmin(best))  # fewer extras may cost less when a GPU would hurt
    for k in range(len(rows) - 1, -1, -1):
        extras[k] = choices[k, used]
        used -= int(extras[k])
    return extras


class ResizingPolicy(Policy):
    """A policy that re-divides GPUs among jobs of any size (subclasses give the cost)."""

    resizes = True
    search = "greedy"
    """How a division is found: ``greedy`` (one GPU at a time to the largest
    drop; exact for convex costs) or ``exact`` (dynamic programming, exact
    for any costs; see :func:`exact_division`)."""

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        interval: float = 600.0,
        min_change: float = 0.1,
        max_gpus: int = 0,
        **params: Any,
    ) -> None:
        super().__init__(placement, **params)
        if not interval > 0:
            raise CorralError(f"{self.name}: interval must be > 0 seconds, got {interval}")
        if not 0 <= min_change < 1:
            raise CorralError(f"{self.name}: min_change must be in [0, 1), got {min_change}")
        if max_gpus < 0:
            raise CorralError(f"{self.name}: max_gpus must be >= 0 (0: no cap), got {max_gpus}")
        self.interval = float(interval)
        self.min_change = float(min_change)
        self.max_gpus = int(max_gpus)
        self._next_tick = -math.inf
        self._next_retune = -math.inf
        self._last_division: object | None = None
        """The job set and inputs of the last interval's division (see inputs_key)."""
        self.counts: dict[str, int] = {"resizes": 0}
        self.search_gaps: list[float] = []
        """With ``search = exact``: per division, how much worse (relative) the
        greedy's objective would have been; the measure of what the greedy gives up."""

    compares_placements: bool = False
    """True: :meth:`pick_placement` is offered every size the free GPUs allow,
    not only the largest."""

    retune_period: float = math.inf
    """Seconds between re-tunes of running jobs between re-allocations
    (:meth:`retune`; infinite: only at re-allocations)."""

    # ---- what subclasses say -------------------------------------------------

    @abstractmethod
    def prepare(self, state: SchedulerState, jobs: list[int], speeds: SpeedModel) -> None:
        """Compute what :meth:`cost` needs for these jobs, once per pass."""

    @abstractmethod
    def cost(self, j: int, gpus: int) -> float:
        """Job ``j``'s share of the objective on ``gpus`` >= 1 GPUs (lower is better)."""

    @abstractmethod
    def admission_key(self, state: SchedulerState, j: int) -> tuple[float, ...]:
        """Order in which jobs get their first GPU when there are too few for all."""

    def start_factor(
        self, state: SchedulerState, j: int, gpus: Sequence[int], speeds: SpeedModel
    ) -> float:
        """Speed of job ``j`` on these GPUs relative to the size it asked for
        (the engine applies the placement's locality itself)."""
        return speeds.size_factor(
            state.cluster,
            state.job_type[j],
            state.model[j],
            int(state.gpus[j]),
            len(gpus),
            int(state.batch_size[j]),
        )

    def observe(self, state: SchedulerState, jobs: list[int]) -> None:
        """At the start of an interval, before its inputs are compared: what the
        policy measures of running jobs (Pollux: their step times)."""

    def inputs_key(self, state: SchedulerState, jobs: list[int]) -> object | None:
        """What an interval's division depends on besides the job set, when the
        policy can say (None: re-divide at every interval). An interval that
        finds the same jobs (running and waiting) and the same key would divide
        the GPUs as the last one did, so it is skipped."""
        return None

    def on_start(
        self, builder: PlanBuilder, state: SchedulerState, j: int, gpus: Sequence[int]
    ) -> None:
        """A job starts on these GPUs (e.g. Pollux records its batch size)."""

    def spread_free(self, b: PlanBuilder, state: SchedulerState, free: FreeGPUs) -> FreeGPUs:
        """The free GPUs a gang that spans nodes may use (``free`` itself: all of
        them; Pollux keeps such gangs off nodes that hold another one)."""
        return free

    def pick_placement(
        self, state: SchedulerState, j: int, options: list[tuple[int, ...]]
    ) -> tuple[int, ...]:
        """Where job ``j`` starts, given the placements the free GPUs allow, from
        the size it was given down (the first: its size, or the largest that
        fits). With :attr:`compares_placements`, every size is offered, and a
        running job to grow is also offered the GPUs it holds (picking them
        keeps it running, unstopped): a policy whose speeds know the
        layout may prefer fewer GPUs on fewer nodes, or staying (Pollux)."""
        return options[0]

    def retune(self, builder: PlanBuilder, state: SchedulerState, kept: list[int]) -> None:
        """At an interval, running jobs that keep their GPUs (e.g. Pollux re-picks
        their batch size, changing their speed without a restart)."""

    # ---- shared -------------------------------------------------------------

    @staticmethod
    def model_speed(state: SchedulerState, i: int, w: int, speeds: SpeedModel) -> float:
        """The performance model's steps/s of job ``i`` on ``w`` GPUs of one place."""
        return float(ResizingPolicy.model_speeds(state, i, np.array([w]), speeds)[0])

    @staticmethod
    def model_speeds(
        state: SchedulerState, i: int, sizes: np.ndarray, speeds: SpeedModel
    ) -> np.ndarray:
        """:meth:`model_speed` at each of ``sizes`` (jobs known only by a duration
        scale linearly, computed at once)."""
        job_type = state.job_type[i]
        if job_type and speeds.knows(job_type):  # the table, at each size
            return np.array([speeds.reference_speed(job_type, int(w)) or 0.0 for w in sizes])
        factors = speeds.size_factors(
            state.cluster,
            job_type,
            state.model[i],
            int(state.gpus[i]),
            sizes,
            int(state.batch_size[i]),
        )
        return float(state.ref_speed[i]) * factors

    def costs(self, j: int, sizes: np.ndarray) -> np.ndarray:
        """:meth:`cost` at each of ``sizes`` (subclasses compute it at once)."""
        return np.array([self.cost(j, int(w)) for w in sizes])

    def allocate(
        self, jobs: list[int], capacity: int, pinned: dict[int, int], order: list[int]
    ) -> dict[int, int]:
        """GPUs per job: pinned jobs keep theirs; the others get one each in
        ``order`` while GPUs last, then each further GPU goes to the job whose
        cost drops most. For costs convex in the GPU count this minimises the
        sum of costs (tested against brute force).

        Done at once rather than GPU by GPU: each job's cost drops for its 2nd,
        3rd ... GPU are made non-decreasing (a drop is reachable only after the
        ones before it, so it counts as the largest of them), and the most
        negative of all jobs' drops are taken, as many as GPUs are left. That
        is the one-at-a-time rule's result, ties aside."""
        alloc, left, admitted = admit_one_each(order, pinned, capacity)
        cap = self.max_gpus or capacity
        most = min(cap, left + 1)
        if left <= 0 or most <= 1 or not admitted:
            return alloc
        sizes = np.arange(1, most + 1, dtype=np.float64)
        # cost rows jobs share (e.g. linear scaling) are turned into drops once;
        # each row is kept referenced so that its id is not reused in the loop
        rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        per_job = []
        costs = []
        for j in admitted:
            row = self.costs(j, sizes)
            if id(row) not in rows:
                rows[id(row)] = (row, np.maximum.accumulate(np.diff(row)))
            costs.append(row)
            per_job.append(rows[id(row)][1])
        drops = np.vstack(per_job).ravel()
        candidates = np.flatnonzero(drops < 0)
        if len(candidates) > left:
            candidates = candidates[np.argsort(drops[candidates], kind="stable")[:left]]
        extra = np.bincount(candidates // (most - 1), minlength=len(admitted))
        if self.search == "exact":
            exact = exact_division(costs, left)
            table, rows_at = np.vstack(costs), np.arange(len(costs))
            greedy_cost = float(table[rows_at, extra].sum())
            exact_cost = float(table[rows_at, exact].sum())
            if exact_cost != 0:
                self.search_gaps.append((greedy_cost - exact_cost) / abs(exact_cost))
            extra = exact
        for j, n in zip(admitted, extra.tolist(), strict=True):
            alloc[j] += n
        return alloc

    def schedule(self, state: SchedulerState) -> Plan:
        b = PlanBuilder(state)
        running = state.running.array().tolist()
        pending = list(state.pending_order)
        starved = (
            bool(pending)
            and state.free.total == 0
            and any(state.held[j] > state.gpus[j] for j in running)
        )
        tick = state.now >= self._next_tick or starved
        if tick:
            self._next_tick = state.now + self.interval
        # between re-allocations, running jobs still re-tune (Pollux's agents)
        refresh = not tick and bool(running) and state.now >= self._next_retune
        if tick or refresh or self._next_retune <= state.now:  # (due with none running)
            self._next_retune = state.now + self.retune_period
        wakeup = min(self._next_tick, self._next_retune)
        if not pending and not tick and not refresh:
            return b.build(wakeup if running else None)
        jobs = running + pending if tick else pending
        if not jobs and not refresh:
            return b.build(None)
        if tick:
            self.observe(state, jobs)
            key = self.inputs_key(state, jobs)
            division = None if key is None else (frozenset(jobs), key)
            if division is not None and division == self._last_division:
                return b.build(wakeup)
            self._last_division = division
        if refresh:
            self.observe(state, running)
        speeds = state.speeds or SpeedModel()
        self.prepare(state, running + pending if refresh else jobs, speeds)
        order = sorted(jobs, key=lambda j: (*self.admission_key(state, j), j))
        if tick:
            capacity = state.free.total + sum(int(state.held[j]) for j in running)
            pinned: dict[int, int] = {}
            for _ in range(4):
                alloc = self.allocate(jobs, capacity, pinned, order)
                more = {
                    j: int(state.held[j])
                    for j in running
                    if j not in pinned and self._keeps_size(state, j, alloc.get(j, 0))
                }
                if not more:
                    break
                pinned |= more
        else:
            alloc = self.allocate(jobs, state.free.total, {}, order)
        to_place: list[int] = []
        kept: list[int] = []
        for j in running if tick else ():
            want = alloc.get(j, 0)
            if self.resized(state, j, want):
                b.stop(j)
                if want:
                    to_place.append(j)  # (counted as a resize where it is placed)
            else:
                kept.append(j)
        if refresh:
            kept = running
        if kept:
            self.retune(b, state, kept)
        to_place += [j for j in pending if alloc.get(j, 0) > 0]
        to_place.sort(key=lambda j: (-alloc[j], j))
        for j in to_place:
            if self._place(b, state, j, alloc[j], speeds) == "kept":
                self.retune(b, state, [j])
        return b.build(wakeup)

    def resized(self, state: SchedulerState, j: int, want: int) -> bool:
        """Whether running job ``j`` must restart to run on ``want`` GPUs (Optimus
        with parameter servers also restarts a job whose servers change)."""
        return want != int(state.held[j])

    def _keeps_size(self, state: SchedulerState, j: int, want: int) -> bool:
        """True when a running job should stay at its size: its cost would change
        by less than ``min_change`` (a stop, ``want`` 0, always goes ahead)."""
        now_w = int(state.held[j])
        if want == now_w or want == 0:
            return want == now_w
        before, after = self.cost(j, now_w), self.cost(j, want)
        return abs(before - after) < self.min_change * abs(before)

    def _place(
        self, b: PlanBuilder, state: SchedulerState, j: int, want: int, speeds: SpeedModel
    ) -> Literal["started", "kept", "waits"]:
        """Start ``j`` on ``want`` GPUs, or on fewer where fragmentation leaves
        no room (or where the policy prefers fewer, :meth:`pick_placement`).
        A running job being resized may be offered its own GPUs too: when the
        policy picks them, it is not stopped after all (only one to grow: one
        to shrink must give GPUs up). Returns ``started``,
        ``kept`` or ``waits``."""
        free = b.usable(j)
        spread: FreeGPUs | None = None  # (what a gang across nodes may use: asked once)
        node_of = state.cluster.gpu_node
        options: list[tuple[int, ...]] = []
        for w in range(min(want, free.total), 0, -1):
            chosen = self.placement.choose(free, w)
            if chosen is not None and len({int(node_of[g]) for g in chosen}) > 1:
                spread = self.spread_free(b, state, free) if spread is None else spread
                if spread is not free:
                    chosen = self.placement.choose(spread, w)
            if chosen is None or not state.runs_at(j, chosen):  # (a size its type cannot fit)
                continue
            options.append(tuple(chosen))
            if not self.compares_placements:
                break
        held = state.alloc[j]
        if held and self.compares_placements and len(held) <= want and j in b.plan.stops:
            mine = tuple(held)  # a job to grow may stay where it is (not one to shrink)
            if bool(b.free.mask[list(mine)].all()) and mine not in options:
                options.append(mine)  # (still free in the plan)
        if not options:
            if held:
                self.counts["resizes"] += 1  # stopped, and waits
            return "waits"
        gpus = self.pick_placement(state, j, options)
        if held and gpus == tuple(held):
            b.unstop(j)
            return "kept"
        if held:
            self.counts["resizes"] += 1
        b.start(j, gpus)
        factor = self.start_factor(state, j, gpus, speeds)
        if factor != 1.0:
            b.plan.factors[j] = factor
        self.on_start(b, state, j, gpus)
        return "started"


def median_finished_seconds(state: SchedulerState, default: float) -> float:
    """Median run time (at reference speed) of the jobs finished so far."""
    finished = np.flatnonzero(state.status == DONE)
    if not len(finished):
        return default
    return float(np.median(state.total_steps[finished] / state.ref_speed[finished]))
