"""GPU sharing live: packed jobs, time-slicing by pause and resume, and the
speeds a sharing policy judges by, measured from heartbeats.

A plan may pack a job onto a running job's GPUs (Gandiva, Gavel's packed
max-min fairness): the guest's processes are launched on the same GPUs while
the host's keep running. A pair the plan marks as time-sliced takes turns
instead: at each quantum boundary one job's process group is paused and the
other's resumed. A job using :mod:`corral.train` is asked first (SIGTSTP; the
session pauses itself at its next iteration boundary, as Gandiva suspends at
a mini-batch boundary) and stopped where it is after ``pause_grace``; other
jobs get SIGSTOP and SIGCONT. A paused job's lease and wall time stand still.

When a host ends, its first guest takes the GPUs over and any others share
them with it (the state hands them over; :meth:`Sharing._unpair` does the same for the
processes). Speeds: for a policy that shares GPUs, the throughput each job
reports is kept as its speed alone while it runs unshared, and read against
that while it runs packed; the ratio is what the policy sees as
``observed_speed``, in place of a table's figure. A figure counts only if the
window it covers began after the job's sharing last changed and, packed,
after its partner began stepping (heartbeats say how old their window is).
"""

from __future__ import annotations

import signal

import numpy as np
from sqlalchemy import select

from corral.model.plan import Plan
from corral.model.state import RUNNING
from corral.runtime.loop.job_book import Attempt
from corral.runtime.loop.loop_base import LoopState, Turns
from corral.runtime.storage.store import JobRow

SHARED_MOST = 2
"""Processes a shared GPU runs at once: a job and the one packed with it."""


