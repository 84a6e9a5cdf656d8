"""Gavel: heterogeneity-aware policies realised by round-based scheduling.

Each policy solves one of Gavel's allocation problems
(:mod:`corral.optimize.gavel_lp`) for the jobs present, giving ``X[j, t]``,
the fraction of time job ``j`` should spend on GPU type ``t``. Gavel's
mechanism turns ``X`` into leases, and corral follows its definitions:

* **Resets.** ``X`` is re-solved only at a round boundary when the set of
  jobs changed *and* at least ``reset_window`` seconds (Gavel's 1,920 s)
  passed since the last reset; a job that arrived since then waits for the
  next reset (it has no share yet). A reset forgets the time each job
  received and starts every (job, type) with a small equal credit, half a
  round, so priorities compare what happened since the reset only. What a
  job should have received but did not is carried as its deficit, the
  tie-breaker. ``reset_window=0`` re-solves at every change, which is the
  default live (unless set): the window is the simulator's, and a job
  submitted to a shared cluster should not wait half an hour for a share.
* **Rounds.** Every ``round`` seconds (360 s) each type's (job, type) pairs
  are ranked by priority = ``X[j, t]`` / (the job's time on ``t`` / all
  jobs' time on ``t``, both since the reset), then deficit, then ``X``; the
  types' lists are walked fastest type first, and a pair is taken while the
  type has GPUs for the gang (a pair with ``X = 0`` only takes what the
  others leave). A job runs on one type in a round, and keeps its GPUs when
  it gets the same type again (no restart). A round also starts at once when
  nothing runs, as Gavel's next round starts when the last job of the
  previous one ends.
* **Between rounds** GPUs freed by finishing jobs go to waiting pairs in the
  same order (``fill_between_rounds=1``, corral's default); Gavel leaves them
  idle until the round ends (``fill_between_rounds=0``, what the
  ``gavel-sim`` preset sets).

The space-sharing variant ranks combinations (a job alone, or a measured
pair sharing one gang, packed at the pair's measured speeds) the same way.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from corral.estimate.pair_throughputs import PairEstimator
from corral.model.free_gpus import FreeGPUs
from corral.model.plan import Plan
from corral.model.state import PENDING, SchedulerState
from corral.optimize.gavel_lp import (
    AllocationProblem,
    finish_time_fairness,
    max_min_fairness,
    max_min_fairness_packed,
    max_throughput,
    min_makespan,
)
from corral.optimize.pop import SPLITS, keep_parts, parts_for, solve_parts, split
from corral.perf.throughputs import ThroughputTable, gavel_throughputs
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import (
    PlanBuilder,
    Policy,
    place_wide_jobs,
    type_holds,
    wider_than_any_type,
)
from corral.policies.options import Option

Combo = tuple[int, ...]
DEFAULT_RESET_WINDOW = 1920.0
"""Gavel's simulator: the least time between two resets of the allocation."""


MIN_REMAINING = 1e-3
"""Steps of work a running job is taken to have left at least. Live, a job can
outrun its owner's estimate; with nothing left its LP coefficient would fall
below what the solver keeps (HiGHS drops |a| <= 1e-9) and the objective would
be unbounded."""


