"""Virtual clusters (tenants) and their GPU quotas, for the policies that have them.

Philly's quota scheduler and HiveD both give each virtual cluster (VC) a
share of the cluster. A trace names each job's VC and every job is known up
front, so quotas default to each VC's share of the trace's GPU-time demand
(the trace does not record the real quotas). Live, VCs appear as jobs name
them: quotas follow the service's ``vcs`` setting, and without it every VC
seen so far gets an equal share.
"""

from __future__ import annotations

import numpy as np

from corral.model.state import PENDING, SchedulerState

GUARANTEED, OPPORTUNISTIC = 1, 2
"""How a job of a quota policy runs: within its VC's share, or at low priority
on what others leave idle (evicted first)."""


def parse_quotas(text: str | dict[str, float] | None) -> dict[str, float] | None:
    """``vc=GPUs`` pairs separated by commas (or a mapping); None means "from demand"."""
    if isinstance(text, dict):
        text = ",".join(f"{name}={gpus}" for name, gpus in text.items())
    if text is None or not str(text).strip():
        return None
    out: dict[str, float] = {}
    for pair in str(text).split(","):
        name, eq, value = pair.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"quota '{pair}': expected vc=GPUs")
        try:
            gpus = float(value)
        except ValueError:
            raise ValueError(f"quota '{pair}': '{value}' is not a number") from None
        if gpus < 0:
            raise ValueError(f"quota '{pair}': GPUs must be >= 0")
        out[name.strip()] = gpus
    return out


def demand_quotas(vcs: np.ndarray, gpu_seconds: np.ndarray, total_gpus: int) -> np.ndarray:
    """Whole-GPU quotas proportional to each VC's demand, summing to the cluster.

    Largest-remainder rounding, so no GPU is lost to rounding.
    """
    demand = np.bincount(vcs, weights=gpu_seconds)
    if demand.sum() <= 0:
        demand = np.ones_like(demand)
    exact = total_gpus * demand / demand.sum()
    quota = np.floor(exact)
    short = int(total_gpus - quota.sum())
    if short > 0:
        quota[np.argsort(-(exact - quota), kind="stable")[:short]] += 1
    out: np.ndarray = quota
    return out


class VirtualClusters:
    """Each job's VC id and each VC's quota in GPUs, kept in step with the state.

    ``version`` grows whenever the quotas change (a VC appeared live), so a
    policy that derives something from them (HiveD's cells) knows to redo it.
    """

    def __init__(self, quotas: str | dict[str, float] | None) -> None:
        self.spec = parse_quotas(quotas)
        self.n = -1
        self.vc = np.zeros(0, dtype=np.int64)
        """Each job's VC id (index into ``names``; -1 until the job is seen)."""
        self.names: list[str] = []
        self.quota = np.zeros(0)
        self.version = 0

    def ensure(self, state: SchedulerState) -> bool:
        """Set up for this state's job table; True when that happened now."""
        if self.n == len(state.submit):
            return False
        n = len(state.submit)
        self.n = n
        self.vc = np.full(n, -1, dtype=np.int64)
        self.names = []
        self.quota = np.zeros(0)
        if state.known_in_advance:
            # a trace: every job, its VC and its demand are known up front
            names, ids = np.unique(np.asarray(state.vc, dtype=str), return_inverse=True)
            self.names = [str(v) for v in names]
            self.vc[:] = ids
            if self.spec is None:
                total = state.cluster.total_gpus
                self.quota = demand_quotas(self.vc, state.gpus * state.duration, total)
            else:
                self.quota = self._by_name()
        elif self.spec is not None:
            # live with configured quotas: those VCs exist before their first job
            # (an idle VC's quota is still its own: HiveD carves its cells now)
            self.names = [str(v) for v in self.spec]
            self.quota = self._by_name()
        self.version += 1
        return True

    def see(self, state: SchedulerState, jobs: np.ndarray) -> None:
        """Give VC ids to jobs seen for the first time (live, VCs appear as jobs
        name them); quotas follow the configured ones, or equal shares."""
        new = jobs[self.vc[jobs] < 0]
        if not len(new):
            return
        index = {name: k for k, name in enumerate(self.names)}
        grew = False
        for i in new.tolist():
            name = state.vc[i] or "default"
            if name not in index:
                index[name] = len(self.names)
                self.names.append(name)
                grew = True
            self.vc[i] = index[name]
        if grew:
            if self.spec is not None:
                self.quota = self._by_name()
            else:
                share = state.cluster.total_gpus / len(self.names)
                self.quota = np.full(len(self.names), share)
            self.version += 1

    def see_live(self, state: SchedulerState) -> None:
        """Live, name the VCs of the jobs waiting and running (a trace's are
        all known from the start)."""
        if not state.known_in_advance:
            self.see(state, state.pending.array())
            self.see(state, state.running.array())

    def _by_name(self) -> np.ndarray:
        assert self.spec is not None
        return np.array([self.spec.get(v, 0.0) for v in self.names])

    def quotas(self) -> dict[str, float]:
        return {str(v): float(q) for v, q in zip(self.names, self.quota, strict=True)}


class QuotaClassReasons:
    """The live reasons of a policy that runs jobs as GUARANTEED or OPPORTUNISTIC
    (HiveD, AntMan): it keeps ``kind`` per job, ``why`` per waiting job and ``_n``."""

    kind: np.ndarray
    why: dict[int, str]
    _n: int

    def running_notes(self, state: SchedulerState) -> dict[int, str]:
        if self._n != len(state.submit):
            return {}
        return {i: "Opportunistic" for i in state.running if self.kind[i] == OPPORTUNISTIC}

    def waiting_reasons(self, state: SchedulerState) -> dict[int, str]:
        if self._n != len(state.submit):
            return {}
        return {
            i: self.why.get(i, "Resources") for i in state.pending if state.status[i] == PENDING
        }