class Sharing:
    """Packs, turns and measured speeds (a stage of the loop)."""

    def __init__(self, loop: LoopState) -> None:
        self.loop = loop

    # ------------------------------------------------------------ pairs
    def unpair(self, job: int, now: float) -> None:
        """``job``'s attempt ended: a host it was packed on runs without it; the
        jobs packed on it stay on the GPUs, the first of them holding them now
        (the one the scheduler's state hands them to) and the others sharing
        them with it."""
        book = self.loop.book
        rec = book[job]
        host, rec.packed_on = rec.packed_on, None
        if host is not None and host in book:
            book[host].share_changed = now
        guests = [guest for guest, on in book.packed_on.items() if on == job]
        turns = self.loop.turns.pop(job, None)
        if not guests:
            return
        successor = self._successor(job, guests)
        for guest in guests:
            other = book[guest]
            other.share_changed = now
            if guest != successor:
                other.packed_on = successor
                continue
            other.packed_on = None
            a = other.attempt
            if a is not None:
                for g in a.gpus:
                    self.loop.holders.setdefault(g, guest)
        if turns is not None:
            members = [successor, *(m for m in turns.members if m not in (job, successor))]
            existing = self.loop.turns.get(successor)
            if existing is not None:
                # the successor holds a group of its own already (jobs the plan
                # time-sliced onto it while this one was leaving): one group, with
                # every member of both, never the old group over the new
                existing.members += [m for m in members if m not in existing.members]
            else:
                turns.members = members
                self.loop.turns[successor] = turns

    def _successor(self, job: int, guests: list[int]) -> int:
        """Which of the jobs packed on ``job`` holds its GPUs once it leaves: the
        scheduler state's choice (its first guest still there), so that the
        loop's book and the policy's view agree on who holds them."""
        live = self.loop.live
        st = live.state
        i = live.index.get(job)
        if i is not None and st.guest[i] >= 0:  # the state has not handed over yet
            first = live.ids[int(st.guest[i])]
            if first in guests:
                return first
        for guest in guests:  # handed over already (a stop the plan asked)
            k = live.index.get(guest)
            if k is not None and st.status[k] == RUNNING and st.host[k] < 0:
                return guest
        return guests[0]

    def take_turns(self, now: float) -> float | None:
        """Pause and resume time-sliced groups as their turns come, one job of a
        group running at a time; returns when the next turn passes (None: no
        group takes turns)."""
        soonest: float | None = None
        book = self.loop.book
        attempts = self.loop.attempts
        for holder, t in list(self.loop.turns.items()):
            t.members = [m for m in t.members if m == holder or book.packed_on.get(m) == holder]
            present = {m: attempts.get(m) for m in t.members}
            active = [m for m, a in present.items() if a is not None and a.stop is None]
            coming = [m for m, a in present.items() if a is None and m in book.placed]
            leavers = self._leaving(holder)
            if leavers:
                # members asked to stop (perhaps out of the set already) still run on
                # the GPUs: the group waits, paused, until they have gone, and they
                # run to act on their stop a GPU's worth at a time
                for m in active:
                    a = present[m]
                    if a is not None and not a.paused:
                        self.pause(a, now)
                for a in leavers:
                    self.let_leave(a, now)
                continue
            if holder not in active + coming or len(active) + len(coming) < 2:
                for m in active:  # the group is over: nobody stays paused
                    a = present[m]
                    if a is not None and a.paused:
                        self.resume(a, now)
                del self.loop.turns[holder]
                continue
            if t.turn in coming or len(active) < 2:  # a job not launched yet: the others run on
                continue
            if t.turn not in active:  # the job whose turn it was has left
                t.turn, t.switch_at = self._next(t, active), None
            if t.switch_at is None:
                t.switch_at = now + t.quantum
            elif now >= t.switch_at:
                t.turn = self._next(t, active)
                t.switch_at = now + t.quantum
            for m in active:
                a = present[m]
                assert a is not None
                if m != t.turn and not a.paused:
                    self.pause(a, now)
            run = present[t.turn]
            assert run is not None
            if run.paused:
                self.resume(run, now)
            soonest = t.switch_at if soonest is None else min(soonest, t.switch_at)
        return soonest

    def _leaving(self, holder: int) -> list[Attempt]:
        """The attempts asked to stop (the holder's own included) still on ``holder``'s
        GPUs."""
        own = self.loop.attempts.get(holder)
        if own is None:
            return []
        gpus = set(own.gpus)
        return [
            a
            for a in self.loop.attempts.values()
            if a.stop is not None and not gpus.isdisjoint(a.gpus)
        ]

    def let_leave(self, a: Attempt, now: float) -> None:
        """A paused attempt asked to stop must run to act on it: it is resumed once
        fewer than :data:`SHARED_MOST` processes run on its GPUs (its kill deadline
        then a grace away at the soonest); until then it waits, paused (killed there
        if its deadline comes first)."""
        if not a.paused:
            return
        gpus = set(a.gpus)
        beside = sum(
            1
            for b in self.loop.attempts.values()
            if b is not a and not b.paused and not gpus.isdisjoint(b.gpus)
        )
        if beside < SHARED_MOST:
            self.resume(a, now)
            if a.kill_at is not None:
                a.kill_at = max(a.kill_at, now + self.loop.config.stop_grace)

    @staticmethod
    def _next(t: Turns, active: list[int]) -> int:
        """The job after ``t.turn`` in the group's order that can run now."""
        order = t.members
        start = order.index(t.turn) if t.turn in order else -1
        for k in range(1, len(order) + 1):
            m = order[(start + k) % len(order)]
            if m in active:
                return m
        return active[0]

    def timeslice(self, plan: Plan, now: float) -> None:
        """Jobs the plan time-slices join their GPU set's turns: a new job gets the
        first turn; a packed pair judged not to help lets its host go first (the
        event records the speeds it was judged by, where measured)."""
        st = self.loop.live.state
        with self.loop.store.session() as s:
            for i, quantum in plan.timeslices.items():
                guest = self.loop.live.ids[i]
                host = self.loop.book.packed_on.get(guest)
                if host is None:
                    continue
                new = i in plan.starts
                t = self.loop.turns.get(host)
                if t is None:
                    t = self.loop.turns[host] = Turns([host], quantum, turn=host)
                elif guest in t.members:
                    continue
                t.members.append(guest)
                if new:
                    t.turn, t.switch_at = guest, None
                speeds = {
                    f"{who}_speed": round(v, 3)
                    for who, v in (
                        ("host", float(st.observed_speed[self.loop.live.index[host]])),
                        ("guest", float(st.observed_speed[i])),
                    )
                    if np.isfinite(v)
                }
                self.loop.store.event(
                    s, "timeslice", guest, on=host, quantum=quantum, jobs=len(t.members), **speeds
                )

    def pause(self, a: Attempt, now: float, reason: str = "TimeSliced") -> None:
        if a.ref is None:
            return
        a.paused_at = now
        cooperative = self.loop.book.peek(a.job).beating
        if cooperative:  # corral.train pauses at its next iteration boundary
            self.loop.executor.signal(a.ref, signal.SIGTSTP)
            a.force_pause_at = now + self.loop.config.pause_grace
        else:
            self.loop.executor.signal(a.ref, signal.SIGSTOP)
        self._note(a, "pause", reason, cooperative=cooperative)

    def resume(self, a: Attempt, now: float, reason: str | None = None) -> None:
        if a.paused_at is None:
            return
        a.paused_total += now - a.paused_at
        a.paused_at = None
        a.force_pause_at = None
        a.resumed_at = now
        if (rec := self.loop.book.get(a.job)) is not None:
            rec.share_changed = now
        self._note(a, "resume", reason)  # recorded before it runs again
        if a.ref is not None:
            self.loop.executor.signal(a.ref, signal.SIGCONT)

    def force_pauses(self, a: Attempt, now: float) -> None:
        """A job asked to pause that has not reached an iteration boundary in time
        is stopped where it is."""
        if a.force_pause_at is not None and now >= a.force_pause_at and a.ref is not None:
            self.loop.executor.signal(a.ref, signal.SIGSTOP)
            a.force_pause_at = None

    def _note(self, a: Attempt, kind: str, reason: str | None, **data: object) -> None:
        with self.loop.store.session() as s:
            row = s.get(JobRow, a.job)
            if row is not None and row.status == "RUNNING":
                row.reason = reason
            self.loop.store.event(s, kind, a.job, attempt=a.number, **data)

    # ----------------------------------------------------------- speeds
    def observe_speeds(self, now: float) -> None:
        """For a policy that shares GPUs: each running job's reported throughput,
        as its speed alone while unshared and as a fraction of that while packed."""
        st = self.loop.live.state
        st.observed_speed[:] = np.nan
        running = [job for job in self.loop.attempts if job in self.loop.live.index]
        if not running:
            return
        with self.loop.store.session() as s:
            rows = s.execute(
                select(
                    JobRow.id, JobRow.throughput, JobRow.throughput_since, JobRow.last_heartbeat
                ).where(JobRow.id.in_(running))
            ).all()
        book = self.loop.book
        for job, throughput, window, beat in rows:
            rec = book[job]
            started = self.loop.attempts[job].started
            first = window is not None and window >= started and throughput is not None
            stepping = rec.stepping_since
            if (
                first
                and beat is not None
                and window is not None
                and (stepping is None or stepping < started)
            ):
                rec.stepping_since = window  # its attempt's first figure
        # without the window's age (an older client), a figure may cover up to
        # two one-second windows before the beat that carried it
        settle = 2.0 + self.loop.config.heartbeat_interval
        for job, throughput, window, beat in rows:
            i = self.loop.live.index[job]
            rec = book[job]
            a = rec.attempt
            assert a is not None
            st.reports_speed[i] = throughput is not None
            if st.status[i] != RUNNING or throughput is None or beat is None or a.paused:
                continue
            changed = rec.share_changed
            since = max(a.started if changed is None else changed, a.resumed_at)
            partner = int(st.host[i]) if st.host[i] >= 0 else int(st.guest[i])
            shared = partner >= 0
            if shared:
                since = max(since, self._stepping_since(self.loop.live.ids[partner], settle))
            began = beat - settle if window is None else window
            if began < since:  # its figure still covers time before the change
                continue
            alone = rec.alone_rate
            if not shared:
                rec.alone_rate = float(throughput)
            elif alone is not None and alone > 0 and not self.taking_turns(job):
                st.observed_speed[i] = float(throughput) / alone

    def _stepping_since(self, job: int, settle: float) -> float:
        """When ``job``'s current attempt began stepping: its first throughput
        window; for a job that reports none, ``settle`` after its launch."""
        rec = self.loop.book.peek(job)
        a = rec.attempt
        if a is None:
            return float("inf")
        began = rec.stepping_since
        if began is not None and began >= a.started:
            return began
        return a.started + settle if not rec.beating else float("inf")

    def taking_turns(self, job: int) -> bool:
        """Whether ``job`` is one of a time-sliced group."""
        return any(job in t.members for t in self.loop.turns.values())
