"""The live scheduler loop: store -> policy -> plan -> executor.

One thread runs :meth:`Scheduler.step` whenever something happens (a
submission or request from the API, a process exit, a heartbeat lease
running out, the policy's own wake-up, or the tick). Each step:

1. polls the attempts in flight: exits are classified (:mod:`exits`) and
   recorded; wall-time limits, silent jobs and stop deadlines are enforced;
2. takes new submissions and API requests (cancel, suspend, resume,
   priority) from the store;
3. asks the policy, the same object the simulator drives, for a plan and
   applies it to the scheduler's view (a stopped job's GPUs are free for the
   policy at once);
4. launches the jobs the plan started as soon as their GPUs are physically
   free: a preempted process keeps its GPUs until it has checkpointed and
   exited, so no GPU ever runs two jobs.

The store is written before the executor acts (an attempt row exists before
its process does), so :meth:`Scheduler.recover` can rebuild everything after
a crash: processes still running are adopted, the rest are requeued, and the
GPUs of adopted processes are taken before any new plan is made.

Each pass observes, decides and acts (:meth:`Scheduler._pass`). The loop's
state is one :class:`~corral.runtime.loop.loop_base.LoopState` (its jobs in one
:class:`~corral.runtime.loop.job_book.JobBook`); its stages are plain objects,
each handed that state and the stages it calls, in this order (none calls one
made after it):

- :mod:`~corral.runtime.loop.sharing`: packed pairs, time slices, measured speeds;
- :mod:`~corral.runtime.loop.stops`: asking attempts to stop;
- :mod:`~corral.runtime.loop.round_jobs`: jobs run as rounds of tasks;
- :mod:`~corral.runtime.loop.queueing`: dependencies, begin times, admission;
- :mod:`~corral.runtime.loop.recovery`: the view rebuilt from the store, nodes;
- :mod:`~corral.runtime.loop.transitions`: attempts' ends, arrivals, requests;
- :mod:`~corral.runtime.loop.parking`: preempted jobs kept resident;
- :mod:`~corral.runtime.loop.launching`: processes started;
- :mod:`~corral.runtime.loop.gpu_watch`, :mod:`~corral.runtime.loop.exclusive`,
  :mod:`~corral.runtime.loop.user_limits`: the GPUs' health, exclusive nodes,
  users' limits and fair share;
- :mod:`~corral.runtime.loop.warm_ahead`: warm workers for the jobs that wait;
- :mod:`~corral.runtime.loop.cpu_jobs`: jobs of no GPUs, hidden from the policy
  and started on the CPUs and memory free.

This module holds the pass itself (observe, decide, act; the plan applied; reasons).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from types import MappingProxyType

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from corral.log_lines import Repeats
from corral.model.apply_plan import apply_plan
from corral.model.jobs import JobStatus
from corral.model.plan import Directive, Plan, upcoming
from corral.model.state import FUTURE, PENDING, RUNNING
from corral.model.unsaved_work import keep_unsaved_work
from corral.runtime.execution.executor import Executor
from corral.runtime.jobspec.config import ServiceConfig
from corral.runtime.loop.archive_sweep import ArchiveSweep
from corral.runtime.loop.cpu_jobs import CpuJobs
from corral.runtime.loop.disk_watch import DiskWatch
from corral.runtime.loop.estimates import measured_remaining
from corral.runtime.loop.exclusive import EXCLUSIVE_WAIT, ExclusiveNodes
from corral.runtime.loop.gpu_watch import GpuWatch
from corral.runtime.loop.job_book import BLANK, Attempt, Phase
from corral.runtime.loop.launching import Launching
from corral.runtime.loop.log_quota import LogQuota
from corral.runtime.loop.loop_base import (
    TERMINAL,
    JobFault,
    LoopState,
    cluster_from_slots,
    store_trouble,
)
from corral.runtime.loop.parking import PARKED, PAUSE_POLL, Parking
from corral.runtime.loop.queueing import Queueing
from corral.runtime.loop.recovery import Recovery
from corral.runtime.loop.round_jobs import RoundJobs
from corral.runtime.loop.sharing import Sharing
from corral.runtime.loop.stops import Stops
from corral.runtime.loop.transitions import Transitions
from corral.runtime.loop.user_limits import UserLimits
from corral.runtime.loop.warm_ahead import WarmAhead
from corral.runtime.storage.store import AttemptRow, JobRow, Store, in_chunks
from corral.train.session import STOPPED_EXIT

__all__ = ["TERMINAL", "Attempt", "Scheduler", "cluster_from_slots"]


class Scheduler(LoopState):
    """The loop: one pass polls, takes arrivals and requests, plans, and launches.

    It holds the loop's state (:class:`LoopState`: the job book, the policy, the
    GPUs) and its stages, plain objects each handed that state and the stages it
    calls: none reaches another except through what it was given."""

    def __init__(
        self,
        config: ServiceConfig,
        store: Store,
        executor: Executor,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(config, store, executor, clock)
        self.sharing = Sharing(self)
        self.stops = Stops(self, self.sharing)
        self.rounds = RoundJobs(self)
        self.queueing = Queueing(self, self.rounds)
        self.recovery = Recovery(self, self.stops, self.queueing, self.rounds)
        self.transitions = Transitions(
            self, self.sharing, self.stops, self.queueing, self.recovery, self.rounds
        )
        self.parking = Parking(self, self.sharing, self.stops)
        self.launching = Launching(self, self.parking, self.rounds)
        self.gpu_watch = GpuWatch(self, self.stops)
        self.exclusive = ExclusiveNodes(self)
        self.limits = UserLimits(self)
        self.warm_ahead = WarmAhead(self, lambda user: self.limits.caps_of(user)[0])
        self.launching.warm_cap = self.warm_ahead.gpu_cap
        self.cpu_jobs = CpuJobs(self, self.parking.launched)
        self.repeats = Repeats()
        """Lines of conditions that repeat (the store failing each pass), said once a while."""
        self.log_quota = LogQuota(config.state_dir / "jobs", config.user_log_limit, self._owners)
        self.archive = ArchiveSweep(store, config.archive_after)
        self.disks = DiskWatch(
            config.state_dir,
            config.job_root,
            config.disk_floor,
            config.disk_warn,
            config.disk_reserve,
            self.metrics.registry,
        )

    def recover(self) -> None:
        """Rebuild the loop's view from the store and adopt live processes (at a start)."""
        self.recovery.recover()

    def run(self, stop: threading.Event, recover: bool = True) -> None:
        """Recover (unless done already), then step until ``stop`` is set.

        Processes keep running after the loop stops.
        """
        self.loop_thread = threading.current_thread()
        if recover:
            self.recovery.recover()
        while not stop.is_set():
            try:
                self.step()
            except Exception as exc:  # keep scheduling: the next step resyncs from the store
                self.errors += 1
                if store_trouble(exc):  # (a full disk, a lost connection: a line a minute)
                    why = str(exc).splitlines()[0]
                    self.repeats.say(why, f"corral: the store failed a pass: {why}")
                else:
                    traceback.print_exc(file=sys.stderr)
                stop.wait(1.0)
            self.wake.wait(self.sleep_for())
            self.wake.clear()

    def sleep_for(self) -> float:
        """Seconds until the next pass is due, unless something wakes the loop first:
        the tick, the policy's wake-up, a time-sliced pair's turn, a pause to watch."""
        timeout = self.config.tick
        for at in (self.next_wakeup, self.turn_wakeup):
            if at is not None:
                timeout = min(timeout, max(at - self.clock(), 0.0))
        if self.config.workers.park and self.parking.awaiting_pause():
            timeout = min(timeout, PAUSE_POLL)
        return timeout

    def step(self) -> None:
        """One pass; a pass that fails on one job (its record unusable, or the
        loop's own error while handling it: :meth:`LoopState.handling`) sets that
        job aside, and any failed pass resynchronises the loop from the store (the
        others' jobs go on at the next pass).

        A pass that fails may have changed the loop's memory and not the store
        (a write the store refused: a full disk), so the loop then forgets what
        it holds and recovers from the store as a restart does, before its next
        pass; until that succeeds no pass runs on a view apart from the store.
        """
        if self.resync_due:
            self.recovery.resync()
        try:
            self._pass()
        except JobFault as fault:
            self.resync_due = True
            self.faults += 1
            self.faulted[fault.job] = fault.why
            self.last_fault = str(fault)
            print(f"corral: job {fault.job} set aside: the loop failed {fault.why}",
                  file=sys.stderr, flush=True)  # fmt: skip
            traceback.print_exc(file=sys.stderr)
            self.recovery.resync()  # (it sets the job aside)
        except Exception as exc:
            self.resync_due = True
            if store_trouble(exc) or not self.recovery.quarantine():
                raise  # the store's own trouble (run() retries), or no job at fault
            self.recovery.resync()

    def _pass(self) -> None:
        """Observe, decide, act: what happened becomes changes to the book and the
        policy's state; the policy plans over that state when something changed or
        its wake-up is due; the plan is applied (book and store first), then the
        executor acts on it."""
        now = self.clock()
        # the state's clock first: what ends in this pass ends now (a finished
        # job's service, which Gittins learns from, is counted to this instant)
        self.live.state.now = self.rel(now)
        changed = self._observe(now)
        due = self.next_wakeup is not None and now >= self.next_wakeup
        if changed or self.dirty or due:
            began = time.perf_counter()
            with self.cpu_jobs.hidden():  # (the policy plans GPUs: it sees GPU jobs only)
                decided = self._decide(now)
                if decided is not None:
                    self._apply_decision(*decided, now)
            self.cpu_jobs.place(now)
            self.metrics.pass_seconds.labels(self.config.policy).observe(
                time.perf_counter() - began
            )
        elif (self.book.having("goal") or self.book.having("loss_history")) and (
            now - self.observed_at >= self.config.heartbeat_interval
        ):
            # between passes too, so the work left shown stays fresh
            self._observe_progress()
            self.observed_at = now
        self._act(self.clock())
        self.book.sweep()  # the jobs over for the loop go, and all it kept about them
        self._publish()
        self.metrics.last_step.set(self.clock())
        self.metrics.set_aside.set(len(self.faulted.keys() | self.book.having("aside").keys()))
        with self._cv:
            self._passes += 1
            self._cv.notify_all()
        self.answer_awaiting()

    def _observe(self, now: float) -> bool:
        """What happened since the last pass, into the book: other threads' messages,
        processes' ends and deadlines, submissions, the API's requests, back-offs
        and dependencies over, the GPUs' health, nodes drained, lost or joined.
        True when the policy should plan again."""
        self._read_inbox()
        changed = self.transitions.poll(now)
        if self.config.workers.park:
            self.parking.release_parked(now)
        changed |= self.transitions.arrivals(now)
        changed |= self.transitions.requests(now)
        changed |= self.transitions.end_backoffs(now)
        changed |= self.queueing.dependencies(now)
        changed |= self.gpu_watch.watch_gpus(now)
        if self.nodes_dirty:
            self.nodes_dirty = False
            self.recovery.sync_drained()
        if self.executor.watch():
            self.recovery.executor_changed()
        return changed

    def _decide(self, now: float) -> tuple[Plan, dict[int, str]] | None:
        """The policy's plan over the state (heartbeats' measurements read into it
        first), less the starts that exclusive nodes and users' limits forbid; with
        the jobs a limit kept back and why. None when no plan could be made."""
        st = self.live.state
        st.now = self.rel(now)
        self.dirty = False
        self._observe_progress()
        self._observe_goodput()
        self._observe_memory()
        self.observed_at = now
        if self.policy.shares_gpus:
            self.sharing.observe_speeds(now)
        self.exclusive.fence_exclusive()
        self.limits.refresh_fair_share(now)
        capped = self.limits.hide_capped()  # jobs a user's or VC's limit keeps back
        try:
            found = self._plan(now)
        finally:
            self.limits.unhide(capped)
        if found is None:
            self.next_wakeup = now + 5.0
            return None
        plan = found
        self._learn_checkpoints(plan)
        plan = keep_unsaved_work(plan, st)
        self._keep_off_drained(plan)
        plan = self.exclusive.keep_exclusive(plan)
        plan = self.limits.keep_limits(plan, capped)
        return plan, capped

    def _keep_off_drained(self, plan: Plan) -> None:
        """Drop the starts on GPUs the loop keeps from the policy (a drained or lost
        node's): their free GPUs are taken from the policy already, but a job packed
        onto one still running there would start on a node where nothing may start."""
        usable = self.usable
        for i, gpus in list(plan.starts.items()):
            # (a GPU id the cluster has not is the plan's check's, inside that job's
            # containment: it is left to it)
            if any(0 <= g < len(usable) and not usable[g] for g in gpus):
                plan.drop_start(i)

    def _apply_decision(self, plan: Plan, capped: dict[int, str], now: float) -> None:
        """The plan into the book, the policy's state and the store (stops asked,
        starts placed), the next wake-up, and every waiting job's reason."""
        st = self.live.state
        self._apply(plan, now)
        wake = upcoming(plan.next_wakeup, st.now)
        if self.book.backoff:
            soonest = self.rel(min(self.book.backoff.values()))
            wake = soonest if wake is None else min(wake, soonest)
        self.next_wakeup = None if wake is None else self.store.epoch + wake
        waits = self.policy.waiting_reasons(self.live.state)
        self._update_reasons({**waits, **capped}, self.policy.running_notes(self.live.state))

    def _act(self, now: float) -> None:
        """The executor's part: launch what was placed once its GPUs are free, warm
        workers for the jobs that wait, tend the executor, note stagings that ended,
        and take time-sliced turns. Launches wait while a disk is below its floor."""
        if not self.disks.launches_paused(now):
            self.launching.launch_ready(now)
        self.warm_ahead.warm_up()
        self.executor.tend()
        self.launching.poll_staging()
        self.turn_wakeup = self.sharing.take_turns(self.clock()) if self.turns else None
        if self.log_quota.due(now):
            self.log_quota.sweep(now)
        if self.archive.due(now):
            self.archive.step(now)

    def _owners(self, jobs: list[int]) -> dict[int, str]:
        """Each of ``jobs``' user (for the logs' quota)."""
        out: dict[int, str] = {}
        with self.store.session() as s:
            for chunk in in_chunks(jobs):
                out.update(s.execute(select(JobRow.id, JobRow.user).where(JobRow.id.in_(chunk))))
        return out

    def _plan(self, now: float) -> Plan | None:
        """The policy's plan; after a failure, the plan without the jobs it fails on
        (see :meth:`_without_culprits`), or None."""
        try:
            return self.policy.schedule(self.live.state)
        except Exception as exc:
            self.errors += 1
            with self.store.session() as s:
                self.store.event(s, "policy_error", None, error=f"{type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
            return self._without_culprits(now, f"{type(exc).__name__}: {exc}")

    def _without_culprits(self, now: float, error: str, most: int = 3) -> Plan | None:
        """After a failed pass: find the waiting jobs the policy cannot take (by halving
        the queue), fail them with the policy's message, and plan for everyone else.

        One user's job must never stop the scheduling of all: a pass that fails on
        the whole queue is tried with parts of it set aside until the one job whose
        absence lets it succeed is found (up to ``most`` such jobs). None when the
        pass fails even with no job waiting (not a job's fault: the next pass tries
        again)."""
        st = self.live.state
        for _ in range(most):
            suspects = sorted(st.pending)
            if not suspects or isinstance(self._try_without(suspects), str):
                return None
            # invariant: the pass fails with `aside` hidden, succeeds with `suspects` too
            aside: list[int] = []
            while len(suspects) > 1:
                half = suspects[: len(suspects) // 2]
                if isinstance(self._try_without([*aside, *half]), str):
                    aside += half
                    suspects = suspects[len(half) :]
                else:
                    suspects = half
            self._fail_unschedulable(suspects[0], error, now)
            found = self._try_without([])
            if not isinstance(found, str):
                return found
            error = found
        return None

    def _learn_checkpoints(self, plan: Plan) -> None:
        """Mark the jobs the plan stops that have saved a checkpoint since the loop last
        looked (their heartbeats say so, or an earlier attempt stopped with the exit
        code of a checkpointed stop, as a job that saves its state on SIGTERM does
        without corral's library), or that will be parked (a parked job keeps its
        state, or checkpoints from it if it moves): a preemption no longer throws
        their work away."""
        st = self.live.state
        unsure = [self.live.ids[i] for i in plan.stops if not st.checkpoints[i]]
        if not unsure:
            return
        for job in unsure:
            a = self.attempts.get(job)
            if a is not None and self.parking.parkable(a):
                st.checkpoints[self.live.index[job]] = True
        with self.store.session() as s:
            reported = select(JobRow.id).where(
                JobRow.id.in_(unsure), JobRow.checkpoint_step.is_not(None)
            )
            stopped_saved = select(AttemptRow.job_id).where(
                AttemptRow.job_id.in_(unsure), AttemptRow.exit_code == STOPPED_EXIT
            )
            saved = set(s.scalars(reported).all()) | set(s.scalars(stopped_saved).all())
        for job in saved:
            st.checkpoints[self.live.index[job]] = True

    def _try_without(self, aside: list[int]) -> Plan | str:
        """The policy's plan with waiting jobs ``aside`` hidden, or its error message."""
        st = self.live.state
        for i in aside:
            st.set_aside(i)
        try:
            return self.policy.schedule(st)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            for i in aside:
                st.put_back(i)

    def _fail_unschedulable(self, i: int, error: str, now: float) -> None:
        """End a waiting job the policy cannot schedule, saying why (never silently)."""
        job = self.live.ids[i]
        self.book.close(job)
        reason = f"PolicyError: the policy cannot schedule this job ({error[:300]})"
        with self.store.session() as s:
            row = s.get(JobRow, job)
            if row is not None and row.status not in TERMINAL:
                row.status, row.end_time, row.gpus, row.reason = JobStatus.FAILED, now, None, reason
                self.rounds.round_task_ended(s, row, now)
            self.store.event(s, "policy_rejected", job, error=error[:1000])
        self.book[job].reason = reason

    def _apply(self, plan: Plan, now: float) -> None:
        """The plan into the book, the policy's state and the store, in one
        transaction, through the walk both engines share (:func:`apply_plan`:
        checks, stops, starts); then the stops it asks are carried out (park or
        stop)."""
        live = self.live
        for i, batch in plan.batch_sizes.items():
            self.book[live.ids[i]].batch_size = int(batch)
        for i in plan.prestage:
            with self.handling(live.ids[i], "staging its inputs"):
                self.launching.prestage(live.ids[i])
        with self.store.session() as s:
            carried = _Carried(self, s, plan)
            apply_plan(
                plan,
                live.state,
                self.cluster,
                carried,
                "live service",
                elastic=self.policy.elastic,
                resizes=self.policy.resizes,
            )
        if plan.timeslices:
            self.sharing.timeslice(plan, now)
        for a in carried.stopping:
            with self.handling(a.job, "preempting it"):
                self.parking.preempt(a, now)

    def _apply_stop(self, s: Session, i: int) -> Attempt | None:
        """A stop the plan asks: the job back to the queue (a placed one that never
        launched is PENDING again at once); its attempt to stop, if it runs."""
        job = self.live.ids[i]
        rec = self.book[job]
        placed = rec.phase is Phase.PLACED
        self.book.preempt(job)
        if placed:
            rec.packed_on = None
            row = s.get(JobRow, job)
            if row is not None and not self.parking.launched(job):
                row.status, row.gpus = JobStatus.PENDING, None
                row.reason = PARKED if self.parking.parked(job) else "Preempted"
                rec.preempted = True
        if rec.attempt is not None and rec.attempt.stop is None:
            return rec.attempt
        return None

    def _apply_start(
        self, s: Session, i: int, gpus: tuple[int, ...], host: int, low_priority: float | None
    ) -> None:
        """A start the plan gives: the job placed on its GPUs (launched once they are
        free)."""
        job = self.live.ids[i]
        gpus = tuple(int(g) for g in gpus)  # (a policy may give numpy integers)
        self.book.place(job, gpus, host=host)
        rec = self.book[job]
        rec.uncapped = False
        rec.low_priority = low_priority
        if host >= 0:
            rec.packed_on = self.live.ids[host]
            self.store.event(s, "packed", job, on=self.live.ids[host])
        row = s.get(JobRow, job)
        if row is not None:
            if not self.parking.launched(job):
                row.status = JobStatus.STARTING
            row.gpus, row.reason = list(gpus), None
            rec.reason = None
        self.store.event(s, "allocated", job, gpus=list(gpus))

    def _observe_progress(self) -> None:
        """Jobs that report heartbeats: their remaining time becomes the measured one.

        A job that gave its total steps has steps left over its throughput; one
        that trains to a target loss has the steps its fitted loss curve still
        needs over its throughput (the nearer of the two when it gave both).
        Either replaces the guess policies read."""
        st = self.live.state
        live = []
        book = self.book
        for job in {*book.having("goal"), *book.having("loss_history")}:
            i = self.live.index.get(job)
            status = st.status[i] if i is not None else None
            if status in (PENDING, RUNNING):
                live.append(job)
            elif status != FUTURE:  # ended (a held job keeps its goal)
                book[job].goal = book[job].loss_history = None
        if not live:
            return
        with self.store.session() as s:
            rows = s.execute(
                select(JobRow.id, JobRow.steps, JobRow.throughput, JobRow.loss_curve).where(
                    JobRow.id.in_(live), JobRow.throughput.is_not(None)
                )
            ).all()
        for job, steps, throughput, curve in rows:
            lefts: list[tuple[float, str]] = []
            rec = book[job]
            if rec.goal is not None:
                left = measured_remaining(rec.goal, steps, throughput)
                if left is not None:
                    lefts.append((left, "heartbeats"))
            history = rec.loss_history
            if history is not None:
                history.update(curve)
                total = history.predicted_total(steps)
                left = None if total is None else measured_remaining(total, steps, throughput)
                if left is not None:
                    lefts.append((left, "convergence"))
            if not lefts:
                continue
            left, source = min(lefts)
            i = self.live.index[job]
            st.total_steps[i] = float(st.done_steps(np.array([i]))[0]) + left
            st.estimated[i] = st.curve_predicted[i] = source == "convergence"
            rec.duration_source = source

    def _observe_goodput(self) -> None:
        """Running jobs that state a batch size: the gradient noise scale their
        heartbeats report, and their step time on the GPUs they hold now (from
        a throughput window that began after this attempt started), for goodput
        policies (Pollux) to tune the batch and learn the job's scaling by."""
        st = self.live.state
        jobs = [self.live.ids[i] for i in st.running if st.batch_size[i] > 0]
        if not jobs:
            return
        with self.store.session() as s:
            rows = s.execute(
                select(
                    JobRow.id, JobRow.grad_noise_scale, JobRow.throughput, JobRow.throughput_since
                ).where(JobRow.id.in_(jobs))
            ).all()
        for job, noise, throughput, window in rows:
            i = self.live.index[job]
            if noise is not None:
                st.noise_scale[i] = noise
            a = self.attempts.get(job)
            # measured by the process on the GPUs the state holds it on: a process
            # still leaving the GPUs of a resize reports the old ones' step time
            fresh = (
                a is not None
                and a.stop is None
                and sorted(a.gpus) == sorted(st.alloc[i] or ())
                and window is not None
                and window >= a.started
            )
            rate = float(throughput) if throughput is not None else 0.0
            st.step_time[i] = 1.0 / rate if fresh and rate > 0 else np.nan

    def _observe_memory(self) -> None:
        """The peak GPU memory running jobs' heartbeats report, for policies that
        learn what jobs need (Liquid)."""
        st, index = self.live.state, self.live.index
        for job, used in list(self.book.having("gpu_memory").items()):
            i = index.get(job)
            if i is not None and used > 0:  # the peak over the heartbeats seen
                st.gpu_memory[i] = np.fmax(st.gpu_memory[i], used / 1e9)
            if job not in self.attempts:  # ended: the state keeps its peak
                self.book[job].gpu_memory = None

    def _upgraded(self, job: int) -> None:
        """A running job the policy no longer runs opportunistically (AntMan: its VC's
        quota freed): its GPU memory cap is lifted at its next heartbeat, and its
        processes get normal OS priority back where the service may raise it."""
        rec = self.book[job]
        rec.low_priority = None
        rec.uncapped = True
        attempt = rec.attempt
        reniced = (
            attempt is not None and attempt.ref is not None and self.executor.renice(attempt.ref, 0)
        )
        with self.store.session() as s:
            self.store.event(s, "upgraded", job, reniced=reniced)

    def _update_reasons(self, waits: dict[int, str], notes: dict[int, str]) -> None:
        """Why each queued job waits, in Slurm's words: ReqNodeNotAvail (drained
        nodes leave too few GPUs of its kind even when all are idle), the
        policy's own reason where it gives one (QuotaExceeded, Locality,
        Backoff), Resources (not enough free GPUs of its kind) or Priority
        (enough are free, but the policy ranks others first)."""
        st = self.live.state
        by_type = st.free.by_type()
        type_ids = self.cluster.gpu_type_id[self.usable]
        usable = np.bincount(type_ids, minlength=len(self.cluster.gpu_type_names))
        changes: dict[int, str | None] = {}
        ids, records = self.live.ids, self.book.records
        for i in st.pending:
            job = ids[i]
            rec = records.get(job, BLANK)
            req = int(st.type_req[i])
            free = st.free.total if req < 0 else int(by_type[req])
            can_have = len(type_ids) if req < 0 else int(usable[req])
            if can_have < st.gpus[i]:
                reason = "ReqNodeNotAvail"
            elif i in waits:
                reason = waits[i]
            elif rec.preempted:
                reason = PARKED if self.parking.parked(job) else "Preempted"
            else:
                reason = "Resources" if free < st.gpus[i] else "Priority"
            if job in self.exclusive_skipped and reason in ("Resources", "Priority"):
                reason = EXCLUSIVE_WAIT
            if rec.reason != reason:
                changes[job] = reason
        # running jobs: the policy's note (Opportunistic), else Shared when the
        # job shares its GPUs with another, else nothing
        for i in st.running:
            job = ids[i]
            rec = self.book[job]
            if rec.low_priority is not None and notes.get(i) != "Opportunistic":
                self._upgraded(job)
            note = notes.get(i) or ("Shared" if st.host[i] >= 0 or st.guest[i] >= 0 else None)
            if rec.attempt is None:  # not launched yet: its row gets it at launch
                rec.start_note = note
            elif rec.reason != note:
                changes[job] = note
        if changes:
            by_reason: dict[str | None, list[int]] = {}
            for job, change in changes.items():
                by_reason.setdefault(change, []).append(job)
            with self.store.session() as s:
                for change, jobs in by_reason.items():
                    for chunk in in_chunks(jobs):
                        s.execute(
                            update(JobRow)
                            .where(JobRow.id.in_(chunk), JobRow.status.in_(_REASONED))
                            .values(reason=change)
                            .execution_options(synchronize_session=False)
                        )
            for job, change in changes.items():
                if (held := self.book.get(job)) is not None:
                    held.reason = change


_REASONED = (JobStatus.PENDING, JobStatus.RUNNING)
"""The states whose rows the loop gives a reason each pass (one ended meanwhile keeps its own)."""


LIVE_DIRECTIVES: Mapping[Directive, str] = MappingProxyType(
    {
        Directive.PACKS: "the guest is launched on its host's GPUs, both running at once",
        Directive.TIMESLICES: "the group takes turns: at each quantum's end the job "
        "running is suspended and the next resumed",
        Directive.RESPEEDS: "nothing: a running job's speed is what it measures",
        Directive.FACTORS: "nothing: a started job's speed is what it measures",
        Directive.LOW_PRIORITY: "the job's processes run at the lowest OS priority and are "
        "told their share of GPU memory (CORRAL_GPU_MEMORY_FRACTION and heartbeats)",
        Directive.BATCH_SIZES: "the job is told its batch size (CORRAL_BATCH_SIZE at launch, "
        "then in heartbeat answers)",
        Directive.OVERHEADS: "nothing: a start costs what it costs",
        Directive.PRESTAGE: "the waiting job's stage command runs ahead of its start",
    }
)
"""What the live loop does with each directive a plan may carry."""


class _Carried:
    """The live loop as one plan's walk sees it (:class:`PlanTarget`), in the pass's
    store transaction: a refused stop or start is recorded (``stop_skipped``,
    ``start_skipped``) and the job stays as it is; a stop moves the book and the
    row and collects the attempt to stop; a start places the job. Each, its
    check included, inside the loop's containment of that job's faults."""

    directives = LIVE_DIRECTIVES

    def __init__(self, loop: Scheduler, s: Session, plan: Plan) -> None:
        self.loop = loop
        self.s = s
        self.plan = plan
        self.stopping: list[Attempt] = []
        """The attempts the plan's stops ask to stop, for after the transaction."""
        self._held: set[int] | None = None

    def about(self, i: int, what: str) -> AbstractContextManager[object]:
        return self.loop.handling(self.loop.live.ids[i], what)

    def refuse(self, i: int, what: str, why: str) -> None:
        self.loop.store.event(self.s, f"{what}_skipped", self.loop.live.ids[i], why=why)

    def stop(self, i: int) -> None:
        rec = self.loop.book[self.loop.live.ids[i]]
        if rec.attempt is not None and rec.spec is not None and rec.spec.interactive:
            if not rec.spared:  # (said once: the policy may ask at every pass)
                rec.spared = True
                self.refuse(i, "stop", "an interactive allocation is never preempted")
            return
        stopped = self.loop._apply_stop(self.s, i)
        if stopped is not None:
            self.stopping.append(stopped)

    def start(self, i: int, gpus: tuple[int, ...], host: int) -> None:
        rec = self.loop.book[self.loop.live.ids[i]]
        if rec.attempt is not None and rec.spec is not None and rec.spec.interactive:
            return  # (an allocation is not moved or resized: it keeps what it has)
        if self._interactive_gpus() & {int(g) for g in gpus}:
            return  # (the plan meant to preempt it: the job waits for those GPUs)
        self.loop._apply_start(self.s, i, gpus, host, self.plan.low_priority.get(i))

    def _interactive_gpus(self) -> set[int]:
        """The GPUs of running interactive allocations, which no plan takes or shares."""
        if self._held is None:
            self._held = {
                g
                for job, a in self.loop.attempts.items()
                if (spec := self.loop.book.peek(job).spec) is not None and spec.interactive
                for g in a.gpus
            }
        return self._held
