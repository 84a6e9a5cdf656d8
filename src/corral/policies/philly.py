"""Philly: YARN's capacity scheduler with per-VC quotas and relaxed gang locality.

Microsoft's Philly (Jeon et al., ATC '19) gives each virtual cluster (VC) a
quota of GPUs. Every VC queues its jobs first come first served. A pass:

1. **Within quota**: each waiting job whose VC stays within its quota is
   placed, in submit order (a job that cannot be placed now does not hold up
   the ones behind it).
2. **Reclaim**: a job that is within its VC's quota but finds the GPUs lent
   out preempts borrowed jobs (from the VC furthest over its quota, most
   recently started first), but only if that lets it be placed.
3. **Lending**: GPUs still idle go to waiting jobs of any VC, the VC furthest
   below its fair share (usage / quota) first; such jobs run on borrowed
   GPUs and are the ones reclaimed in step 2.

Placement is gang and locality-aware (:mod:`corral.placement.relaxed`): a job
first asks for the fewest servers in one rack, after ``relax_after[0]``
seconds of waiting for any servers of one rack, after ``relax_after[1]`` for
anything. A job that could not be placed is not tried again until a back-off
has passed (``backoff`` seconds, doubling per failed try, at most
``backoff_max``), or until GPUs are released (``retry_on_release``, the
default): YARN offers a node's freed resources to the queue at its next
heartbeat, so a job that fits the GPUs now free tries again at once, at the
locality level its wait has reached. Without it a gang could wait out its
back-off on an idle cluster.

Quotas are given as ``vc=GPUs`` pairs, or default to each VC's share of the
trace's GPU-time demand (the trace does not record the real quotas). Live,
jobs name their VC in the spec (``vc``), quotas come from the service's
``vcs`` setting, and without it every VC seen so far gets an equal share; a
VC with no quota only borrows idle GPUs. Failures
and retries are the engine's (``SimConfig.failure_rate`` / ``max_retries``).
"""

from __future__ import annotations

import bisect
import heapq
from typing import Any, ClassVar

import numpy as np

from corral.model.free_gpus import FreeGPUs
from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.placement.relaxed import LEVELS, RelaxedLocality
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy, option_flag
from corral.policies.options import Option
from corral.policies.vcs import VirtualClusters, demand_quotas, parse_quotas

__all__ = ["Philly", "demand_quotas", "parse_quotas"]

MAX_TRIES = 60
"""Failed tries counted towards the back-off (it is capped long before)."""


