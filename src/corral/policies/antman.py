"""AntMan: opportunistic jobs packed onto GPUs that guaranteed jobs under-use.

AntMan (Xiao et al., OSDI '20) observed that in Alibaba's clusters most GPUs
given to jobs sit partly idle, while jobs queue for whole GPUs. It splits jobs
into *resource-guarantee* jobs (within their tenant's quota) and
*opportunistic* ones, and lets an opportunistic job share a guaranteed job's
GPUs: its memory and compute are capped and scaled at run time (GPU operators
of the guaranteed job go first; the opportunistic job's tensors spill to host
memory when the guaranteed job grows), so the guaranteed job keeps nearly its
full speed and the GPU's idle cycles do useful work.

A pass, in submit order:

1. **Upgrade**: an opportunistic job running alone whose VC is back within its
   quota becomes guaranteed (it is no longer evicted).
2. **Guaranteed**: a job within its VC's quota (GPU counts per VC, as Philly's:
   :mod:`corral.policies.vcs`) takes idle GPUs; failing that, it shares the
   GPUs of an opportunistic job running alone on as many GPUs (the
   opportunistic job shrinks, see below); failing that, opportunistic jobs are
   evicted (most recently started first) until it can be placed.
3. **Opportunistic**: a job beyond its quota takes idle GPUs, alone and at full
   speed, but first in line for eviction; when none are idle it is packed onto
   a guaranteed job running alone on as many GPUs, or else on some GPUs of the
   smallest wider one (a synchronous gang then runs at the pace of its shared
   GPUs), where both fit in memory, choosing the host where it gets the most.

Speeds of a shared GPU set: the guaranteed job keeps at least ``1 -
slowdown`` of its speed alone (AntMan's priority for its operators; the paper
reports near-zero interference). Where Gavel measured the pair packed, the
pair's combined throughput (relative to alone) is what the two share, the
guaranteed job taking its part first; otherwise the opportunistic job gets
``idle_share`` of its speed alone (a stated model of the cycles a guaranteed
job leaves idle). When the guaranteed job ends, the opportunistic one grows
back to its full speed on the GPUs. Memory: Gavel's out-of-memory pairs never
share; other pairs must fit in the GPU's memory with the opportunistic job
squeezed to ``squeeze`` of its footprint (:mod:`corral.perf.memory`).

Live, an opportunistic job runs at the lowest OS priority (nice 19) and starts
with ``memory_fraction`` of each GPU's memory (``CORRAL_GPU_MEMORY_FRACTION``;
jobs using ``corral.train`` with PyTorch have it applied). From then on its cap
follows the jobs sharing its GPUs (AntMan's dynamic scaling): their heartbeats
report their peak GPU memory, and each of its heartbeats is answered with what
they leave less a margin, which ``corral.train`` applies (releasing cached
memory when the cap shrinks). It is evicted first, as in the simulator.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from corral.model.plan import Plan
from corral.model.state import RUNNING, IndexSet, SchedulerState
from corral.perf.memory import fits_together
from corral.perf.throughputs import PAIR_GPU, ThroughputTable, gavel_throughputs
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy, in_order_until_failure
from corral.policies.options import Option
from corral.policies.vcs import (
    GUARANTEED,
    OPPORTUNISTIC,
    QuotaClassReasons,
    VirtualClusters,
)

MIN_SHARE = 0.05
"""An opportunistic job that would get less than this of its speed is not packed."""


class AntMan(QuotaClassReasons, Policy):
    name = "antman"
    options: ClassVar[dict[str, Option]] = {
        "quotas": Option(
            "VC quotas as vc=GPUs,... (unset: each VC's share of the trace's GPU-time demand)",
            "text",
            unset=True,
        ),
        "slowdown": Option(
            "share of its speed a guaranteed job loses to a packed opportunistic one", low=0, high=1
        ),
        "idle_share": Option(
            "share of its speed alone an opportunistic job gets beside a guaranteed one, where "
            "no pair is measured",
            low=0,
            high=1,
        ),
        "squeeze": Option(
            "share of its memory footprint an opportunistic job is squeezed to", above=0, high=1
        ),
        "memory_fraction": Option(
            "live: the first GPU memory cap of an opportunistic job, as a share of the GPU",
            above=0,
            high=1,
        ),
    }
    description = (
        "guaranteed jobs within VC quotas; opportunistic jobs on idle GPUs or packed onto "
        "under-used ones at low priority, shrunk or evicted when owners need them"
    )
    shares_gpus = True
    live_note = (
        "opportunistic jobs run at low OS priority (nice 19) with a GPU memory cap that "
        "starts at CORRAL_GPU_MEMORY_FRACTION and then follows what the jobs sharing their "
        "GPUs report using (corral.train applies it to PyTorch); a job upgraded while running "
        "gets its priority back (where the service may raise it) and no cap; VC quotas come "
        "from 'vcs'"
    )

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        quotas: str | dict[str, float] | None = None,
        slowdown: float = 0.05,
        idle_share: float = 0.3,
        squeeze: float = 0.5,
        memory_fraction: float = 0.5,
    ) -> None:
        super().__init__(placement)
        if not 0.0 <= float(slowdown) < 1.0:
            raise ValueError(f"slowdown must be in [0, 1), got {slowdown}")
        if not 0.0 <= float(idle_share) <= 1.0:  # 1: sharing costs nothing (virtual GPUs)
            raise ValueError(f"idle_share must be in [0, 1], got {idle_share}")
        for name, value in (("squeeze", squeeze), ("memory_fraction", memory_fraction)):
            if not 0.0 < float(value) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        self.memory_fraction = float(memory_fraction)
        self.vcs = VirtualClusters(quotas)
        self.slowdown = float(slowdown)
        self.idle_share = float(idle_share)
        self.squeeze = float(squeeze)
        self.table: ThroughputTable = gavel_throughputs()
        self._n = -1
        self._shares: dict[
            tuple[tuple[str, int], tuple[str, int], str], tuple[float, float] | None
        ] = {}
        self._known: dict[tuple[int, int], dict[tuple[str, str], int]] = {}
        """(kind, size) -> every partner group (job type, GPU type) seen, in order seen."""
        self._rank_cache: dict[
            tuple[int, int, int, str, str | None, bool],
            tuple[int, list[tuple[tuple[str, str], tuple[float, float]]]],
        ] = {}
        self._codes: np.ndarray | None = None
        self.counts = {"packed": 0, "evicted": 0, "upgraded": 0}

    def _init(self, state: SchedulerState) -> None:
        n = len(state.submit)
        self._n = n
        self.vcs.ensure(state)
        self.kind = np.zeros(n, dtype=np.int8)
        self.first_kind = np.zeros(n, dtype=np.int8)
        """How each job first started (GUARANTEED or OPPORTUNISTIC; reports)."""
        self.tracked = IndexSet(n)
        """Running jobs the policy has classified (released as they stop)."""
        self.why: dict[int, str] = {}

    def quotas(self) -> dict[str, float]:
        return self.vcs.quotas()

    # ------------------------------------------------------------ the pass
    def schedule(self, state: SchedulerState) -> Plan:
        if self._n != len(state.submit):
            self._init(state)
        builder = PlanBuilder(state)
        self.vcs.see_live(state)
        running = self._reconcile(state)
        self._pool: dict[tuple[int, int], dict[tuple[str, str], list[int]]] | None = None
        quota = self.vcs.quota
        used = np.zeros(len(quota))
        guaranteed = running[self.kind[running] == GUARANTEED]
        np.add.at(used, self.vcs.vc[guaranteed], state.gpus[guaranteed])
        self._upgrade(state, running, used)
        if not len(state.pending):
            return builder.build()
        order = state.pending_in_order()
        vc, need = self.vcs.vc[order], state.gpus[order]
        within = used[vc] + need <= quota[vc]
        if not within.any() and builder.free.total == 0 and not self._can_pack(state):
            return builder.build()  # nothing idle, nothing to share, nobody owed
        kinds = self._type_codes(state, order)
        req = state.type_req[order] + 1
        placed: set[int] = set()
        used_list = used.tolist()
        quota_list = quota.tolist()

        def place_guaranteed(i: int) -> bool:
            v, g = int(self.vcs.vc[i]), int(state.gpus[i])
            if used_list[v] + g > quota_list[v] or not self._place_guaranteed(builder, state, i, g):
                return False
            used_list[v] += g
            placed.add(i)
            return True

        # jobs alike (VC, size, model, GPU type asked) fare alike within a pass:
        # after one fails, the others are not tried
        classes = ((vc * 4096 + need) * (len(kinds) + 1) + kinds) * 64 + req
        in_order_until_failure(order[within], classes[within], place_guaranteed)
        # beyond its VC's quota (as it stands after this pass' guaranteed starts):
        # opportunistic; owed jobs that found nothing wait as guaranteed
        over = np.asarray(used_list)[vc] + need > quota[vc]
        rest = over & ~np.isin(order, list(placed))
        hosts = self._hosts_by_size(state)
        widest = int(hosts.max()) if len(hosts) else 0
        rest &= (need <= builder.free.total) | (need <= widest)

        def opportunistic(i: int) -> bool:
            if not self._place_opportunistic(builder, state, i):
                return False
            placed.add(i)
            return True

        in_order_until_failure(
            order[rest], ((need * (len(kinds) + 1) + kinds) * 64 + req)[rest], opportunistic
        )
        if not state.known_in_advance:
            self.why = {
                i: "QuotaExceeded" if o else "Resources"
                for i, o in zip(order.tolist(), over.tolist(), strict=True)
                if i not in placed
            }
        return builder.build()

    def _type_codes(self, state: SchedulerState, order: np.ndarray) -> np.ndarray:
        """A small integer per job type for the given jobs (grouping jobs alike)."""
        if state.known_in_advance:
            if self._codes is None or len(self._codes) != len(state.submit):
                _, self._codes = np.unique(
                    np.asarray(state.job_type, dtype=str), return_inverse=True
                )
            out: np.ndarray = self._codes[order]
            return out
        names = self._names = getattr(self, "_names", {})
        return np.array(
            [names.setdefault(state.job_type[i], len(names)) for i in order.tolist()],
            dtype=np.int64,
        )

    def _hosts_by_size(self, state: SchedulerState) -> np.ndarray:
        """Gang sizes of the guaranteed jobs running alone (possible hosts)."""
        running = state.running.array()
        alone = running[
            (self.kind[running] == GUARANTEED)
            & (state.host[running] < 0)
            & (state.guest[running] < 0)
        ]
        return np.unique(state.gpus[alone])

    # ------------------------------------------------------------ bookkeeping
    def _reconcile(self, state: SchedulerState) -> np.ndarray:
        """Forget jobs that stopped; classify running jobs the policy did not
        start (live, after a restart) by their VC's quota, oldest first."""
        tracked = self.tracked.array()
        if len(tracked):
            for i in tracked[state.status[tracked] != RUNNING].tolist():
                self.tracked.remove(i)
                self.kind[i] = 0
        running = state.running.array()
        unknown = np.sort(running[self.kind[running] == 0])
        if len(unknown):
            used = np.zeros(len(self.vcs.quota))
            known = running[self.kind[running] == GUARANTEED]
            np.add.at(used, self.vcs.vc[known], state.gpus[known])
            for i in unknown.tolist():
                v, g = int(self.vcs.vc[i]), int(state.gpus[i])
                alone = state.host[i] < 0
                if alone and used[v] + g <= self.vcs.quota[v]:
                    used[v] += g
                    self._track(i, GUARANTEED)
                else:
                    self._track(i, OPPORTUNISTIC)
        return running

    def _track(self, i: int, kind: int) -> None:
        if self.kind[i] == 0:
            self.tracked.add(i)
        self.kind[i] = kind
        if self.first_kind[i] == 0:
            self.first_kind[i] = kind

    def _upgrade(self, state: SchedulerState, running: np.ndarray, used: np.ndarray) -> None:
        """Opportunistic jobs running alone whose VC has quota free again become
        guaranteed (oldest first)."""
        opp = running[(self.kind[running] == OPPORTUNISTIC) & (state.host[running] < 0)]
        if not len(opp):
            return
        opp = opp[state.guest[opp] < 0]
        vc = self.vcs.vc[opp]
        room = self.vcs.quota[vc] - used[vc]
        for i in np.sort(opp[room >= state.gpus[opp]]).tolist():
            v, g = int(self.vcs.vc[i]), int(state.gpus[i])
            if used[v] + g <= self.vcs.quota[v]:
                used[v] += g
                self.kind[i] = GUARANTEED
                self.counts["upgraded"] += 1

    def _can_pack(self, state: SchedulerState) -> bool:
        """Some running job runs alone (a possible host or a shrinkable job)."""
        running = state.running.array()
        return bool(((state.host[running] < 0) & (state.guest[running] < 0)).any())

    # ------------------------------------------------------------ speeds
    def shares(
        self, state: SchedulerState, guaranteed: int, opp: int
    ) -> tuple[float, float] | None:
        """(guaranteed, opportunistic) speed on a shared GPU set, each relative
        to alone; None when they may not share (memory, or too little gain)."""
        gpus = state.alloc[guaranteed] or state.alloc[opp]
        assert gpus is not None
        gpu_type = state.cluster.type_name(gpus[0])
        return self._shares_of(
            (state.job_type[guaranteed], int(state.gpus[guaranteed])),
            (state.job_type[opp], int(state.gpus[opp])),
            gpu_type,
        )

    def _shares_of(
        self, gk: tuple[str, int], ok: tuple[str, int], gpu_type: str
    ) -> tuple[float, float] | None:
        key = (gk, ok, gpu_type)
        if key not in self._shares:
            self._shares[key] = self._pair_shares(gk, ok, gpu_type)
        return self._shares[key]

    def _pair_shares(
        self, gk: tuple[str, int], ok: tuple[str, int], gpu_type: str
    ) -> tuple[float, float] | None:
        measured = self.table.relative_pair(gk, ok, PAIR_GPU)
        keep = 1.0 - self.slowdown
        if measured is not None:
            if min(measured) <= 0:
                return None  # measured out of memory together
            g, o = measured
            guaranteed_share = min(1.0, max(g, keep))
            opp_share = min(o, g + o - guaranteed_share)
        else:
            if not fits_together([gk[0], ok[0]], gpu_type, self.squeeze):
                return None
            guaranteed_share, opp_share = keep, self.idle_share
        if opp_share < MIN_SHARE:
            return None
        return guaranteed_share, opp_share

    # ------------------------------------------------------------ guaranteed
    def _place_guaranteed(
        self, builder: PlanBuilder, state: SchedulerState, i: int, g: int
    ) -> bool:
        if g <= builder.free.total and builder.place(i, self.placement):
            self._track(i, GUARANTEED)
            return True
        # share an opportunistic job's GPUs (it shrinks) rather than evict it
        found = self._partner(state, i, OPPORTUNISTIC, guaranteed_side=True)
        if found is not None:
            host, (mine, theirs) = found
            builder.pack(i, host, mine, theirs)
            self._unpool(state, host)
            self._track(i, GUARANTEED)
            self.counts["packed"] += 1
            return True
        return self._evict_for(builder, state, i, g)

    def _evict_for(self, builder: PlanBuilder, state: SchedulerState, i: int, g: int) -> bool:
        """Evict opportunistic jobs, latest started first, until job ``i`` fits."""
        stopped = set(builder.plan.stops) | {h for h, _, _ in builder.plan.packs.values()}
        victims = [
            j
            for j in state.running
            if self.kind[j] == OPPORTUNISTIC
            and j not in stopped
            and state.host[j] < 0
            and state.guest[j] < 0
        ]
        victims.sort(key=lambda j: (-state.seg_start[j], -j))
        trial = builder.free.copy()
        chosen: list[int] = []
        for j in victims:
            gpus = state.alloc[j]
            if gpus is None:
                continue
            trial.release(gpus)
            chosen.append(j)
            if trial.total >= g and self.placement.choose_for(trial, state, i) is not None:
                for k in chosen:
                    builder.stop(k)
                    self._unpool(state, k)
                    self.counts["evicted"] += 1
                if builder.place(i, self.placement):
                    self._track(i, GUARANTEED)
                    return True
                return False
        return False

    def _alone(self, state: SchedulerState, kind: int, g: int) -> dict[tuple[str, str], list[int]]:
        """Running jobs of ``kind`` on exactly ``g`` GPUs sharing with nobody
        (and not stopped or shared by this plan), by (job type, GPU type): built
        once per pass, so looking for a partner costs the number of such groups,
        not of jobs (jobs of a group share alike)."""
        if self._pool is None:
            running = state.running.array()
            alone = running[(state.host[running] < 0) & (state.guest[running] < 0)]
            names = state.cluster.gpu_type_names
            type_of = state.cluster.gpu_type_id
            pool: dict[tuple[int, int], dict[tuple[str, str], list[int]]] = {}
            for j, k, n in zip(
                alone.tolist(), self.kind[alone].tolist(), state.gpus[alone].tolist(), strict=True
            ):
                gpus = state.alloc[j]
                if gpus is None:
                    continue
                group = (state.job_type[j], names[int(type_of[gpus[0]])])
                pool.setdefault((k, n), {}).setdefault(group, []).append(j)
                known = self._known.setdefault((k, n), {})
                known.setdefault(group, len(known))
            self._pool = pool
        return self._pool.get((kind, g), {})

    def _unpool(self, state: SchedulerState, j: int) -> None:
        """Job ``j`` is stopped or shared by this plan: no longer a partner."""
        gpus = state.alloc[j]
        if gpus is None:
            return
        group = (state.job_type[j], state.cluster.type_name(gpus[0]))
        members = self._alone(state, int(self.kind[j]), int(state.gpus[j])).get(group)
        if members is not None and j in members:
            members.remove(j)

    def _partner(
        self,
        state: SchedulerState,
        i: int,
        kind: int,
        guaranteed_side: bool,
        size: int | None = None,
    ) -> tuple[int, tuple[float, float]] | None:
        """The running job of ``kind`` on ``size`` GPUs (default: as many as
        job ``i``) that ``i`` should share with, and the pair's (guaranteed,
        opportunistic) shares: the partner group giving the newcomer the most
        (a guaranteed newcomer keeps the most, an opportunistic one gets the
        most), the first member of that group."""
        g = int(state.gpus[i])
        size = g if size is None else size
        mine_type = state.job_type[i]
        bound = int(state.type_req[i])
        wanted = state.cluster.gpu_type_names[bound] if bound >= 0 else None
        pool = self._alone(state, kind, size)
        for members_key, share in self._ranked(kind, size, g, mine_type, wanted, guaranteed_side):
            members = pool.get(members_key)
            if members:
                return members[0], share
        return None

    def _ranked(
        self,
        kind: int,
        size: int,
        g: int,
        mine_type: str,
        wanted: str | None,
        guaranteed_side: bool,
    ) -> list[tuple[tuple[str, str], tuple[float, float]]]:
        """Every partner group ever seen on ``size`` GPUs for a newcomer of this
        type and size ``g`` that it may share with, best first (shares depend on
        types only, so this is recomputed only when a new group appears)."""
        known = self._known.get((kind, size), {})
        key = (kind, size, g, mine_type, wanted, guaranteed_side)
        cached = self._rank_cache.get(key)
        if cached is not None and cached[0] == len(known):
            return cached[1]
        ranked = []
        for (their_type, gpu_type), order in known.items():
            if wanted is not None and gpu_type != wanted:
                continue
            if guaranteed_side:
                share = self._shares_of((mine_type, g), (their_type, size), gpu_type)
            else:
                share = self._shares_of((their_type, size), (mine_type, g), gpu_type)
            if share is not None:
                mine = share[0] if guaranteed_side else share[1]
                ranked.append((-mine, order, (their_type, gpu_type), share))
        ranked.sort()
        result = [(group, share) for _, _, group, share in ranked]
        self._rank_cache[key] = (len(known), result)
        return result

    # ------------------------------------------------------------ opportunistic
    def _place_opportunistic(self, builder: PlanBuilder, state: SchedulerState, i: int) -> bool:
        g = int(state.gpus[i])
        if g <= builder.free.total and builder.place(i, self.placement):
            builder.plan.low_priority[i] = self.memory_fraction
            self._track(i, OPPORTUNISTIC)
            return True
        found = None
        for size in self._host_sizes(state, g):
            found = self._partner(state, i, GUARANTEED, guaranteed_side=False, size=size)
            if found is not None:
                break
        if found is None:
            return False
        host, (theirs, mine) = found
        builder.pack(i, host, mine, theirs, self._subset(state, host, g))
        builder.plan.low_priority[i] = self.memory_fraction
        self._unpool(state, host)
        self._track(i, OPPORTUNISTIC)
        self.counts["packed"] += 1
        return True

    def _host_sizes(self, state: SchedulerState, g: int) -> list[int]:
        """Gang sizes of guaranteed jobs running alone that a ``g``-GPU job may
        be packed on: its own size first (Gavel measured such pairs), then
        larger ones, smallest first (a guest on some of a wider job's GPUs;
        the wide job's gang, synchronous, runs at the pace of its shared GPUs)."""
        self._alone(state, GUARANTEED, g)  # builds this pass's pool
        assert self._pool is not None
        wider = sorted(
            n
            for (k, n), groups in self._pool.items()
            if k == GUARANTEED and n > g and any(groups.values())
        )
        return [g, *wider]

    @staticmethod
    def _subset(state: SchedulerState, host: int, g: int) -> tuple[int, ...] | None:
        """``g`` of the host's GPUs for a smaller guest: on the node holding most
        of the host's GPUs (None: all of them, a guest of the host's size)."""
        gpus = state.alloc[host]
        assert gpus is not None
        if g >= len(gpus):
            return None
        node_of = state.cluster.gpu_node_list
        by_node: dict[int, list[int]] = {}
        for x in gpus:
            by_node.setdefault(node_of[x], []).append(x)
        best = max(by_node.values(), key=len)
        return tuple(best[:g]) if len(best) >= g else tuple(gpus[:g])