def remaining_steps(state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.maximum(state.total_steps[jobs] - state.done_steps(jobs), MIN_REMAINING)
    return out


class GavelPolicy(Policy):
    """Round-based realisation of an allocation; subclasses choose the LP."""

    name: ClassVar[str] = "gavel-max-min-fairness"
    options: ClassVar[dict[str, Option]] = {
        "round": Option("round length (s)", above=0),
        "fill_between_rounds": Option(
            "refill GPUs freed mid-round in the same order (0: idle until the round ends, as "
            "Gavel)",
            "flag",
        ),
        "reset_window": Option(
            "seconds after which the allocation is re-solved when the job set changed (unset: "
            "Gavel's 1,920 s)",
            low=0,
            unset=True,
        ),
        "pop": Option(
            "POP: the jobs split into this many parts, each solved on its own with its share "
            "of every GPU type (unset: 1 up to 1,000 jobs, then chosen from the size; 1: off)",
            "integer",
            low=1,
            unset=True,
        ),
        "pop_split": Option(
            "how POP splits the jobs: balanced (by gang size and weight) or random",
            "choice",
            choices=SPLITS,
        ),
    }
    description: ClassVar[str] = (
        "Gavel: weighted max-min fairness over heterogeneity-normalised throughput (LP), "
        "realised in rounds"
    )
    packed: ClassVar[bool] = False
    static_allocation: ClassVar[bool] = True
    """The allocation depends on the jobs' problem alone (speeds, sizes, weights,
    capacity), not on time or progress: a POP part whose problem is unchanged
    keeps its last allocation."""

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        round: float = 360.0,
        fill_between_rounds: int = 1,
        reset_window: float | None = None,
        pop: int | None = None,
        pop_split: str = "balanced",
        **params: Any,
    ) -> None:
        super().__init__(placement, **params)
        if pop is not None and pop < 1:
            raise ValueError(f"pop must be at least 1 part, got {pop}")
        if pop_split not in SPLITS:
            raise ValueError(f"pop_split must be one of {', '.join(SPLITS)}, got '{pop_split}'")
        self.pop = pop
        self.pop_split = pop_split
        self.pop_parts = 1
        """The parts the last solve was split into."""
        self.pop_resolved = 0
        """How many of them the last solve solved (the others kept their allocation)."""
        self._part_of: dict[int, int] = {}
        """Job -> its POP part at the last solve (kept while the split stays even)."""
        self._solved_parts: dict[int, tuple[bytes | None, tuple[list[Combo], np.ndarray]]] = {}
        """Part -> (its key, its combinations and allocation) at the last solve."""
        self._share = 1.0
        """The part of every GPU type the problem being built has (1/parts under POP)."""
        if round <= 0:
            raise ValueError(f"round must be positive, got {round}")
        if reset_window is not None and reset_window < 0:
            raise ValueError(f"reset_window must be >= 0, got {reset_window}")
        self.round = float(round)
        self.fill_between_rounds = bool(fill_between_rounds)
        self.reset_window_option = reset_window
        """As given; None: Gavel's 1,920 s in simulation, 0 live (set in :meth:`schedule`,
        which is the first place the policy learns which it serves)."""
        self.reset_window = DEFAULT_RESET_WINDOW if reset_window is None else float(reset_window)
        self.received: np.ndarray | None = None
        """Seconds each job has run on each GPU type since it arrived (jobs x types)."""
        self._time = np.zeros((0, 0))
        """Seconds each combination (a row of ``_x``) ran on each type since the last
        reset, plus the credit."""
        self._type_time = np.zeros(0)
        """Seconds all combinations ran on each type since the last reset (plus credits)."""
        self._deficit = np.zeros((0, 0))
        """What each combination should have received on each type but did not."""
        self._row_of: dict[Combo, int] = {}
        self._members = np.zeros((0, 2), dtype=np.int64)
        """Each combination's first and last job (the same job for a single)."""
        self._tiebreak = np.zeros(0, dtype=np.int64)
        """Each combination's place in (least job, members) order: the last sort key."""
        self._last_reset: float | None = None
        self._dirty = False
        self._last = 0.0
        self._round_end = -np.inf
        self._active_key: tuple[int, int, int] | None = None
        self._combos: list[Combo] = []
        self._x = np.zeros((0, 0))
        self._type_order: list[int] = []
        self.solves = 0
        self.rounds = 0
        self.resets = 0

    # --------------------------------------------------------- allocation
    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        """X for ``jobs`` (rows in their order)."""
        return max_min_fairness(self._problem(state, jobs))

    def _problem(self, state: SchedulerState, jobs: np.ndarray) -> AllocationProblem:
        return AllocationProblem(
            throughput=state.type_speed[jobs] * type_holds(state, jobs),
            gpus=state.gpus[jobs],
            capacity=state.cluster.type_gpus * self._share,
            weights=state.weight[jobs],
        )

    def _solve(self, state: SchedulerState, active: np.ndarray) -> None:
        """The allocation of the jobs present: one problem, or POP's parts (see
        :mod:`corral.optimize.pop`), each with its share of every type, solved side by
        side and put together."""
        self.solves += 1
        largest = int(state.gpus[active].max(initial=1))
        parts = parts_for(len(active), state.cluster.type_gpus, largest, self.pop)
        self.pop_parts = parts
        if parts <= 1:
            self._part_of, self._solved_parts = {}, {}
            self._combos, self._x = self._solve_group(state, active)
            return
        load = self._pop_load(state, active)
        groups = None
        if self.pop_split == "balanced":
            demand = state.gpus[active].astype(float) if load is None else load
            groups = keep_parts(self._part_of, active, demand, parts)
        if groups is None:
            groups = split(
                state.gpus[active],
                state.weight[active],
                parts,
                self.pop_split,
                seed=self.solves,
                load=load,
            )
            self._solved_parts = {}
        self._part_of = {j: k for k, g in enumerate(groups) for j in active[g].tolist()}
        self._share = 1.0 / parts
        try:
            keys = [self._part_key(state, active[g]) for g in groups]
            again = [
                k for k, key in enumerate(keys)
                if key is None or self._solved_parts.get(k, (None,))[0] != key
            ]  # fmt: skip
            fresh = solve_parts(
                [groups[k] for k in again], lambda g: self._solve_group(state, active[g])
            )
        finally:
            self._share = 1.0
        for k, found in zip(again, fresh, strict=True):
            self._solved_parts[k] = (keys[k], found)
        self.pop_resolved = len(again)
        solved = [self._solved_parts[k][1] for k in range(len(groups))]
        self._combos = [c for combos, _ in solved for c in combos]
        self._x = np.concatenate([x for _, x in solved])

    def _part_key(self, state: SchedulerState, jobs: np.ndarray) -> bytes | None:
        """What a POP part's allocation depends on, for policies whose allocation is
        a function of the problem alone (:attr:`static_allocation`): the same key,
        the same allocation, kept from the last solve. None: solve it again."""
        if not self.static_allocation:
            return None
        p = self._problem(state, jobs)
        weights = p.weights if p.weights is not None else np.zeros(0)
        arrays = (jobs, p.throughput, p.gpus, p.capacity, weights)
        return b"|".join(np.ascontiguousarray(a).tobytes() for a in arrays)

    def _pop_load(self, state: SchedulerState, active: np.ndarray) -> np.ndarray | None:
        """What POP's balanced split evens out between parts (None: GPUs, then weight)."""
        return None

    def _solve_group(
        self, state: SchedulerState, active: np.ndarray
    ) -> tuple[list[Combo], np.ndarray]:
        """The combinations of ``active`` and their allocation (rows in that order)."""
        return [(int(j),) for j in active], self.allocate(state, active)

    def view(self, state: SchedulerState, job: int) -> dict[str, str]:
        combos = getattr(self, "_combos", [])
        names = state.cluster.gpu_type_names
        share = np.zeros(len(names))
        for row, combo in enumerate(combos):
            if job in combo and row < len(self._x):
                share[: self._x.shape[1]] += self._x[row]
        if not share.any():
            return {}
        parts = [f"{names[t]} {share[t]:.0%}" for t in range(len(names)) if share[t] > 0.005]
        return {"share of time": ", ".join(parts) + " (the allocation's fraction per GPU type)"}

    @property
    def credit(self) -> float:
        """Time every (combination, type) starts with at a reset: half a round."""
        return self.round / 2.0

    def _reset(self, state: SchedulerState, active: np.ndarray) -> None:
        """Re-solve, carry what each pair missed as its deficit, restart the clocks."""
        now = state.now
        credit = self.credit
        alive = set(active.tolist())
        before = self._combos
        missed = np.zeros((0, 0))
        if self._last_reset is not None and len(before):
            since = now - self._last_reset
            missed = self._deficit + self._x * since - (self._time - credit)
        if len(active):
            self._solve(state, active)
        else:
            self._combos, self._x = [], np.zeros((0, 0))
        k = len(state.cluster.gpu_type_names)
        self._row_of = {c: r for r, c in enumerate(self._combos)}
        self._deficit = np.zeros((len(self._combos), k))
        for r, combo in enumerate(before):
            row = self._row_of.get(combo)
            if len(missed) and row is not None and all(j in alive for j in combo):
                self._deficit[row] = missed[r]
        self._time = np.full((len(self._combos), k), credit)
        self._type_time = np.full(k, credit * len(self._combos))
        self._members = np.array([(c[0], c[-1]) for c in self._combos], dtype=np.int64)
        self._members = self._members.reshape(len(self._combos), 2)
        combos = self._combos
        ranked = sorted(range(len(combos)), key=lambda r: (min(combos[r]), combos[r]))
        self._tiebreak = np.empty(len(self._combos), dtype=np.int64)
        self._tiebreak[ranked] = np.arange(len(self._combos))
        # fastest type first, as Gavel walks V100, P100, K80
        speed = state.type_speed[active].sum(axis=0) if len(active) else np.zeros(k)
        self._type_order = [int(t) for t in np.argsort(-speed, kind="stable")]
        self._last_reset = now
        self._dirty = False
        self.resets += 1

    def _round_type_order(self) -> list[int]:
        """The order in which a round walks the types' lists: fastest first."""
        return self._type_order

    def _may_reset(self, now: float) -> bool:
        """Gavel's test: the window has passed, or no reset happened yet; like
        Gavel, a reset at time 0 (the first arrival) does not open a window."""
        last = self._last_reset
        return last is None or last == 0.0 or now - last >= self.reset_window - 1e-9

    # --------------------------------------------------------- mechanism
    def _account(self, state: SchedulerState) -> None:
        n, k = len(state.gpus), len(state.cluster.gpu_type_names)
        if self.received is None:
            self.received = np.zeros((n, k))
        dt = state.now - self._last
        self._last = state.now
        if dt <= 0:
            return
        type_of = state.cluster.gpu_type_id
        for i in state.running:
            gpus = state.alloc[i]
            assert gpus is not None
            t = int(type_of[gpus[0]])
            self.received[i, t] += dt
            host = int(state.host[i])
            if host >= 0:
                combo: Combo = tuple(sorted((host, i)))
            elif state.guest[i] < 0:
                combo = (i,)
            else:
                continue  # a host's pair is counted once, from its guest
            row = self._row_of.get(combo)
            if row is not None:  # else it has no share since the last reset to rank by
                self._time[row, t] += dt
            self._type_time[t] += dt

    def _priorities(self, state: SchedulerState) -> list[tuple[int, int]]:
        """(combination row, type) pairs that can run, in Gavel's order: each type's
        list (fastest type first) by priority, deficit, share, all descending."""
        order: list[tuple[int, int]] = []
        if not len(self._combos):
            return order
        speed = state.type_speed
        first, last = self._members[:, 0], self._members[:, 1]
        runnable = (speed[first] > 0) & (speed[last] > 0)
        for t in self._round_type_order():
            rows = np.flatnonzero(runnable[:, t])
            share = self._x[rows, t]
            total = float(self._type_time[t])
            fraction = self._time[rows, t] / total if total > 0 else np.zeros(len(rows))
            ratio = np.divide(share, fraction, out=share * 1e9, where=fraction > 0)
            priority = np.where(share <= 1e-9, 0.0, ratio)
            deficit = self._deficit[rows, t]
            ranked = np.lexsort((self._tiebreak[rows], -share, -deficit, -priority))
            order.extend((r, t) for r in rows[ranked].tolist())
        return order

    def schedule(self, state: SchedulerState) -> Plan:
        if self.reset_window_option is None and not state.known_in_advance:
            # live, a job that arrives is allocated at the next round rather
            # than after Gavel's simulator window (a half-hour wait on a shared cluster)
            self.reset_window = 0.0
        if not len(self._type_time):
            self._type_time = np.zeros(len(state.cluster.gpu_type_names))
        self._account(state)
        active = np.sort(np.concatenate([state.pending.array(), state.running.array()]))
        key = (
            (len(active), int(active.sum()), int((active * active).sum())) if len(active) else None
        )
        if key != self._active_key:
            self._active_key = key
            self._dirty = True
        builder = PlanBuilder(state)
        now = state.now
        idle = not len(state.running)
        if now >= self._round_end or (idle and len(state.pending)):
            if self._dirty and self._may_reset(now):
                self._reset(state, active)
            self.rounds += 1
            self._round_end = now + self.round
            self._assign(state, builder, reassign=True)
        elif self.fill_between_rounds and len(state.pending) and state.free.total:
            self._assign(state, builder, reassign=False)
        wake = None
        if len(active):
            wake = self._round_end
            reset_at = None if self._last_reset is None else self._last_reset + self.reset_window
            if idle and not builder.plan.starts and reset_at is not None and reset_at > now:
                # nothing can run until the allocation is reset: wake then (a reset
                # that may happen already was tried this pass: waking at once again
                # would spin, live, while every waiting job is kept off the GPUs by
                # a failed node, a limit or a layout; the round's end wakes it)
                wake = reset_at
        return builder.build(wake)

    def _assign(self, state: SchedulerState, builder: PlanBuilder, reassign: bool) -> None:
        cluster = state.cluster
        type_of = cluster.gpu_type_id
        current: dict[int, tuple[Combo, int]] = {}
        for i in state.running:
            if state.host[i] >= 0:
                continue
            held = state.alloc[i]
            assert held is not None
            guest = int(state.guest[i])
            combo = (i,) if guest < 0 else tuple(sorted((i, guest)))
            current[i] = (combo, int(type_of[held[0]]))
        if reassign:
            # the GPUs free and those the jobs running now hold (theirs to keep or to
            # give up), not every GPU the cluster has: a lost or drained node's are in
            # neither, and counting them let jobs be chosen for a type with no GPU
            # there to start on, round after round, while others stood idle
            holding = [g for i in current for g in state.alloc[i] or ()]
            by_type = state.free.by_type() + np.bincount(
                type_of[holding], minlength=len(cluster.type_gpus)
            )
            taken: set[int] = set()
        else:
            by_type = state.free.by_type()
            taken = {j for combo, _ in current.values() for j in combo}
        room = [int(g) for g in by_type]
        left = sum(room)
        gpus = state.gpus
        chosen: list[tuple[Combo, int]] = []
        for row, t in self._priorities(state):
            if left <= 0:
                break  # no GPU left: nothing further down the lists can be taken
            combo = self._combos[row]
            if not taken.isdisjoint(combo):
                continue
            need = int(gpus[combo[0]])
            if room[t] < need:
                continue
            room[t] -= need
            left -= need
            taken.update(combo)
            chosen.append((combo, t))
        if reassign:
            keep = set(chosen)
            wide = wider_than_any_type(state)
            for host, (combo, t) in current.items():
                if (combo, t) not in keep and not wide[host]:
                    builder.stop(host)
            running = set(current.values())
            chosen = [pair for pair in chosen if pair not in running]
        typed: dict[int, FreeGPUs] = {}
        for combo, t in chosen:
            self._start(state, builder, combo, t, typed)
        place_wide_jobs(state, builder, self.placement)

    def _start(
        self,
        state: SchedulerState,
        builder: PlanBuilder,
        combo: Combo,
        t: int,
        typed: dict[int, FreeGPUs],
    ) -> None:
        """Start a combination on type ``t``. ``typed`` holds each type's free GPUs
        as this plan leaves them, made once per round and kept in step with the
        starts (the plan's only changes to the free GPUs while it starts jobs)."""
        for j in combo:  # a job this plan stops is pending again once the stop is applied
            if state.status[j] != PENDING and j not in builder.plan.stops:
                return
        host = combo[0]
        free = typed.get(t)
        if free is None:
            free = typed[t] = builder.free.of_type(t)
        gpus = self.placement.choose_for(free, state, host)
        if gpus is None:
            return  # the type has the GPUs but not on few enough servers: next round
        builder.start(host, gpus)
        free.take(gpus)
        if len(combo) == 2:
            guest = combo[1]
            factors = self._pair_factors(state, guest, host, t)
            if factors is not None:  # (None: they do not fit together; the guest waits)
                builder.pack(guest, host, *factors)

    def _pair_factors(
        self, state: SchedulerState, guest: int, host: int, t: int
    ) -> tuple[float, float] | None:
        """The (guest, host) speeds of a pair packed on type ``t``, each relative to
        alone; None where they cannot share GPUs."""
        return 1.0, 1.0


