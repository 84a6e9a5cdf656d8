"""Gandiva: introspective time-slicing, packing, migration and grow-shrink.

Gandiva (Xiao et al., OSDI '18) exploits the fact that training is a loop of
mini-batches. A pass here does, in order:

1. **Judge probes**: a packed pair that has run a quantum is "measured" (its
   throughputs come from Gavel's pair measurements). If the two jobs'
   normalised throughputs add up to more than 1 it stays packed; otherwise it
   is unpacked back to time-slicing, and that pair of job types is not
   packed again.
2. **Shrink**: jobs grown onto idle GPUs give them back when others wait.
3. **Admit**: waiting jobs take free GPUs in arrival order. A multi-GPU job
   that would fit on one server only if small jobs moved gets that server
   after they migrate elsewhere (cost from
   :func:`corral.perf.switching.migration_seconds`).
4. **Oversubscribe**: a job still waiting shares the GPUs of a running job of
   the same size, longest-running first: packed (both run at once) when the
   pair may help, else time-sliced. With ``probe`` (Gandiva's way) any pair
   not yet known to be bad is packed and judged after a quantum; without it
   only pairs whose measured combined throughput exceeds 1 are packed.
5. **Grow**: when nobody waits, a running job doubles onto idle GPUs of its
   own server (speed x ``1 + grow_efficiency``), paying a migration.

Time-slicing (``timeslice=share``, the default): any number of jobs of one
size share a GPU set, taking turns in ``quantum``-second slices and
suspending and resuming at a mini-batch boundary (``slice_overhead`` seconds,
Gandiva's ~100 ms). Over more than a few quanta each of ``n`` jobs progresses
at ``quantum / (quantum + slice_overhead) / n`` of its speed alone, and that
is how the simulator runs a group: as processor sharing, exact between
arrivals and departures to within one quantum, rather than one stop and
start per slice, which would cost millions of events on a months-long trace.
A waiting job that finds no free GPUs joins the least loaded GPU set of its
size (``share_limit`` caps a set's jobs; 0 is no cap, as in Gandiva, whose
suspend moves a job's GPU memory to the host). A job keeps its GPU set: it
leaves it only when Gandiva migrates it, which it does when GPUs fall idle
while a set of their size is shared (the most loaded set's newest job moves
there, charged :func:`corral.perf.switching.migration_seconds`). When a job
of a group ends, the others share its time.

``timeslice=rate`` keeps at most two jobs on a GPU set (others wait), each at
half the set's time: the simpler approximation earlier releases ran by
default. ``timeslice=quanta`` runs turns explicitly, cluster-wide: a job that
has run a quantum yields to the one that has waited longest, resuming on
whatever GPUs are free (packing still applies, a losing pair is unpacked to
wait for its turn); exact for that reading, and slow on long traces.

Packing needs job types that Gavel measured (``--job-types gavel`` gives
Philly's generic jobs such types); pairs of unknown types are time-sliced.
Live, the service measures instead of assuming: a pair is judged by the
throughputs its jobs report while packed, relative to what they reported
alone (kept if they add up to more than ``1 + observed_margin``), and pairs
of unknown types are tried too when the host reports its throughput. The
verdict waits, up to ``MEASURE_QUANTA`` quanta, for a figure measured wholly
while both jobs ran. A job whose host leaves carries on alone on the GPUs.
"""

from __future__ import annotations

import itertools
import math
from typing import ClassVar

import numpy as np

from corral.model.plan import Plan
from corral.model.state import PENDING, SchedulerState
from corral.model.unsaved_work import protected_until
from corral.perf.switching import migration_seconds
from corral.perf.throughputs import PAIR_GPU, ThroughputTable, gavel_throughputs
from corral.placement.strategies import Consolidate, PlacementStrategy
from corral.policies.base import PlanBuilder, Policy, greedy_fit
from corral.policies.options import Option

TIMESLICES = ("share", "rate", "quanta")
"""Gandiva's time-slicing, as the simulator may run it (see the module's text)."""

MEASURE_QUANTA = 5
"""Live, how many quanta a packing trial may wait for its measured speed."""


