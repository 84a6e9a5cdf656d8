"""Per-user and per-account limits, and fair share, around every policy.

Policies rank jobs; none of them knows whose jobs they are. On a shared
cluster that lets one user's many large jobs keep another user's small job
waiting under any policy whose order is per job (FIFO, LAS, Tiresias, ...).
Slurm answers with limits (QOS ``MaxTRESPerUser``, ``MaxJobsPerUser``,
association ``GrpTRES``/``GrpJobs``) and with fair share; the loop applies
both around whatever policy runs, as it does ``--exclusive``:

- **Caps** (``limits`` in the config; per user ``max_gpus``/``max_running``):
  before the policy plans, a waiting job whose start would pass a cap of its
  user or virtual cluster is hidden from it, and shows the limit as its reason
  in Slurm's words; after it plans, starts that together would pass a cap are
  dropped (the job waits for the next pass).
- **Fair share** (``fair_share``): Slurm's classic factor ``F = 2^(-u/s)``,
  where ``u`` is the user's share of the cluster's recent GPU use (GPU-seconds,
  decayed with a half-life) and ``s`` the user's share of the configured
  shares. Each job's priority, which every policy serves as a tier above its
  own order, becomes the job's own plus ``weight x F``: the user with the least
  recent use over their share goes first among waiting jobs.
"""

from __future__ import annotations

import math

import numpy as np
from sqlalchemy import or_, select

from corral.model.plan import Plan
from corral.runtime.loop.live_state import DEFAULT_VC
from corral.runtime.loop.loop_base import LoopState
from corral.runtime.storage.store import AttemptRow, JobRow, in_chunks

USER_GPUS = "QOSMaxGRESPerUser"
USER_RUNNING = "QOSMaxJobsPerUserLimit"
VC_GPUS = "AssocGrpGRES"
VC_RUNNING = "AssocGrpJobsLimit"
"""Slurm's reasons for a job held back by each limit."""


def fair_share_factors(use: dict[str, float], shares: dict[str, float]) -> dict[str, float]:
    """Slurm's classic fair-share factor of each user with shares: ``2^(-u/s)``, ``u``
    the user's part of all recent use, ``s`` their part of all shares (1 with no use)."""
    total_use = sum(use.values())
    total_shares = sum(shares.values()) or 1.0
    out = {}
    for user, share in shares.items():
        u = use.get(user, 0.0) / total_use if total_use > 0 else 0.0
        out[user] = 2.0 ** (-u / (share / total_shares))
    return out


def decayed_use(
    starts: np.ndarray, ends: np.ndarray, gpus: np.ndarray, now: float, half_life: float
) -> np.ndarray:
    """GPU-seconds of each interval, each second weighted ``2^-(age / half_life)``."""
    rate = math.log(2) / half_life
    ends = np.minimum(ends, now)
    starts = np.minimum(starts, ends)
    return gpus * (np.exp(-rate * (now - ends)) - np.exp(-rate * (now - starts))) / rate