class GavelMaxMinAgnostic(GavelPolicy):
    name = "gavel-max-min-fairness-agnostic"
    description = "Gavel's heterogeneity-agnostic max-min fairness (every GPU type alike)"

    def __init__(self, placement: PlacementStrategy | None = None, **params: Any) -> None:
        super().__init__(placement, **params)
        self._shuffle = np.random.default_rng(0)

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        return max_min_fairness(self._problem(state, jobs), agnostic=True)

    def _round_type_order(self) -> list[int]:
        """Blind to speed, Gavel shuffles the types' order each time it ranks (seeded)."""
        order = list(self._type_order)
        self._shuffle.shuffle(order)
        return order


class GavelFinishTimeFairness(GavelPolicy):
    name = "gavel-finish-time-fairness"
    reads_durations = True
    static_allocation = False  # (its allocation depends on each job's time so far and work left)
    description = "Gavel: minimise the worst finish-time fairness rho (Themis' metric), LPs"

    def __init__(self, placement: PlacementStrategy | None = None, **params: Any) -> None:
        super().__init__(placement, **params)
        self._isolated_so_far: dict[int, float] = {}
        """Seconds each job's progress so far would have taken isolated (Gavel's
        running sum: at each solve, the steps made since the last one over the
        isolated throughput of then)."""
        self._last_remaining: dict[int, tuple[float, float]] = {}
        """At the last solve: each job's steps left and isolated throughput."""

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        remaining = remaining_steps(state, jobs)
        elapsed = state.now - state.submit[jobs]
        problem = self._problem(state, jobs)
        isolated = problem.isolated_throughput()
        so_far = np.zeros(len(jobs))
        seen: dict[int, tuple[float, float]] = {}
        for r, j in enumerate(jobs.tolist()):
            before = self._last_remaining.get(j)
            total = self._isolated_so_far.get(j, 0.0)
            if before is not None and before[1] > 0:
                total += (before[0] - float(remaining[r])) / before[1]
            so_far[r] = total
            seen[j] = (float(remaining[r]), float(isolated[r]))
        # (each job's own entries: POP's parts are solved side by side)
        self._isolated_so_far.update(zip(seen, so_far.tolist(), strict=True))
        self._last_remaining.update(seen)
        x, _ = finish_time_fairness(problem, elapsed, remaining, so_far)
        return x

    def _solve(self, state: SchedulerState, active: np.ndarray) -> None:
        alive = set(active.tolist())  # (what is kept of jobs gone is dropped first)
        self._isolated_so_far = {j: v for j, v in self._isolated_so_far.items() if j in alive}
        self._last_remaining = {j: v for j, v in self._last_remaining.items() if j in alive}
        super()._solve(state, active)


