"""Themis: finish-time fair leases decided by a partial-allocation auction.

Finish-time fairness rho = the job's expected JCT sharing the cluster / its
JCT alone on a 1/N share (N jobs present). Every ``lease`` seconds all
leases end and the GPUs are offered to the ``1 - fraction`` of jobs with the
worst rho. Each of them bids its rho with its gang on each GPU type (and
without GPUs for this lease); the auction picks the allocation with the
largest product of 1/rho (Nash social welfare; found greedily here, as the
gangs are rigid), then gives each winner only the share
``c = (others' welfare with it) / (others' welfare without it)`` of the lease
(the partial-allocation "hidden payment" that keeps bids truthful): it holds
its GPUs for ``c x lease`` seconds. GPUs no winner took, and those returned
when partial leases end, go to the remaining jobs, worst rho first
(Themis' work-conserving leftover allocation). A job that wins its current
GPUs' type again keeps its GPUs.
"""

from __future__ import annotations

import bisect
import math
from typing import Any, ClassVar

import numpy as np

from corral.model.plan import Plan
from corral.model.state import PENDING, SchedulerState
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy, place_wide_jobs, type_holds
from corral.policies.options import Option

Bids = dict[int, tuple[np.ndarray, float]]
"""Each bidder's rho with its gang on each GPU type, and with no GPUs this lease."""