class Gandiva(Policy):
    name = "gandiva"
    shares_gpus = True
    live_note = (
        "time-slicing suspends and resumes the processes of a GPU set's jobs in turn, one "
        "running at a time, at quantum boundaries "
        "(corral.train jobs pause at an iteration boundary, others get SIGSTOP/SIGCONT); "
        "packed jobs run as two process groups on the same GPUs; packing is judged from "
        "the jobs' heartbeat throughputs (pairs Gavel did not measure are tried when the "
        "running job reports its throughput); migration is checkpoint, stop and start elsewhere"
    )
    options: ClassVar[dict[str, Option]] = {
        "quantum": Option("time-slice length (s)", above=0),
        "slice_overhead": Option("seconds of suspend and resume per time slice", low=0),
        "timeslice": Option(
            "time-slicing: any number of jobs per GPU set sharing its time (share), two per "
            "set at most (rate), or explicit turns cluster-wide (quanta)",
            "choice",
            choices=TIMESLICES,
        ),
        "share_limit": Option(
            "most jobs time-sliced on one GPU set under share (0: no limit)", "integer", low=0
        ),
        "packing": Option("pack jobs onto a running job's GPUs where it may pay", "flag"),
        "probe": Option(
            "pack any pair not known to be bad and judge it after a quantum (Gandiva's way)", "flag"
        ),
        "migration": Option(
            "migrate small jobs to free a server for a gang, shared jobs onto idle GPUs, and "
            "between sets of one size two jobs apart",
            "flag",
        ),
        "grow": Option("grow jobs onto idle GPUs of their server when nobody waits", "flag"),
        "grow_efficiency": Option(
            "speed gained by doubling onto idle GPUs, as a share", low=0, high=1
        ),
        "observed_margin": Option(
            "live: a packed pair stays only if its measured throughputs add up to more than 1 + "
            "this",
            low=0,
        ),
    }
    description = (
        "time-slicing in quanta, packing by measured pair throughput, migration, grow-shrink"
    )
    elastic = True

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        quantum: float = 60.0,
        slice_overhead: float = 0.1,
        timeslice: str = "share",
        share_limit: int = 0,
        packing: int = 1,
        probe: int = 1,
        migration: int = 1,
        grow: int = 1,
        grow_efficiency: float = 0.8,
        observed_margin: float = 0.05,
    ) -> None:
        super().__init__(placement or Consolidate())
        if quantum <= 0:
            raise ValueError(f"quantum must be positive, got {quantum}")
        if not 0 <= grow_efficiency <= 1:
            raise ValueError(f"grow_efficiency must be in [0, 1], got {grow_efficiency}")
        if timeslice not in TIMESLICES:
            raise ValueError(f"timeslice must be one of {', '.join(TIMESLICES)}, got {timeslice}")
        self.timeslice = timeslice
        if share_limit < 0:
            raise ValueError(f"share_limit must be >= 0, got {share_limit}")
        self.share_limit = int(share_limit)
        if slice_overhead < 0:
            raise ValueError(f"slice_overhead must be >= 0, got {slice_overhead}")
        self.quantum = float(quantum)
        self.slice_overhead = float(slice_overhead)
        self.mode: dict[int, str] = {}
        """Each packed guest's pairing: 'probe' (on trial) or 'pack' (kept). Their
        hosts' GPU sets are not joined by time-sliced jobs. (Time-sliced guests
        are not kept here: there can be thousands, and the state knows them.)"""
        self.packing = bool(packing)
        self.probe = bool(probe)
        self.migration = bool(migration)
        self.grow = bool(grow)
        self.grow_efficiency = float(grow_efficiency)
        if observed_margin < 0:
            raise ValueError(f"observed_margin must be >= 0, got {observed_margin}")
        self.observed_margin = float(observed_margin)
        """Measured speeds are noisy: a pair judged by them stays packed only if
        its normalised throughputs add up to more than 1 + this."""
        self.table: ThroughputTable = gavel_throughputs()
        self.bad_pairs: set[tuple[str, str]] = set()
        self.packed_at: dict[int, float] = {}
        self._marks = np.zeros(0, dtype=bool)
        self._balanced_at = -math.inf
        self._balance_due = False
        self._finished_seen = 0
        self._codes = np.zeros(0, dtype=np.int64)
        self.pack_log: list[tuple[float, str, str]] = []
        """(time, host type, guest type) of every packing tried."""
        self.counts = {
            "packs": 0,
            "unpacks": 0,
            "slices": 0,
            "migrations": 0,
            "grows": 0,
            "shrinks": 0,
            "rebalances": 0,
        }

    # ------------------------------------------------------------ measures
    def pair_factors(
        self, state: SchedulerState, host: int, guest: int
    ) -> tuple[float, float] | None:
        """(host, guest) throughput when packed, each relative to running alone."""
        hk = (state.job_type[host], int(state.gpus[host]))
        gk = (state.job_type[guest], int(state.gpus[guest]))
        rel = self.table.relative_pair(hk, gk, PAIR_GPU)
        if rel is None or min(rel) <= 0:
            return None  # not measured, or the pair does not fit on one GPU together
        return rel

    def observed_factors(
        self, state: SchedulerState, host: int, guest: int
    ) -> tuple[float, float] | None:
        """(host, guest) speed packed relative to alone, as measured live (None: not
        measured). A guest never measured alone is taken to slow down as much as
        its host (the interference is measured on the host)."""
        h = float(state.observed_speed[host])
        if not math.isfinite(h):
            return None
        g = float(state.observed_speed[guest])
        return h, g if math.isfinite(g) else h

    def _may_probe(self, state: SchedulerState, host: int, guest: int) -> bool:
        """Live, a pair no table vouches for may be tried when the host reports its
        speed, so that the trial can be judged by measurement (Gandiva's introspection)."""
        return state.measures_speed and bool(state.reports_speed[host])

    def _measure_due(self, state: SchedulerState, host: int, guest: int, since: float) -> bool:
        """A host that reports its speed will be measured packed once a throughput
        window lies wholly after both jobs began stepping together; under load that
        can take longer than a quantum, so a trial waits for it (up to
        ``MEASURE_QUANTA`` quanta) rather than be judged blind by the table."""
        waited = state.now - since
        return self._may_probe(state, host, guest) and waited < MEASURE_QUANTA * self.quantum

    @property
    def slice_factor(self) -> float:
        """Speed of each job of a time-sliced pair, relative to running alone."""
        return self.share_factor(2)

    def share_factor(self, n: int) -> float:
        """Speed of each of ``n`` jobs time-sliced on one GPU set, relative to
        running alone: a turn of ``quantum`` in every ``n`` turns, each paying
        ``slice_overhead`` to switch."""
        return self.quantum / (self.quantum + self.slice_overhead) / n

    # ------------------------------------------------------------ the pass
    def schedule(self, state: SchedulerState) -> Plan:
        builder = PlanBuilder(state)
        now = state.now
        leaving: set[int] = set()
        if self.mode:
            guests = np.fromiter(self.mode, dtype=np.int64, count=len(self.mode))
            for guest in guests[state.host[guests] < 0].tolist():  # pairs that ended
                del self.mode[guest]
                self.packed_at.pop(guest, None)
        self._judge_probes(state, builder, leaving)
        if len(state.pending):
            run = state.running.array()
            for i in run[state.held[run] > state.gpus[run]].tolist():  # grown: shrink back
                builder.stop(i)
                leaving.add(i)
                self.counts["shrinks"] += 1
        starts = builder.plan.starts
        if self.timeslice == "quanta":
            self._rotate(state, builder, leaving)
        else:
            for i in itertools.chain(sorted(leaving), state.pending_order):
                if builder.free.total == 0:
                    break
                if i not in starts and state.gpus[i] <= builder.free.total:
                    self._place(state, builder, i, leaving)
        if len(state.pending) + len(leaving) > len(starts):  # jobs still wait
            if self.timeslice == "share":
                self._share(state, builder, leaving)
            else:
                self._oversubscribe(state, builder, leaving)
        pending_left = len(state.pending) + len(leaving) - len(starts)
        departed = len(state.finished) != self._finished_seen  # sets may be uneven now
        self._finished_seen = len(state.finished)
        balance_at: float | None = None
        if (
            self.migration
            and self.timeslice == "share"
            and pending_left == 0  # idle GPUs wait for a waiting job, if any
            and state.guests
        ):
            if builder.free.total > 0:
                self._rebalance(state, builder, leaving)
            # introspection: sets are evened out at most once a quantum, and a
            # quantum after a departure that came too soon for it
            self._balance_due |= departed
            if now >= self._balanced_at + self.quantum:
                self._balanced_at = now
                self._balance_due = False
                self._balance(state, builder, leaving)
            elif self._balance_due:
                balance_at = self._balanced_at + self.quantum
        grow_later = False
        if self.grow and pending_left == 0:
            grow_later = self._grow(state, builder, leaving)
            # jobs started now may grow into what is still idle after a quantum
            grow_later |= bool(builder.plan.starts) and builder.free.total > 0
        wake = None
        rotating = self.timeslice == "quanta" and pending_left > 0
        if self.packed_at or grow_later or rotating:
            wake = (math.floor(now / self.quantum) + 1) * self.quantum
        if balance_at is not None:
            wake = balance_at if wake is None else min(wake, balance_at)
        return builder.build(wake)

    def _judge_probes(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> None:
        for guest, since in list(self.packed_at.items()):
            if state.now - since < self.quantum:
                continue
            host = int(state.host[guest])
            observed = self.observed_factors(state, host, guest)
            if observed is None and self._measure_due(state, host, guest, since):
                continue  # live, the pair's speed is not measured yet: judge it later
            del self.packed_at[guest]
            if observed is not None:
                keep = sum(observed) > 1.0 + self.observed_margin
            else:
                factors = self.pair_factors(state, host, guest)
                keep = factors is not None and sum(factors) > 1.0
            if keep:
                self.mode[guest] = "pack"
                continue
            del self.mode[guest]
            pair = (state.job_type[host], state.job_type[guest])
            self.bad_pairs.update((pair, pair[::-1]))
            self.counts["unpacks"] += 1
            if self.timeslice == "quanta":  # back to waiting for its turn
                builder.stop(guest)
                leaving.add(guest)
                continue
            builder.plan.respeeds[guest] = self.slice_factor
            builder.plan.respeeds[host] = self.slice_factor
            builder.plan.timeslices[guest] = self.quantum

    def _oversubscribe(
        self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]
    ) -> None:
        """Share running jobs' GPUs with waiting jobs: packed if it may help, else sliced.

        Waiting jobs are taken in submit order; a job shares only with a host
        of its own size, so each size is matched on its own (the backlog can
        be tens of thousands of jobs: only as many of each size as could find
        a host are looked at), and the pairings are then made in submit order.
        """
        plan = builder.plan
        ids = state.running.array()
        ids = ids[
            (state.host[ids] < 0) & (state.guest[ids] < 0) & (state.held[ids] == state.gpus[ids])
        ]
        ids = ids[np.lexsort((ids, state.seg_start[ids]))]
        running = [h for h in ids.tolist() if h not in leaving]
        started = [
            h
            for h, gpus in plan.starts.items()
            if h not in plan.packs and len(gpus) == state.gpus[h]
        ]
        hosts = running + started  # longest running first; jobs started in this pass last
        types = self._set_types(state, plan, np.array(hosts, dtype=np.int64))
        kinds = dict(zip(hosts, types.tolist(), strict=True))
        by_size: dict[int, list[int]] = {}
        for h in hosts:
            by_size.setdefault(int(state.gpus[h]), []).append(h)
        if not by_size:
            return
        starts = plan.starts
        pairings: list[tuple[int, int, str, tuple[float, float]]] = []
        # In the simulator a pair's fate depends on the two job types only, and
        # hosts only leave the lists during a pass: a waiting job of a (type,
        # size) that found no partner here will not find one later in the pass.
        # (Live, a probe also depends on the host reporting its speed.)
        hopeless: set[tuple[str, int]] = set()
        for size, same in by_size.items():
            # the size's waiting jobs in submit order; each takes a host (sliced
            # at worst), so only the first few are read
            for i in state.pending_by_size.get(size, ()):
                if not same:
                    break
                if i in starts:
                    continue
                pairing = self._pair(state, i, size, same, hopeless, kinds)
                if pairing is not None:
                    pairings.append(pairing)
        for i, host, mode, factors in sorted(pairings):
            builder.pack(i, host, factors[1], factors[0])
            if mode == "slice":
                builder.plan.timeslices[i] = self.quantum
            self._record(state, i, host, mode)

    def _record(self, state: SchedulerState, i: int, host: int, mode: str) -> None:
        """Job ``i`` shares ``host``'s GPUs: packed on trial ('probe'), packed
        ('pack') or time-sliced ('slice')."""
        if mode == "probe":
            self.packed_at[i] = state.now
        if mode == "slice":
            self.counts["slices"] += 1
        else:
            self.mode[i] = mode
            self.pack_log.append((state.now, state.job_type[host], state.job_type[i]))
            self.counts["packs"] += 1

    def _pair(
        self,
        state: SchedulerState,
        i: int,
        size: int,
        same: list[int],
        hopeless: set[tuple[str, int]],
        kinds: dict[int, int],
    ) -> tuple[int, int, str, tuple[float, float]] | None:
        """The host (taken from ``same``; ``kinds`` gives each one's GPU type) waiting
        job ``i`` shares with, and how; None when it waits for its turn instead
        (explicit time-slicing, or no host of a type it runs on)."""
        allowed = state.runs_on(i)
        pool = same if allowed is None else [h for h in same if allowed[kinds[h]]]
        partner = self._packing_partner(state, i, size, pool, hopeless)
        if partner is not None:
            k, mode, factors = partner
            host = pool[k]
        elif self.timeslice == "quanta" or not pool:
            return None
        else:
            host, mode = pool[0], "slice"
            factors = (self.slice_factor, self.slice_factor)
        same.remove(host)
        return i, host, mode, factors

    def _packing_partner(
        self,
        state: SchedulerState,
        i: int,
        size: int,
        same: list[int] | np.ndarray,
        hopeless: set[tuple[str, int]],
    ) -> tuple[int, str, tuple[float, float]] | None:
        """Where in ``same`` (jobs running alone, longest running first) waiting job
        ``i`` may be packed, how ('probe' or 'pack') and at which factors (host,
        guest); None when no pair may pay."""
        kind = (state.job_type[i], size)
        known = kind in self.table.alone.get(PAIR_GPU, {})
        tryable = self.packing and (known or state.measures_speed)  # else: nothing to try
        if not tryable or kind in hopeless:
            return None
        if state.measures_speed:  # live: a trial also depends on the host's reports
            candidates: list[int] = list(range(len(same)))
        else:  # a pair's fate depends on the two job types only: one host of each type
            _, first = np.unique(self._type_codes(state)[same], return_index=True)
            candidates = np.sort(first).tolist()
        for k in candidates:
            h = int(same[k])
            if (state.job_type[h], state.job_type[i]) in self.bad_pairs:
                continue
            pair = self.pair_factors(state, h, i) if known else None
            if pair is None and self.probe and self._may_probe(state, h, i):
                pair = (1.0, 1.0)  # unknown: measured during the trial
            if pair is None or (not self.probe and sum(pair) <= 1.0):
                continue
            return k, "probe" if self.probe else "pack", pair
        if not state.measures_speed:
            hopeless.add(kind)
        return None

    @staticmethod
    def _set_types(state: SchedulerState, plan: Plan, hosts: np.ndarray) -> np.ndarray:
        """Each GPU set's GPU type (an index into the cluster's type names), from its
        holder's GPUs (or those the plan starts it on). A job never joins a set of
        a type where its measured speed is 0 (ResNet-50 at batch 128 on a K80)."""
        if state.one_type:  # (every pass on the simulator's path: no loop where all alike)
            return np.zeros(len(hosts), dtype=np.int64)
        gpu_type = state.cluster.gpu_type_id
        return np.array(
            [gpu_type[(state.alloc[h] or plan.starts[h])[0]] for h in hosts.tolist()],
            dtype=np.int64,
        )

    @staticmethod
    def _no_slower(state: SchedulerState, i: int, here: int, there: int) -> bool:
        """Whether job ``i`` runs on GPU type ``there`` (an index) at least as fast as on
        ``here``, and at all."""
        if here == there or state.one_type:
            return True
        speed = state.type_speed[i]
        return bool(speed[there] > 0 and speed[there] >= speed[here] * (1 - 1e-9))

    def _type_codes(self, state: SchedulerState) -> np.ndarray:
        """Each job's type as a number (kept while the job table keeps its size)."""
        if len(self._codes) != len(state.job_type):
            _, codes = np.unique(np.array(state.job_type, dtype=object), return_inverse=True)
            self._codes = np.asarray(codes, dtype=np.int64)
        return self._codes

    def _share(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> None:
        """Waiting jobs join GPU sets of their size (``timeslice=share``).

        Each is packed with a job running alone where the pair may pay, else
        time-sliced on the least loaded set of its size (fewest jobs; of equal
        ones, the longest running), up to ``share_limit`` jobs a set. Every job
        of a set that grew is given its share, ``share_factor(n)``. Sets are
        found with array operations: the backlog and the running jobs can both
        be thousands, and this runs at every arrival under load.
        """
        plan = builder.plan
        wanted = [size for size, queue in state.pending_by_size.items() if queue]
        run = state.running.array()
        sizes = state.gpus[run]
        if len(wanted) == 1:
            fits = sizes == wanted[0]
        else:
            table = np.zeros(max(wanted) + 1, dtype=bool)
            table[wanted] = True
            fits = table[np.minimum(sizes, len(table) - 1)] & (sizes < len(table))
        hosts = run[fits & (state.host[run] < 0) & (state.held[run] == sizes)]
        started = [
            h
            for h, gpus in plan.starts.items()
            if h not in plan.packs and len(gpus) == state.gpus[h] and h not in leaving
        ]
        if not len(hosts) and not started:
            return  # (often: a wide job waits for GPUs, and no job of its size runs)
        if len(hosts):
            hosts = hosts[~self._unjoinable(state, hosts, leaving)]
        hosts = hosts[np.lexsort((hosts, state.seg_start[hosts]))]  # longest running first
        load = 1 + state.guest_count[hosts]
        for j in leaving:  # guests moving off their set in this pass
            h = int(state.host[j])
            if h >= 0:
                load[hosts == h] -= 1
        if started:
            hosts = np.concatenate((hosts, np.array(started, dtype=np.int64)))
            load = np.concatenate((load, np.ones(len(started), dtype=np.int64)))
        if not len(hosts):
            return
        sizes = state.gpus[hosts]
        types = self._set_types(state, plan, hosts)
        limit = self.share_limit or np.iinfo(np.int64).max
        joined: dict[int, int] = {}
        hopeless: set[tuple[str, int]] = set()
        for size in wanted:
            at = np.flatnonzero(sizes == size)
            if not len(at):
                continue
            queue = state.pending_by_size[size]
            loads = load[at]
            for i in queue:
                if i in plan.starts:
                    continue
                allowed = state.runs_on(i)  # (None: every type; else not where it cannot run)
                usable = loads if allowed is None else np.where(allowed[types[at]], loads, limit)
                alone = at[usable == 1]
                if len(alone):
                    same = hosts[alone]
                    partner = self._packing_partner(state, i, size, same, hopeless)
                    if partner is not None:
                        k, mode, (host_f, guest_f) = partner
                        host = int(same[k])
                        builder.pack(i, host, guest_f, host_f)
                        self._record(state, i, host, mode)
                        loads[at == alone[k]] = limit  # a packed pair is not joined
                        continue
                k = int(np.argmin(usable))
                if usable[k] >= limit:
                    if allowed is None:
                        break  # every set of this size is full: the rest wait
                    continue  # every set of a type it runs on is full
                loads[k] += 1
                host = int(hosts[at[k]])
                joined[host] = int(loads[k])
                builder.pack(i, host, 1.0, 1.0)
                builder.plan.timeslices[i] = self.quantum
                self._record(state, i, host, "slice")
        self._set_shares(state, plan, joined, leaving)

    def _set_shares(
        self, state: SchedulerState, plan: Plan, sets: dict[int, int], leaving: set[int]
    ) -> None:
        """Every job of each set in ``sets`` (its holder -> how many jobs it has
        after this pass) runs at its share of the set's time: those running
        already change speed, those joining in this pass start at it."""
        for host, n in sets.items():
            share = self.share_factor(n) if n > 1 else 1.0
            members = np.array((host, *state.guests.get(host, ())), dtype=np.int64)
            members = members[state.status[members] != PENDING].tolist()
            plan.respeeds.update(dict.fromkeys(members, share))
            for j in leaving.intersection(members):
                del plan.respeeds[j]
        for i, (host, _, _) in list(plan.packs.items()):
            if host in sets and i in plan.timeslices:
                share = self.share_factor(sets[host])
                plan.packs[i] = (host, share, share)

    def _unjoinable(
        self, state: SchedulerState, hosts: np.ndarray, leaving: set[int]
    ) -> np.ndarray:
        """Which of ``hosts`` no time-sliced job may join or leave: a packed pair's
        host, and jobs stopping in this pass. (Marked in a scratch array the size
        of the job table: this runs at most passes, with few of either.)"""
        marks = self._marks
        if len(marks) != len(state.gpus):
            marks = self._marks = np.zeros(len(state.gpus), dtype=bool)
        marked = state.host[np.fromiter(self.mode, dtype=np.int64, count=len(self.mode))]
        marks[marked] = True
        marked_leaving = list(leaving)
        marks[marked_leaving] = True
        out: np.ndarray = marks[hosts]
        marks[marked] = False
        marks[marked_leaving] = False
        return out

    def _rebalance(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> None:
        """Gandiva's migration for load: while GPUs are idle and a time-sliced set
        of their size has more than one job, the most loaded set's newest job
        moves onto them (charged a migration), and runs there alone."""
        run = state.running.array()
        hosts = run[(state.guest_count[run] > 0) & (state.host[run] < 0)]
        hosts = hosts[state.gpus[hosts] <= builder.free.total]
        hosts = hosts[~self._unjoinable(state, hosts, leaving)]
        if not len(hosts):
            return
        hosts = hosts[np.lexsort((hosts, -state.guest_count[hosts]))]  # most loaded first
        moved: set[int] = set()
        for h in hosts.tolist():
            n = int(state.gpus[h])
            if h in leaving or builder.free.total < n:
                continue
            for g in reversed(state.guests[h]):  # newest first; the holder stays
                if g in leaving or not self._movable(state, g):
                    continue
                gpus = self.placement.choose_for(builder.usable(g), state, g)
                if gpus is None:
                    break
                builder.stop(g)
                builder.start(g, gpus)
                builder.plan.overheads[g] = migration_seconds(len(gpus))
                leaving.add(g)
                moved.add(h)
                self.counts["rebalances"] += 1
                if builder.free.total < n:
                    break
        sets = {h: 1 + sum(g not in leaving for g in state.guests[h]) for h in moved}
        for host, _, _ in builder.plan.packs.values():  # jobs that joined in this pass
            if host in sets:
                sets[host] += 1
        self._set_shares(state, builder.plan, sets, leaving)

    @staticmethod
    def _movable(state: SchedulerState, g: int) -> bool:
        """Whether job ``g`` may migrate now: not one whose move would throw its
        work away while the unsaved-work rule protects it (a plan's stop of it
        would be held back, and the sets' new speeds with it would not hold)."""
        return protected_until(state, g) <= state.now

    def _balance(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> None:
        """Gandiva's migration for load between GPU sets of one size: while a
        set has two jobs more than the least loaded set of its size, its newest
        job migrates there (charged a migration) and takes turns with that
        set's jobs. A burst of arrivals joins the few sets that exist at the
        time; without this, sets started later stay nearly empty beside them."""
        run = state.running.array()
        hosts = run[(state.host[run] < 0) & (state.held[run] == state.gpus[run])]
        hosts = hosts[~self._unjoinable(state, hosts, leaving)]
        if len(hosts) < 2:
            return
        plan = builder.plan
        load = 1 + state.guest_count[hosts]
        for j in leaving:
            h = int(state.host[j])
            if h >= 0:
                load[hosts == h] -= 1
        for host, _, _ in plan.packs.values():  # jobs that joined a set in this pass
            load[hosts == host] += 1
        sizes = state.gpus[hosts]
        types = self._set_types(state, plan, hosts)
        touched: set[int] = set()
        for size in np.unique(sizes[load > 2]).tolist():
            at = np.flatnonzero(sizes == size)
            loads = load[at]
            movable: dict[int, list[int]] = {}
            stuck = np.zeros(len(at), dtype=bool)  # sets with no job that may move
            while True:
                heavy = np.where(stuck, -1, loads)
                big, small = int(np.argmax(heavy)), int(np.argmin(loads))
                if heavy[big] - loads[small] < 2:
                    break
                source, target = int(hosts[at[big]]), int(hosts[at[small]])
                if source not in movable:
                    movable[source] = [
                        g
                        for g in state.guests.get(source, ())
                        if g not in leaving and self._movable(state, g)
                    ]
                # its newest job that runs at least as fast on the target set's GPU
                # type (Gandiva evens out sets it takes to be alike: a job moved onto
                # slower GPUs, or ones where its speed is 0, would lose); the holder stays
                here, there = int(types[at[big]]), int(types[at[small]])
                fit = [g for g in movable[source] if self._no_slower(state, g, here, there)]
                if not fit:
                    stuck[big] = True
                    continue
                g = fit[-1]
                movable[source].remove(g)
                builder.stop(g)
                builder.pack(g, target, 1.0, 1.0)
                plan.timeslices[g] = self.quantum
                plan.overheads[g] = migration_seconds(int(state.gpus[g]))
                leaving.add(g)
                loads[big] -= 1
                loads[small] += 1
                touched.update((source, target))
                self.counts["rebalances"] += 1
            load[at] = loads
        if not touched:
            return
        final = dict(zip(hosts.tolist(), load.tolist(), strict=True))
        self._set_shares(state, plan, {host: final[host] for host in touched}, leaving)

    def _rotate(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> None:
        """Explicit time-slicing (``timeslice=quanta``): one stop and start per turn.

        When more GPUs are asked for than exist, a job that has run a quantum
        yields to the one that has waited longest; a job runs at least one
        quantum of progress once started (its switch-in time not counted).
        Exact, and costly on long traces.
        """
        now = state.now
        running = np.array(
            [i for i in state.running if state.host[i] < 0 and i not in leaving], dtype=np.int64
        )
        queued = np.concatenate(
            (state.pending.array(), np.array(sorted(leaving), dtype=np.int64))
        ).astype(np.int64)
        if not len(queued):
            return
        if builder.free.total >= int(state.gpus[queued].sum()):
            for i in sorted(queued.tolist()):
                self._place(state, builder, i, leaving)
            return
        # a turn is a quantum of progress: time spent switching in does not count,
        # or a switch cost as long as the quantum would leave every turn empty
        pinned = (
            state.progressing_for(running) < self.quantum if len(running) else np.zeros(0, bool)
        )
        movable = running[~pinned]
        # longest waiting first; jobs that just ran (or are yielding now) go last
        keys = np.concatenate(
            (
                np.full(len(movable), now),
                np.where(state.status[queued] == PENDING, state.queued_since[queued], now),
            )
        )
        candidates = np.concatenate((movable, queued))
        ranked = candidates[np.lexsort((candidates, keys))]
        capacity = state.cluster.total_gpus - int(state.held[running[pinned]].sum())
        take = greedy_fit(state.gpus[ranked], capacity)
        for i in ranked[~take].tolist():
            if state.status[i] != PENDING and i not in leaving:
                builder.stop(i)
                leaving.add(i)
        for i in ranked[take].tolist():
            if state.status[i] == PENDING or i in leaving:
                self._place(state, builder, i, leaving)

    def _place(
        self, state: SchedulerState, builder: PlanBuilder, i: int, leaving: set[int]
    ) -> None:
        if i in builder.plan.starts:  # already placed in this pass (moved to make room)
            return
        n = int(state.gpus[i])
        free = builder.free
        if (
            self.migration
            and 1 < n <= state.cluster.max_node_gpus
            and int(free.node_free.max()) < n
            and free.total >= n
            and self._defragment(state, builder, n, leaving)
        ):
            pass
        builder.place(i, self.placement)

    def _defragment(
        self, state: SchedulerState, builder: PlanBuilder, n: int, leaving: set[int]
    ) -> bool:
        """Migrate small jobs off one server so ``n`` GPUs there are free together."""
        cluster = state.cluster
        free = builder.free
        movers_by_node: dict[int, list[int]] = {}
        for j in state.running.array().tolist():
            if j in leaving or state.host[j] >= 0 or state.guest[j] >= 0:
                continue
            gpus = state.alloc[j]
            assert gpus is not None
            node = cluster.gpu_node_list[gpus[0]]
            if all(cluster.gpu_node_list[g] == node for g in gpus) and len(gpus) < n:
                movers_by_node.setdefault(node, []).append(j)
        best: tuple[int, int, list[int]] | None = None
        for node, movers in movers_by_node.items():
            have = int(free.node_free[node])
            chosen: list[int] = []
            for j in sorted(movers, key=lambda j: -int(state.held[j])):
                if have >= n:
                    break
                chosen.append(j)
                have += int(state.held[j])
            if have < n:
                continue
            moved = sum(int(state.held[j]) for j in chosen)
            if best is None or moved < best[1]:
                best = (node, moved, chosen)
        if best is None:
            return False
        node, _, chosen = best
        trial = free.copy()
        first = cluster.node_first_gpu_list[node]
        block = [g for g in range(first, first + cluster.node_gpus_list[node]) if trial.mask[g]]
        trial.take(block)  # the target server is off limits to the movers
        targets: list[list[int]] = []
        for j in chosen:
            gpus = Consolidate().choose(builder.usable(j, trial), int(state.held[j]))
            if gpus is None:
                return False
            trial.take(gpus)
            targets.append(gpus)
        for j, gpus in zip(chosen, targets, strict=True):
            builder.stop(j)
            builder.start(j, gpus)
            builder.plan.overheads[j] = migration_seconds(len(gpus))
            leaving.add(j)
            self.counts["migrations"] += 1
        return True

    def _grow(self, state: SchedulerState, builder: PlanBuilder, leaving: set[int]) -> bool:
        """Grow jobs into idle GPUs of their server; True if one could grow after its quantum."""
        later = False
        if builder.free.total <= 0:
            return later
        cluster = state.cluster
        for i in state.running.array().tolist():
            if i in leaving or state.host[i] >= 0 or state.guest[i] >= 0:
                continue
            if state.held[i] != state.gpus[i]:
                continue
            gpus = state.alloc[i]
            assert gpus is not None
            node = cluster.gpu_node_list[gpus[0]]
            n = len(gpus)
            if int(builder.free.node_free[node]) < n or any(
                cluster.gpu_node_list[g] != node for g in gpus
            ):
                continue
            if state.now - state.seg_start[i] < self.quantum:
                later = True
                continue
            extra = builder.free.in_node(node, n)
            if not state.runs_at(i, [*gpus, *extra]):  # the doubled gang does not fit there
                continue
            builder.stop(i)
            builder.start(i, sorted([*gpus, *extra]))
            builder.plan.factors[i] = 1.0 + self.grow_efficiency
            builder.plan.overheads[i] = migration_seconds(n)
            leaving.add(i)
            self.counts["grows"] += 1
        return later