class UserLimits:
    """Caps per user and per VC around the policy; fair share in each job's priority."""

    def __init__(self, loop: LoopState) -> None:
        self.loop = loop

    def caps_of(self, user: str) -> tuple[int | None, int | None]:
        """The user's caps on GPUs held and jobs running (None: no cap)."""
        limits = self.loop.config.limits
        conf = self.loop.user_configs.get(user)
        gpus = conf.max_gpus if conf is not None and conf.max_gpus is not None else None
        running = conf.max_running if conf is not None and conf.max_running is not None else None
        return (
            limits.user_gpus if gpus is None else gpus,
            limits.user_running if running is None else running,
        )

    @property
    def _any_limits(self) -> bool:
        limits = self.loop.config.limits
        return bool(
            limits.user_gpus is not None
            or limits.user_running is not None
            or limits.vc_gpus
            or limits.vc_running
            or any(
                u.max_gpus is not None or u.max_running is not None for u in self.loop.config.users
            )
        )

    def _in_use(self, stops: frozenset[int] = frozenset()) -> dict[tuple[str, str], list[int]]:
        """(``user`` or ``vc``, name) -> [GPUs held, jobs running], by the running jobs
        (but ``stops``), and the attempts still leaving them (stopped by a plan, timed
        out, cancelled): until its process has gone, such an attempt holds its GPUs and
        runs, for the GPU caps and the running caps alike (counted only for the GPUs,
        a job leaving slowly let a third job of a VC capped at two run beside it)."""
        st = self.loop.live.state
        out: dict[tuple[str, str], list[int]] = {}
        counted: dict[int, int] = {}  # job's slot -> GPUs counted for it
        for i in st.running:
            if i in stops:
                continue
            alloc = st.alloc[i]  # (an elastic policy may give more than it asked)
            counted[int(i)] = len(alloc) if alloc else int(st.gpus[i])
            for key in (("user", st.user[i]), ("vc", st.vc[i] or DEFAULT_VC)):
                held = out.setdefault(key, [0, 0])
                held[0] += counted[int(i)]
                held[1] += 1
        for job, a in self.loop.attempts.items():
            k = self.loop.live.index.get(job)
            if k is None:
                continue
            # a job placed again while its last attempt still leaves (a preemption
            # and a new size in one plan) holds the larger of the two until it has gone
            more = len(a.gpus) - counted.get(k, 0)
            if k in counted and more <= 0:
                continue
            for key in (("user", st.user[k]), ("vc", st.vc[k] or DEFAULT_VC)):
                held = out.setdefault(key, [0, 0])
                held[0] += more
                held[1] += 0 if k in counted else 1
        return out

    def _passes_a_cap(
        self, i: int, use: dict[tuple[str, str], list[int]], size: int | None = None
    ) -> str | None:
        """The limit job ``i`` would pass if it started on ``size`` GPUs (None: those it
        asks) with ``use`` as it is (None: none)."""
        st = self.loop.live.state
        limits = self.loop.config.limits
        size = int(st.gpus[i]) if size is None else size
        user, vc = st.user[i], st.vc[i] or DEFAULT_VC
        held, running = use.get(("user", user), [0, 0])
        max_gpus, max_running = self.caps_of(user)
        if max_gpus is not None and held + size > max_gpus:
            return USER_GPUS
        if max_running is not None and running + 1 > max_running:
            return USER_RUNNING
        held, running = use.get(("vc", vc), [0, 0])
        if vc in limits.vc_gpus and held + size > limits.vc_gpus[vc]:
            return VC_GPUS
        if vc in limits.vc_running and running + 1 > limits.vc_running[vc]:
            return VC_RUNNING
        return None

    def hide_capped(self) -> dict[int, str]:
        """Hide from the policy the waiting jobs a cap keeps back -> the cap's reason
        (:meth:`_unhide` puts them back once it has planned)."""
        if not self._any_limits:
            return {}
        st = self.loop.live.state
        use = self._in_use()
        capped = {}
        for i in list(st.pending):
            why = self._passes_a_cap(i, use)
            if why is not None:
                capped[i] = why
                st.set_aside(i)
        return capped

    def unhide(self, capped: dict[int, str]) -> None:
        for i in capped:
            self.loop.live.state.put_back(i)

    def keep_limits(self, plan: Plan, capped: dict[int, str]) -> Plan:
        """The plan without the starts that, with those before them, would pass a cap
        (added to ``capped`` with the cap's reason), each counted at the GPUs the plan
        gives it."""
        if not plan.starts or not self._any_limits:
            return plan
        st = self.loop.live.state
        use = self._in_use(frozenset(plan.stops))
        dropped = []
        for i, gpus in list(plan.starts.items()):
            size = len(gpus)  # (what the plan gives: an elastic policy may give more)
            why = self._passes_a_cap(i, use, size)
            asked = int(st.gpus[i])
            policy = self.loop.policy
            while why is not None and (policy.elastic or policy.resizes) and size > asked:
                size -= 1  # an elastic job given more than fits: trimmed to what does
                why = self._passes_a_cap(i, use, size)
            if why is None and size < len(gpus):
                plan.starts[i] = gpus[:size]
            if why is not None:
                dropped.append(i)
                capped[i] = why
                continue
            for key in (("user", st.user[i]), ("vc", st.vc[i] or DEFAULT_VC)):
                held = use.setdefault(key, [0, 0])
                held[0] += size
                held[1] += 1
        for i in dropped:
            plan.drop_start(i)
        return plan

    def refresh_fair_share(self, now: float) -> None:
        """Recompute every user's decayed use and factor (each ``refresh`` seconds), and
        each live job's priority from them."""
        conf = self.loop.config.fair_share
        if not conf.enabled or now - self.loop.shares_at < conf.refresh:
            return
        self.loop.shares_at = now
        horizon = now - 20 * conf.half_life  # older use counts less than a millionth
        with self.loop.store.session() as s:
            rows = s.execute(
                select(JobRow.user, AttemptRow.start_time, AttemptRow.end_time, AttemptRow.gpus)
                .join(JobRow, JobRow.id == AttemptRow.job_id)
                .where(or_(AttemptRow.end_time.is_(None), AttemptRow.end_time > horizon))
            ).all()
            priorities = {
                job: priority
                for chunk in in_chunks(list(self.loop.live.index))  # (every job in the loop's view)
                for job, priority in s.execute(
                    select(JobRow.id, JobRow.priority).where(JobRow.id.in_(chunk))
                )
            }
        use: dict[str, float] = {}
        if rows:
            users = [r[0] for r in rows]
            starts = np.array([r[1] for r in rows], dtype=np.float64)
            ends = np.array([now if r[2] is None else r[2] for r in rows], dtype=np.float64)
            gpus = np.array([len(r[3] or ()) for r in rows], dtype=np.float64)
            amounts = decayed_use(starts, ends, gpus, now, conf.half_life)
            for user, amount in zip(users, amounts, strict=True):
                use[user] = use.get(user, 0.0) + float(amount)
        factors = fair_share_factors(use, {u.name: u.shares for u in self.loop.config.users})
        self.loop.share_bonus = {u: round(conf.weight * f) for u, f in factors.items()}
        st = self.loop.live.state
        changed = False
        for job, i in self.loop.live.index.items():
            if job not in priorities:
                continue
            want = int(priorities[job]) + self.loop.share_bonus.get(st.user[i], 0)
            if st.priority[i] != want:
                self.loop.live.set_priority(i, want)
                changed = True
        if changed:
            self.loop.dirty = True