class Themis(Policy):
    name: ClassVar[str] = "themis"
    reads_durations = True
    options: ClassVar[dict[str, Option]] = {
        "lease": Option("lease length (s)", above=0),
        "fraction": Option(
            "f: the share of jobs with the best finish-time fairness left out of the auction",
            low=0,
            high=1,
        ),
    }
    description: ClassVar[str] = (
        "Themis: leases to the jobs with the worst finish-time fairness by a "
        "partial-allocation auction, leftovers work-conserving"
    )

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        lease: float = 600.0,
        fraction: float = 0.8,
        **params: Any,
    ) -> None:
        super().__init__(placement, **params)
        if lease <= 0:
            raise ValueError(f"lease must be positive, got {lease}")
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"fraction must be in [0, 1), got {fraction}")
        self.lease = float(lease)
        self.fraction = float(fraction)
        self._round_end = -math.inf
        self._lease_end: dict[int, float] = {}
        self.auctions = 0

    # ----------------------------------------------------------- rho
    def _mean_speed(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        """Steps/s averaged over the cluster's GPUs (a share of every type)."""
        capacity = state.cluster.type_gpus
        out: np.ndarray = state.type_speed[jobs] @ (capacity / capacity.sum())
        return out

    def rho(
        self, state: SchedulerState, jobs: np.ndarray, speed: np.ndarray, delay: float = 0.0
    ) -> np.ndarray:
        """Finish-time fairness of ``jobs`` if each ran at ``speed`` from ``delay``
        seconds from now: (time so far + delay + time left) / time alone on 1/N."""
        total = float(state.cluster.type_gpus.sum())
        n_active = max(len(state.pending) + len(state.running), 1)
        share = np.minimum(1.0, total / n_active / state.gpus[jobs])
        isolated = state.total_steps[jobs] / np.maximum(
            self._mean_speed(state, jobs) * share, 1e-12
        )
        left = np.maximum(state.total_steps[jobs] - state.done_steps(jobs), 0.0)
        shared = (state.now - state.submit[jobs]) + delay + left / np.maximum(speed, 1e-12)
        out: np.ndarray = shared / isolated
        return out

    def _current_rho(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        """Running jobs at their current speed; waiting ones as if they got a
        fair mix of types now."""
        pending = state.status[jobs] == PENDING
        speed = np.where(pending, self._mean_speed(state, jobs), state.speed[jobs])
        return self.rho(state, jobs, speed)

    # ---------------------------------------------------------- auction
    def _bids(self, state: SchedulerState, bidders: list[int]) -> Bids:
        """Each bidder's rho with its gang on each type this lease, and with
        none (its progress then waits a lease, at its mean speed after)."""
        if not bidders:
            return {}
        who = np.asarray(bidders, dtype=np.int64)
        k = len(state.cluster.gpu_type_names)
        per_type = self.rho(state, np.repeat(who, k), state.type_speed[who].reshape(-1))
        idle = self.rho(state, who, self._mean_speed(state, who), self.lease)
        rows = per_type.reshape(len(who), k)
        return {j: (rows[r], float(idle[r])) for r, j in enumerate(bidders)}

    @staticmethod
    def _offers(state: SchedulerState, bids: Bids, bidders: list[int]) -> list[tuple[int, int]]:
        """Every (bidder, GPU type) that beats the bidder's idle rho, by gain in
        log rho per GPU, best first: the order the greedy allocation reads."""
        gains = []
        holds = type_holds(state, np.asarray(bidders, dtype=np.int64))
        for r, j in enumerate(bidders):
            per_type, idle = bids[j]
            for t, value in enumerate(per_type.tolist()):
                # (a rho of 0 or less: no work left to speak of, nothing to gain; live,
                # a job's measured progress may pass its estimate)
                if holds[r, t] and state.type_speed[j, t] > 0 and 0 < value < idle:
                    gain = math.log(idle) - math.log(value)
                    gains.append((-gain / state.gpus[j], j, t))
        gains.sort()
        return [(j, t) for _, j, t in gains]

    def _welfare_allocation(
        self, state: SchedulerState, bids: Bids, bidders: list[int], room: np.ndarray
    ) -> dict[int, int]:
        """Greedy max of the product of 1/rho: assignments by gain in log rho per GPU."""
        chosen, _, _ = _greedy(self._offers(state, bids, bidders), room, state.gpus)
        return chosen

    @staticmethod
    def _log_value(bids: Bids, j: int, t: int | None) -> float:
        """log(1/rho) of bidder ``j`` on type ``t`` (None: no GPUs this lease)."""
        per_type, idle = bids[j]
        value = idle if t is None else per_type[t]
        return -math.log(max(float(value), 1e-12))

    def auction(
        self, state: SchedulerState, bidders: list[int], room: np.ndarray
    ) -> dict[int, tuple[int, float]]:
        """Winners -> (GPU type, share of the lease).

        A winner's share is the others' welfare with it over their welfare
        without it, the second found by running the greedy allocation again
        without the winner. That run matches the first up to the winner's own
        offer and, after it, from the first offer where both have the same
        GPUs left and no bidder served differently has an offer left: only the
        offers in between are replayed (exactly the allocation a full re-run
        finds, in a fraction of the time: a deep queue has thousands of winners).
        """
        self.auctions += 1
        bids = self._bids(state, bidders)
        offers = self._offers(state, bids, bidders)
        gpus = state.gpus
        chosen, where, lefts = _greedy(offers, room, gpus)
        took = [False] * len(offers)
        for s in where.values():
            took[s] = True
        last = {j: s for s, (j, _) in enumerate(offers)}  # each bidder's last offer
        # after the full run's last take, and when every bidder made one offer, what
        # a run without a winner takes from there depends only on the GPUs it has
        # left: worked out once per such count
        tail = max(where.values(), default=-1) + 1
        once = len(last) == len(offers)
        tails: dict[tuple[int, ...], tuple[list[tuple[int, int]], list[int]]] = {}
        rejected = [s for s, take in enumerate(took) if not take]
        out: dict[int, tuple[int, float]] = {}
        for j, t in chosen.items():
            p = where[j]
            # without j: j's offer and its later ones are skipped
            free = lefts[p - 1].copy() if p else [int(x) for x in room]
            # bidders whose allocation without j differs from the full run's so
            # far (up to the current offer): their allocation without j
            differs: dict[int, int | None] = {}
            horizon = -1  # the last offer of any bidder that differed
            s = p + 1
            while s < len(offers):
                if not differs:
                    # the same bidders served: the run without j has j's GPUs more
                    # than the full run, so it takes whatever the full run takes
                    # until the full run's next refusal
                    k = bisect.bisect_left(rejected, s)
                    if k == len(rejected):
                        break
                    if rejected[k] > s:
                        s = rejected[k]
                        free = lefts[s - 1].copy()
                        free[t] += int(gpus[j])
                if horizon < s and free == lefts[s - 1]:
                    break  # the same GPUs left, no bidder that differs offers again
                if once and s == tail:
                    taken, free = self._fill(offers, tail, free, gpus, tails)
                    differs.update(taken)
                    break
                i, u = offers[s]
                s += 1
                if i == j:
                    continue
                before = chosen[i] if i in chosen and where[i] < s - 1 else None
                now_without = differs.get(i, before)
                take = now_without is None and free[u] >= gpus[i]
                if take:
                    free[u] -= int(gpus[i])
                    now_without = u
                with_j = chosen[i] if i in chosen and where[i] <= s - 1 else None
                if now_without == with_j:
                    differs.pop(i, None)
                else:
                    differs[i] = now_without
                    horizon = max(horizon, last[i])
            # the others' log welfare without j, less theirs with j
            gain = sum(
                self._log_value(bids, i, u) - self._log_value(bids, i, chosen.get(i))
                for i, u in differs.items()
            )
            out[j] = (t, math.exp(min(0.0, -gain)))
        return out

    @staticmethod
    def _fill(
        offers: list[tuple[int, int]],
        start: int,
        free: list[int],
        gpus: np.ndarray,
        memo: dict[tuple[int, ...], tuple[list[tuple[int, int]], list[int]]],
    ) -> tuple[list[tuple[int, int]], list[int]]:
        """The offers from ``start`` on that fit, in order, with ``free`` GPUs left
        (each bidder making one offer): those taken, and the GPUs left after."""
        key = tuple(free)
        if key not in memo:
            left = list(free)
            taken = []
            for i, u in offers[start:]:
                if left[u] >= gpus[i]:
                    left[u] -= int(gpus[i])
                    taken.append((i, u))
            memo[key] = (taken, left)
        taken, left = memo[key]
        return taken, list(left)

    # ---------------------------------------------------------- schedule
    def schedule(self, state: SchedulerState) -> Plan:
        builder = PlanBuilder(state)
        now = state.now
        for j, end in list(self._lease_end.items()):
            if end <= now + 1e-9 and j in state.running:
                builder.stop(j)
            if end <= now + 1e-9 or j not in state.running:
                del self._lease_end[j]
        if now >= self._round_end and (len(state.pending) or len(state.running)):
            self._round_end = now + self.lease
            self._round(state, builder)
        else:
            self._leftovers(state, builder, set())
            place_wide_jobs(state, builder, self.placement)
        ends = [e for e in self._lease_end.values() if e > now]
        active = len(state.pending) + len(state.running) > 0
        wake = min([self._round_end, *ends]) if active else None
        return builder.build(wake)

    def _round(self, state: SchedulerState, builder: PlanBuilder) -> None:
        active = np.concatenate([state.pending.array(), state.running.array()])
        rho = self._current_rho(state, active)
        order = active[np.argsort(-rho, kind="stable")]
        count = max(1, math.ceil((1.0 - self.fraction) * len(order)))
        bidders = [int(j) for j in order[:count]]
        room = state.cluster.type_gpus.copy()
        won = self.auction(state, bidders, room)
        type_of = state.cluster.gpu_type_id
        current = {int(i): int(type_of[state.alloc[i][0]]) for i in state.running}  # type: ignore[index]
        ended = set(builder.plan.stops)  # (leases that ended this pass: stopped already)
        keep: set[int] = set()
        for j, (t, _) in won.items():
            if current.get(j) == t:
                keep.add(j)
                if j in ended:  # its lease ended, and it wins the same GPUs again
                    builder.unstop(j)
        for i in current:
            if i not in keep and i not in ended:  # (never stopped twice: a double release)
                builder.stop(i)
        for j, (t, share) in sorted(won.items(), key=lambda kv: -kv[1][1]):
            if j not in keep and not self._start_on(state, builder, j, t):
                continue
            if share < 1.0 - 1e-9:
                self._lease_end[j] = state.now + share * self.lease
        self._leftovers(state, builder, set(won), order)
        place_wide_jobs(state, builder, self.placement)

    def _start_on(self, state: SchedulerState, builder: PlanBuilder, j: int, t: int) -> bool:
        gpus = self.placement.choose_for(builder.free.of_type(t), state, j)
        if gpus is None:
            return False
        builder.start(j, gpus)
        return True

    def _leftovers(
        self,
        state: SchedulerState,
        builder: PlanBuilder,
        skip: set[int],
        order: np.ndarray | None = None,
    ) -> None:
        """Free GPUs to waiting jobs, worst rho first, each on its fastest type with room."""
        if not builder.free.total or not len(state.pending):
            return
        if order is None:
            waiting = state.pending.array()
            order = waiting[np.argsort(-self._current_rho(state, waiting), kind="stable")]
        for j in order.tolist():
            if j in skip or j in builder.plan.starts:
                continue
            if state.status[j] != PENDING and j not in builder.plan.stops:
                continue
            room = builder.free.by_type()
            need = int(state.gpus[j])
            for t in np.argsort(-state.type_speed[j], kind="stable").tolist():
                fits = room[t] >= need and state.type_speed[j, t] > 0
                if fits and self._start_on(state, builder, j, t):
                    break
            if not builder.free.total:
                break


def _greedy(
    offers: list[tuple[int, int]], room: np.ndarray, gpus: np.ndarray
) -> tuple[dict[int, int], dict[int, int], list[list[int]]]:
    """The greedy allocation over ``offers`` (best first): each bidder's type, the
    offer that won it, and the GPUs left by type after each offer."""
    left = [int(x) for x in room]
    chosen: dict[int, int] = {}
    where: dict[int, int] = {}
    lefts: list[list[int]] = []
    for s, (j, t) in enumerate(offers):
        if j not in chosen and left[t] >= gpus[j]:
            chosen[j] = t
            left[t] -= int(gpus[j])
            where[j] = s
        lefts.append(left.copy())
    return chosen, where, lefts