class Philly(Policy):
    name = "philly"
    options: ClassVar[dict[str, Option]] = {
        "quotas": Option(
            "VC quotas as vc=GPUs,... (unset: each VC's share of the trace's GPU-time demand)",
            "text",
            unset=True,
        ),
        "relax_after": Option(
            "seconds of waiting after which placement relaxes to one rack, then anywhere (two "
            "numbers)",
            "text",
        ),
        "backoff": Option("first back-off between placement tries (s)", above=0),
        "backoff_max": Option("longest back-off between placement tries (s)", above=0),
        "retry_on_release": Option(
            "retry placement at once when GPUs are released (YARN offers freed resources)", "flag"
        ),
    }
    description = "per-VC FIFO queues with quotas, lending of idle GPUs, relaxed gang locality"

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        quotas: str | dict[str, float] | None = None,
        relax_after: Any = "300,900",
        backoff: float = 60.0,
        backoff_max: float = 480.0,
        retry_on_release: Any = True,
    ) -> None:
        super().__init__(placement or RelaxedLocality())
        self.vcs = VirtualClusters(quotas)
        steps = [float(v) for v in str(relax_after).replace("/", ",").split(",") if v.strip()]
        if len(steps) != len(LEVELS) - 1 or steps[0] < 0 or steps[1] < steps[0]:
            raise ValueError(
                f"relax_after must be two increasing waits in seconds, got {relax_after}"
            )
        if backoff <= 0 or backoff_max < backoff:
            raise ValueError("backoff must be > 0 and backoff_max >= backoff")
        self.relax_after = steps
        self.retry_on_release = option_flag(retry_on_release, "retry_on_release")
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self._waits = np.minimum(self.backoff * 2.0 ** (np.arange(MAX_TRIES + 1) - 1), backoff_max)
        """The back-off after the k-th failed try in a row (a table: a pass
        backs off hundreds of jobs)."""
        self._n = -1

    # ------------------------------------------------------------ set-up
    def _init(self, state: SchedulerState) -> None:
        n = len(state.submit)
        self._n = n
        self.vcs.ensure(state)
        self.next_try = np.zeros(n)
        self.tries = np.zeros(n, dtype=np.int64)
        self.why: dict[int, str] = {}
        """Why each job's last try to start failed (pending reasons, live)."""
        self._free_after = state.free.total
        """Free GPUs when the last pass' plan was carried out: more now means
        GPUs were released since (a job ended or was stopped)."""
        self._quiet: tuple[int, float] = (-1, 0.0)
        """After a pass that changed nothing: the state's queue count then and the
        earliest retry; until either moves no job is due, so a pass has nothing
        to do (most events between heartbeats)."""

    @property
    def vc(self) -> np.ndarray:
        """Each job's VC id."""
        return self.vcs.vc

    @property
    def quota(self) -> np.ndarray:
        """Each VC's quota in GPUs."""
        return self.vcs.quota

    @property
    def vc_names(self) -> list[str]:
        return self.vcs.names

    def waiting_reasons(self, state: SchedulerState) -> dict[int, str]:
        """A job backing off keeps the reason its last try failed for."""
        if self._n != len(state.submit):
            return {}
        return {i: self.why.get(i, "Backoff") for i in state.pending}

    def quotas(self) -> dict[str, float]:
        return self.vcs.quotas()

    def level(self, state: SchedulerState, i: int) -> int:
        """How far job ``i``'s locality is relaxed, from how long it has waited."""
        waited = state.now - float(state.queued_since[i])
        return bisect.bisect_right(self.relax_after, waited)

    # ------------------------------------------------------------ the pass
    def schedule(self, state: SchedulerState) -> Plan:
        plan = self._pass(state)
        freed = sum(len(state.alloc[j] or ()) for j in plan.stops)
        taken = sum(len(gpus) for gpus in plan.starts.values())
        self._free_after = state.free.total + freed - taken
        return plan

    def _pass(self, state: SchedulerState) -> Plan:
        if self._n != len(state.submit):
            self._init(state)
        builder = PlanBuilder(state)
        now = state.now
        if self.retry_on_release and state.free.total > self._free_after:
            self._retry_released(state)
        quiet_count, earliest = self._quiet
        if quiet_count == state.queue_changes and now < earliest:
            return builder.build(_finite(earliest))  # the same jobs wait, none is due
        pending = state.pending.array()
        if not len(pending):
            return builder.build()
        retry_at = self.next_try[pending]
        is_due = retry_at <= now
        due = pending[is_due]
        due.sort()
        # jobs not due keep their retry time through the pass (the ufuncs'
        # own methods: numpy's wrappers cost more than this work, every event)
        not_due = float(np.minimum.reduce(np.where(is_due, np.inf, retry_at)))
        if not len(due):  # nobody's turn to try: only the next wake-up to find
            self._quiet = (state.queue_changes, not_due)
            return builder.build(_finite(not_due))
        running = state.running.array()
        self.vcs.see_live(state)
        usage = np.bincount(
            self.vc[running], weights=state.gpus[running], minlength=len(self.quota)
        )
        # Jobs that cannot start whatever happens in this pass fail at once
        # (vectorised): more GPUs than are free, plus those that could be
        # reclaimed from borrowers when the job is within its VC's quota.
        free_now = state.free.total
        reclaimable = float(np.maximum(usage - self.quota, 0.0).sum())
        need = state.gpus[due]
        within = usage[self.vc[due]] + need <= self.quota[self.vc[due]]
        possible = need <= free_now + np.where(within, reclaimable, 0.0)
        failed: list[int] = due[~possible].tolist()
        tried = due[possible]
        waiting = tried
        if len(tried):
            handled = self._within_quota(builder, state, tried, running, usage, failed)
            waiting = np.delete(tried, handled) if handled else tried
        over_quota = self._lend(builder, state, waiting, usage)
        if not state.known_in_advance:  # reasons are shown live only
            self._note_reasons(builder, state, due, possible, within, failed, over_quota.tolist())
        retried = self._back_off(
            state, np.concatenate((np.asarray(failed, dtype=np.int64), over_quota))
        )
        plan = builder.build(_finite(min(not_due, retried)))
        changed = plan.starts or plan.stops
        self._quiet = (-1, 0.0) if changed else (state.queue_changes, min(not_due, retried))
        return plan

    def _within_quota(
        self,
        builder: PlanBuilder,
        state: SchedulerState,
        tried: np.ndarray,
        running: np.ndarray,
        usage: np.ndarray,
        failed: list[int],
    ) -> list[int]:
        """Step 1 and 2 of the pass: in submit order, each job whose VC stays
        within its quota at its turn is placed, reclaiming borrowed GPUs if need
        be, or fails (appended to ``failed``). Returns the positions in
        ``tried`` that took this path; the others wait for lending.

        Most of a backlog is over its VC's quota, and a VC's usage only grows
        while jobs are placed, so the jobs within quota are found with one
        vectorised test and only they are walked; a reclaim lowers other VCs'
        usage, and the test is then taken again for the jobs behind.
        """
        vc, gpus = self.vc[tried], state.gpus[tried]
        jobs, vcs, sizes = tried.tolist(), vc.tolist(), gpus.tolist()
        quota = self.quota.tolist()
        handled: list[int] = []
        start = 0
        while start < len(jobs):
            ahead = (usage[vc[start:]] + gpus[start:] <= self.quota[vc[start:]]).nonzero()[0]
            start_again = len(jobs)
            for k in (ahead + start).tolist():
                v, g = vcs[k], sizes[k]
                if usage[v] + g > quota[v]:
                    continue  # its VC's own placements took it over quota: it waits
                handled.append(k)
                i = jobs[k]
                stops = len(builder.plan.stops)
                if self._place(builder, state, i) or self._reclaim(
                    builder, state, i, running, usage
                ):
                    usage[v] += g
                else:
                    failed.append(i)
                if len(builder.plan.stops) != stops:  # reclaimed: usage fell elsewhere
                    start_again = k + 1
                    break
            start = start_again
        return handled

    def _note_reasons(
        self,
        builder: PlanBuilder,
        state: SchedulerState,
        due: np.ndarray,
        possible: np.ndarray,
        within: np.ndarray,
        failed: list[int],
        over_quota: list[int],
    ) -> None:
        """Why each job that tried and failed waits, for the live queue."""
        why = self.why
        blocked = set(due[~possible & ~within].tolist())  # over quota, nothing idle to borrow
        for i in failed:
            if i in blocked:
                why[i] = "QuotaExceeded"
            else:  # Locality: enough GPUs are free, only not close enough together yet
                why[i] = "Locality" if builder.free.total >= state.gpus[i] else "Resources"
        for i in over_quota:
            why[i] = "QuotaExceeded"

    def _lend(
        self, builder: PlanBuilder, state: SchedulerState, waiting: np.ndarray, usage: np.ndarray
    ) -> np.ndarray:
        """Idle GPUs to over-quota jobs, the VC with the lowest usage / quota first.

        Returns the jobs that got nothing. Shares are updated after every
        placement, so VCs take turns rather than one VC taking all. A pass
        lends to a few jobs of a long backlog, so each VC's queue is a slice
        of the backlog grouped by VC (one stable sort), read from its head.
        """
        if builder.free_total <= 0 or not len(waiting):
            return waiting  # nothing idle to lend (most passes on a busy cluster)
        order = waiting[self.vc[waiting].argsort(kind="stable")]
        vcs = self.vc[order]
        firsts = np.flatnonzero(np.concatenate(([True], vcs[1:] != vcs[:-1])))
        ends = np.append(firsts[1:], len(order)).tolist()
        head = dict(zip(vcs[firsts].tolist(), firsts.tolist(), strict=True))
        end = dict(zip(vcs[firsts].tolist(), ends, strict=True))
        jobs = order.tolist()
        quota = self.quota

        def turn(v: int) -> tuple[float, int]:
            return (usage[v] / max(quota[v], 1e-9), v)

        turns = [turn(v) for v in head]
        heapq.heapify(turns)
        # Lending only takes GPUs, so a job that found no place fails again
        # for every later job of the same size, locality level and type.
        no_place: set[tuple[int, int, int, int]] = set()
        lent: list[int] = []
        while turns and builder.free_total > 0:
            _, v = heapq.heappop(turns)
            at = head[v]
            i = jobs[at]
            head[v] = at + 1
            kind = (
                int(state.gpus[i]),
                self.level(state, i),
                int(state.type_req[i]),
                int(state.nodes_req[i]),
            )
            if kind not in no_place and self._place(builder, state, i):
                usage[v] += state.gpus[i]
                lent.append(at)
            else:
                no_place.add(kind)
            if at + 1 < end[v]:
                heapq.heappush(turns, turn(v))
        return np.delete(order, lent) if lent else order

    def _choose(self, free: FreeGPUs, state: SchedulerState, i: int) -> list[int] | None:
        """GPUs for job ``i`` at the locality its wait allows (any other
        strategy given with ``--placement`` is used as it is)."""
        if int(state.gpus[i]) > free.total:
            return None
        bound = int(state.type_req[i])
        if bound >= 0:  # a job bound to a GPU type is placed among those only
            free = free.of_type(bound)
            if int(state.gpus[i]) > free.total:
                return None
        if isinstance(self.placement, RelaxedLocality) and not state.nodes_req[i]:
            return self.placement.choose_level(free, int(state.gpus[i]), self.level(state, i))
        return self.placement.choose_for(free, state, i)

    def _place(self, builder: PlanBuilder, state: SchedulerState, i: int) -> bool:
        gpus = self._choose(builder.free, state, i)
        if gpus is None:
            return False
        builder.start(i, gpus)
        self.tries[i] = 0
        self.why.pop(i, None)
        return True

    def _reclaim(
        self,
        builder: PlanBuilder,
        state: SchedulerState,
        i: int,
        running: np.ndarray,
        usage: np.ndarray,
    ) -> bool:
        """Preempt borrowed jobs for job ``i`` if that lets it be placed."""
        over = usage - self.quota
        stopped = set(builder.plan.stops)
        borrowed = [
            j
            for j in running.tolist()
            if over[self.vc[j]] > 0 and j not in stopped and self.vc[j] != self.vc[i]
        ]
        if not borrowed:
            return False
        borrowed.sort(key=lambda j: (-over[self.vc[j]], -state.seg_start[j], -j))
        trial = builder.free.copy()
        need = int(state.gpus[i])
        chosen: list[int] = []
        left = over.copy()
        for j in borrowed:
            if left[self.vc[j]] <= 0:
                continue
            gpus = state.alloc[j]
            assert gpus is not None
            trial.release(gpus)
            chosen.append(j)
            left[self.vc[j]] -= state.gpus[j]
            if trial.total >= need and self._choose(trial, state, i) is not None:
                for k in chosen:
                    builder.stop(k)
                    usage[self.vc[k]] -= state.gpus[k]
                return self._place(builder, state, i)
        return False

    def _retry_released(self, state: SchedulerState) -> None:
        """GPUs were released since the last pass: every waiting job that fits
        the GPUs free now is due at once (its back-off count stays)."""
        pending = state.pending.array()
        if not len(pending):
            return
        fits = pending[state.gpus[pending] <= state.free.total]
        if len(fits):
            self.next_try[fits] = np.minimum(self.next_try[fits], state.now)
            self._quiet = (-1, 0.0)

    def _back_off(self, state: SchedulerState, failed: np.ndarray) -> float:
        """Retry later, sooner if the job's locality relaxes before then.
        Returns the earliest retry (inf when none failed)."""
        if not len(failed):
            return np.inf
        now = state.now
        tries = np.minimum(self.tries[failed] + 1, MAX_TRIES)
        self.tries[failed] = tries
        wait = self._waits[tries]
        # retries fall on a heartbeat of ``backoff`` seconds, so waiting jobs
        # are retried together rather than each at its own instant
        at = np.ceil((now + wait) / self.backoff) * self.backoff
        queued = state.queued_since[failed]
        if float(np.maximum.reduce(queued)) + self.relax_after[-1] > now:  # some still relax
            for step in self.relax_after:
                relax = queued + step
                np.minimum(at, np.where(relax > now, relax, np.inf), out=at)
        self.next_try[failed] = at
        return float(np.minimum.reduce(at))


def _finite(at: float) -> float | None:
    return at if at < np.inf else None