class GavelMinMakespan(GavelPolicy):
    name = "gavel-min-makespan"
    reads_durations = True
    static_allocation = False  # (its allocation depends on each job's work left)
    description = "Gavel: finish the jobs present as early as possible (LP)"

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        remaining = remaining_steps(state, jobs)
        return min_makespan(self._problem(state, jobs), remaining)

    def _pop_load(self, state: SchedulerState, active: np.ndarray) -> np.ndarray | None:
        """GPU-seconds each job has left on its fastest type: the makespan is the
        work of a part over its GPUs, so the parts must have equal work."""
        best = np.maximum(state.type_speed[active].max(axis=1), 1e-9)
        load: np.ndarray = remaining_steps(state, active) / best * state.gpus[active]
        return load


class GavelMaxThroughput(GavelPolicy):
    name = "gavel-max-throughput"
    description = "Gavel: maximise the total normalised throughput (LP)"

    def allocate(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        return max_throughput(self._problem(state, jobs))


class GavelMaxMinPacked(GavelPolicy):
    name = "gavel-max-min-fairness-packed"
    static_allocation = False  # (its pairs' measured speeds change as they are measured)
    live_note = (
        "a packed pair runs as two process groups on the same GPUs; its speeds are Gavel's "
        "measured ones, not re-measured live"
    )
    options: ClassVar[dict[str, Option]] = {
        "partners": Option("measured partners considered per job", "integer", low=0),
        "profiled": Option(
            "Gavel's throughput estimator: this many job types, chosen at random, have every "
            "pair measured ahead; each other type is matched to the nearest of them from a few "
            "pairs measured when it arrives (see profile_share) and packs as it would (unset: "
            "every pair measured)",
            "integer",
            low=1,
            unset=True,
        ),
        "profile_share": Option(
            "with profiled: the share of a new job type's pairs with the profiled types "
            "measured when it arrives",
            above=0,
            high=1,
        ),
    }
    description = "Gavel with space sharing: max-min fairness where measured pairs may share a gang"
    packed = True

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        round: float = 360.0,
        fill_between_rounds: int = 1,
        reset_window: float | None = None,
        partners: int = 3,
        pop: int | None = None,
        pop_split: str = "balanced",
        profiled: int | None = None,
        profile_share: float = 0.1,
    ) -> None:
        super().__init__(placement, round, fill_between_rounds, reset_window, pop, pop_split)
        self.partners = int(partners)
        self.table: ThroughputTable = gavel_throughputs()
        self.estimator = (
            None if profiled is None else PairEstimator(self.table, int(profiled), profile_share)
        )
        """Gavel's throughput estimator (None: every pair measured): what the LP
        believes of pairs; they run at their measured speeds."""
        self._pairings: dict[
            tuple[str, str, int, tuple[str, ...]], tuple[float, list[tuple[float, float]]] | None
        ] = {}

    def _pair(
        self, state: SchedulerState, a: int, b: int, gpu_type: str, measured: bool = False
    ) -> tuple[float, float] | None:
        """(a, b)'s throughputs packed together, relative to each alone, as the
        estimator gives them (``measured``: as measured); None when unknown, or when
        one of them does not run, alone or beside the other."""
        g = int(state.gpus[a])
        source = self.table if measured or self.estimator is None else self.estimator
        rel = source.relative_pair((state.job_type[a], g), (state.job_type[b], g), (gpu_type, True))
        return None if rel is None or min(rel) <= 0 else rel

    def _pairing(
        self, state: SchedulerState, a: int, b: int, names: Sequence[str]
    ) -> tuple[float, list[tuple[float, float]]] | None:
        """The gain of packing ``a`` with ``b`` (their relative speeds summed, averaged
        over GPU types) and the speeds per type; None where some type lacks them.
        It depends on the two job types and the size only, so it is kept by those:
        a solve asks it of every pair of active jobs of one size."""
        key = self._key(state, a, b, names)
        if key not in self._pairings:
            rel = [self._pair(state, a, b, t) for t in names]
            known = [r for r in rel if r is not None]
            self._pairings[key] = (
                (sum(r[0] + r[1] for r in known) / len(names), known)
                if len(known) == len(rel)
                else None
            )
        return self._pairings[key]

    def _solve_group(
        self, state: SchedulerState, active: np.ndarray
    ) -> tuple[list[Combo], np.ndarray]:
        names = state.cluster.gpu_type_names
        base = self._problem(state, active)
        local = {int(j): r for r, j in enumerate(active)}
        combos: list[Combo] = [(int(j),) for j in active]
        rows: list[np.ndarray] = [
            np.stack([base.throughput[r], np.zeros(len(names))]) for r in range(len(active))
        ]
        by_size: dict[int, dict[str, list[int]]] = {}
        for j in sorted(active.tolist()):
            by_size.setdefault(int(state.gpus[j]), {}).setdefault(state.job_type[j], []).append(j)
        for classes in by_size.values():
            for a in sorted(j for members in classes.values() for j in members):
                # Each partner b > a is scored (gain, b), best first: the same pairing
                # for every job of b's type, so only the last few ids of each type
                # can be among the best.
                scored = []
                for members in classes.values():
                    pairing = self._pairing(state, a, members[0], names)
                    if pairing is None or pairing[0] <= 1.0:
                        continue
                    later = members[bisect_right(members, a) :]
                    scored += [(pairing[0], b, pairing[1]) for b in later[-self.partners :]]
                scored.sort(reverse=True)
                for _, b, rel in scored[: self.partners]:
                    combos.append((a, b))
                    ta = base.throughput[local[a]]
                    tb = base.throughput[local[b]]
                    rows.append(np.stack([ta * [r[0] for r in rel], tb * [r[1] for r in rel]]))
        problem = AllocationProblem(
            throughput=base.throughput,
            gpus=base.gpus,
            capacity=base.capacity,
            weights=base.weights,
            combos=[tuple(local[j] for j in c) for c in combos],
            combo_throughput=np.stack(rows),
        )
        return combos, max_min_fairness_packed(problem)

    def _pair_factors(
        self, state: SchedulerState, guest: int, host: int, t: int
    ) -> tuple[float, float] | None:
        """The pair's measured speeds. An estimated pair that does not fit (out of GPU
        memory in Gavel's measurements) is not packed, and its pairing is forgotten
        on every type, as an estimator learns from the failure."""
        names = state.cluster.gpu_type_names
        rel = self._pair(state, host, guest, names[t], measured=True)
        if rel is None:
            for key in [k for k in self._pairings if k[:3] == self._key(state, host, guest)[:3]]:
                self._pairings[key] = None
            return None
        return rel[1], rel[0]

    @staticmethod
    def _key(
        state: SchedulerState, a: int, b: int, names: Sequence[str] = ()
    ) -> tuple[str, str, int, tuple[str, ...]]:
        return (state.job_type[a], state.job_type[b], int(state.gpus[a]), tuple(names))


GAVEL_POLICIES: tuple[type[GavelPolicy], ...] = (
    GavelPolicy,
    GavelMaxMinAgnostic,
    GavelFinishTimeFairness,
    GavelMinMakespan,
    GavelMaxThroughput,
    GavelMaxMinPacked,
)
