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
"""

from __future__ import annotations

import re
import secrets
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from corral.model.cluster import Cluster, Node
from corral.model.jobs import JobStatus
from corral.model.plan import Plan
from corral.model.state import PENDING, RUNNING
from corral.policies import POLICIES, make_policy, policy_options
from corral.policies.base import Policy
from corral.runtime.config import ServiceConfig, hash_token
from corral.runtime.estimates import expected_duration
from corral.runtime.executor import (
    Executor,
    ExitRecord,
    GpuSlot,
    LaunchRequest,
    ProcessRef,
    free_port,
    read_exit_record,
    write_exit_record,
)
from corral.runtime.exits import Cause, classify
from corral.runtime.identity import check_identities, job_folder
from corral.runtime.launcher import NOT_STARTED
from corral.runtime.live_state import DEFAULT_VC, MIN_CAPACITY, LiveJobs
from corral.runtime.specs import JobSpec
from corral.runtime.store import AttemptRow, JobRow, NodeRow, Store

TERMINAL = [s.value for s in JobStatus if s.terminal]


@dataclass
class Attempt:
    """A process in flight, as the loop tracks it."""

    job: int
    id: int
    number: int
    phase: str
    ref: ProcessRef | None
    gpus: tuple[int, ...]
    dir: Path
    started: float
    wall_limit: float | None
    stop: str | None = None
    kill_at: float | None = None

    @property
    def log(self) -> Path:
        return self.dir / "log.txt"


def cluster_from_slots(slots: list[GpuSlot]) -> Cluster:
    """The policy's cluster: one node per executor node, GPUs numbered as the slots."""
    nodes: list[Node] = []
    for slot in slots:
        if nodes and nodes[-1].name == slot.node:
            last = nodes[-1]
            if last.gpu_type != slot.gpu_type:
                raise ValueError(f"node {slot.node} mixes GPU types")
            nodes[-1] = Node(last.name, last.gpu_type, last.gpus + 1)
        else:
            nodes.append(Node(slot.node, slot.gpu_type, 1))
    return Cluster("live", nodes)


def output_path(spec: JobSpec, job: int, user: str) -> str | None:
    """The job's ``output`` with Slurm's patterns filled in: %j job, %a array index,
    %A array job, %x name, %u user, %% a percent sign."""
    if spec.output is None:
        return None
    values = {
        "j": str(job),
        "a": str(spec.array_index) if spec.array_index is not None else "",
        "A": str(spec.array_job or job),
        "x": spec.name,
        "u": user,
        "%": "%",
    }
    return re.sub(r"%([jaAxu%])", lambda m: values[m.group(1)], spec.output)


def dependency_verdict(
    dependency: dict[str, list[int]], known: dict[int, tuple[str, bool]]
) -> tuple[str, str]:
    """'ready', 'wait' or 'never' (with why) for a dependency, from the other jobs'
    (state, has started): Slurm's after, afterany, afterok and afternotok."""
    for kind, ids in dependency.items():
        for other in ids:
            if other not in known:
                return "never", f"job {other} is gone"
            state, started = known[other]
            ended = state in TERMINAL
            if kind == "after" and not (started or ended):
                return "wait", ""
            if kind == "afterany" and not ended:
                return "wait", ""
            if kind == "afterok":
                if ended and state != JobStatus.SUCCEEDED:
                    return "never", f"job {other} ended {state}"
                if not ended:
                    return "wait", ""
            if kind == "afternotok":
                if state == JobStatus.SUCCEEDED:
                    return "never", f"job {other} succeeded"
                if not ended:
                    return "wait", ""
    return "ready", ""


class Scheduler:
    def __init__(
        self,
        config: ServiceConfig,
        store: Store,
        executor: Executor,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.store = store
        self.executor = executor
        self.clock = clock
        self.slots = executor.slots()
        self.cluster = cluster_from_slots(self.slots)
        self.live = LiveJobs(self.cluster)
        self.policy = self._new_policy()
        self.attempts: dict[int, Attempt] = {}
        """Job id -> its process in flight."""
        self.starting: dict[int, tuple[int, ...]] = {}
        """Jobs the plan started whose process is not launched yet (GPUs still in use)."""
        self.holders: dict[int, int] = {}
        """GPU -> job whose process runs on it (physical use, not the plan's view)."""
        self.backoff: dict[int, float] = {}
        """Jobs waiting out a retry back-off -> when they may run again."""
        self.reserved: set[int] = set()
        """GPUs of drained nodes, taken away from the policy."""
        self.usable = np.ones(len(self.slots), dtype=bool)
        """GPUs on nodes that are not drained (busy or not)."""
        self.reasons: dict[int, str | None] = {}
        self.blocked: dict[int, dict[str, list[int]]] = {}
        """Queued jobs waiting for other jobs (their dependency), kept from the policy."""
        self.preempted: set[int] = set()
        """Queued jobs whose last attempt was preempted (their reason says so)."""
        self.identities = check_identities(config)
        """API user -> Unix user their jobs run as (the service runs as root)."""
        self.seen = 0
        self.next_wakeup: float | None = None
        self.dirty = True
        self.wake = threading.Event()
        self._passes = 0
        self._cv = threading.Condition()
        self.errors = 0
        self._nodes_dirty = False

    # ----------------------------------------------------------- helpers
    def _new_policy(self) -> Policy:
        options = dict(self.config.policy_options)
        if self.config.vcs is not None and "quotas" in policy_options(
            POLICIES[self.config.policy.strip().lower()]
        ):
            options.setdefault("quotas", self.config.vcs)
        return make_policy(self.config.policy, self.config.placement, **options)

    def rel(self, t: float) -> float:
        """Wall-clock time as the policy's clock (seconds since the store's epoch)."""
        return t - self.store.epoch

    def notify(self) -> None:
        self.wake.set()

    def nodes_changed(self) -> None:
        """An admin drained or resumed a node: re-read node states on the next pass."""
        self._nodes_dirty = True
        self.wake.set()

    @property
    def passes(self) -> int:
        with self._cv:
            return self._passes

    def wait_passes(self, after: int, timeout: float = 5.0) -> bool:
        """Wait until the loop has completed a pass that began after pass ``after``."""
        with self._cv:
            return self._cv.wait_for(lambda: self._passes >= after + 2, timeout)

    def node_of(self, gpu: int) -> str:
        return self.slots[gpu].node

    # ------------------------------------------------------------ loop
    def run(self, stop: threading.Event, recover: bool = True) -> None:
        """Recover (unless done already), then step until ``stop`` is set.

        Processes keep running after the loop stops.
        """
        if recover:
            self.recover()
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # keep scheduling: the store is consistent, so resync from it
                self.errors += 1
                traceback.print_exc(file=sys.stderr)
                stop.wait(1.0)
                try:
                    self._rebuild()
                except Exception:
                    traceback.print_exc(file=sys.stderr)
            timeout = self.config.tick
            if self.next_wakeup is not None:
                timeout = min(timeout, max(self.next_wakeup - self.clock(), 0.0))
            self.wake.wait(timeout)
            self.wake.clear()

    def step(self) -> None:
        now = self.clock()
        changed = self._poll(now)
        changed |= self._arrivals(now)
        changed |= self._requests(now)
        changed |= self._end_backoffs(now)
        changed |= self._dependencies(now)
        if self._nodes_dirty:
            self._nodes_dirty = False
            self._sync_drained()
        due = self.next_wakeup is not None and now >= self.next_wakeup
        if changed or self.dirty or due:
            self._schedule(now)
        self._launch_ready(self.clock())
        with self._cv:
            self._passes += 1
            self._cv.notify_all()

    # -------------------------------------------------------- recovery
    def recover(self) -> None:
        """Rebuild the scheduler's view from the store and adopt live processes."""
        now = self.clock()
        with self.store.session() as s:
            self._sync_nodes(s)
            self.seen = s.scalar(select(func.max(JobRow.id))) or 0
            rows = self._live_rows(s)
            open_attempts = {a.job_id: a for a in self.store.open_attempts(s)}
            for row in rows:
                att = open_attempts.get(row.id)
                if att is not None:
                    ref = (
                        ProcessRef(att.pid, att.pid_start or "")
                        if att.pid
                        else self.executor.pid_from(Path(att.dir))
                    )
                    alive = ref is not None and self.executor.adopt(ref)
                    self.attempts[row.id] = Attempt(
                        row.id,
                        att.id,
                        att.number,
                        att.phase,
                        ref,
                        tuple(att.gpus),
                        Path(att.dir),
                        att.start_time,
                        JobSpec.model_validate(row.spec).wall_time,
                        stop=att.stop,
                    )
                    for g in att.gpus:
                        self.holders[g] = row.id
                    row.status = JobStatus.RUNNING
                    self.store.event(
                        s, "adopted" if alive else "found_ended", row.id, attempt=att.number
                    )
                elif row.status in (JobStatus.STARTING, JobStatus.RUNNING):
                    row.status = JobStatus.PENDING
                    row.gpus = None
                    row.reason = "Requeued (service restarted)"
                    self.store.event(s, "requeued", row.id, why="service restarted before launch")
            self._load(s, rows)
        for a in self.attempts.values():  # a stop in progress goes on
            if a.stop is not None and a.ref is not None:
                self._signal_stop(a, now)
        self._sync_drained()
        self.dirty = True

    def _live_rows(self, s: Session) -> list[JobRow]:
        return list(
            s.scalars(select(JobRow).where(JobRow.status.not_in(TERMINAL)).order_by(JobRow.id))
        )

    def _load(self, s: Session, rows: list[JobRow]) -> None:
        """Give every live job a slot and put it where it belongs (queue, running, held)."""
        now = self.clock()
        live = self.live
        attained = self.store.closed_attempt_seconds(s, [r.id for r in rows], per_gpu=True)
        for row in rows:
            i = self._add(s, row)
            if row.reason == "Preempted":
                self.preempted.add(row.id)
            live.state.attained_base[i] = attained.get(row.id, 0.0)
            live.state.preemptions[i] = row.preemptions
            live.state.failures[i] = row.failures
            if row.status == JobStatus.SUSPENDED:
                continue
            if row.id in self.attempts and self.attempts[row.id].stop in ("cancel", "timeout"):
                live.close(i)
                continue
            if row.eligible_at > now and row.id not in self.attempts:
                self.backoff[row.id] = row.eligible_at
                continue
            a = self.attempts.get(row.id)
            if a is None and row.id not in self.starting:
                self._enqueue(row, i, now)
                continue
            live.arrive(i, self.rel(now))
            if a is not None and a.stop is None:
                live.start(i, a.gpus, since=self.rel(a.started))
            elif a is not None and a.stop == "suspend":
                live.hold(i)
            elif row.id in self.starting:
                live.start(i, self.starting[row.id])

    def _add(self, s: Session, row: JobRow) -> int:
        spec = JobSpec.model_validate(row.spec)
        gpus = 1 if row.phase == "prerun" else spec.gpus
        duration, estimated = expected_duration(
            self.store, s, spec, row.user, self.config.default_duration
        )
        return self.live.add(
            row.id,
            self.rel(row.submit_time),
            gpus,
            priority=row.priority,
            weight=spec.weight,
            job_type=spec.job_type,
            gpu_type=spec.gpu_type,
            duration=duration,
            estimated=estimated,
            vc=spec.vc or DEFAULT_VC,
        )

    def _rebuild(self) -> None:
        """More jobs than slots: a larger state holding the live jobs only, and a fresh policy."""
        with self.store.session() as s:
            rows = self._live_rows(s)
            self.live = LiveJobs(self.cluster, max(MIN_CAPACITY, 2 * (len(rows) + 1)))
            self.policy = self._new_policy()
            self.backoff.clear()
            self._load(s, rows)
            self.seen = max([self.seen, *(r.id for r in rows)])
        self.reserved.clear()
        self._sync_drained()
        self.dirty = True

    def _sync_nodes(self, s: Session) -> None:
        counts: dict[str, tuple[str, int, bool]] = {}
        for slot in self.slots:
            _, n, _ = counts.get(slot.node, (slot.gpu_type, 0, False))
            counts[slot.node] = (slot.gpu_type, n + 1, slot.device is None)
        for name, (gpu_type, n, virtual) in counts.items():
            row = s.get(NodeRow, name)
            if row is None:
                s.add(NodeRow(name=name, gpu_type=gpu_type, gpus=n, state="up", virtual=virtual))
            else:
                row.gpu_type, row.gpus, row.virtual = gpu_type, n, virtual
        for row in s.scalars(select(NodeRow)):
            if row.name not in counts:
                row.state = "gone"

    def _sync_drained(self) -> None:
        """Keep the GPUs of drained nodes away from the policy (taken once they are free).

        Jobs already running on a node that is drained run to their end, as
        under Slurm's DRAIN; a node put back up returns its GPUs at once.
        """
        with self.store.session() as s:
            drained = {r.name for r in s.scalars(select(NodeRow).where(NodeRow.state == "drained"))}
        self.usable = np.array([slot.node not in drained for slot in self.slots], dtype=bool)
        free = self.live.state.free
        back = [g for g in self.reserved if self.slots[g].node not in drained]
        if back:
            free.release(back)
            self.reserved.difference_update(back)
            self.dirty = True
        for slot in self.slots:
            if slot.node in drained and slot.id not in self.reserved and free.mask[slot.id]:
                free.take([slot.id])
                self.reserved.add(slot.id)
                self.dirty = True

    # --------------------------------------------------------- polling
    def _poll(self, now: float) -> bool:
        if not self.attempts:
            return False
        changed = False
        with self.store.session() as s:
            beats = dict(
                s.execute(
                    select(JobRow.id, JobRow.last_heartbeat).where(
                        JobRow.id.in_(list(self.attempts))
                    )
                ).all()
            )
        for job, a in list(self.attempts.items()):
            record = (
                self.executor.poll(a.ref, a.dir)
                if a.ref is not None
                else read_exit_record(a.dir) or ExitRecord(None, None, "never started", lost=True)
            )
            if record is not None:
                self._ended(a, record, now)
                changed = True
                continue
            if a.stop is None:
                beat = beats.get(job)
                if a.wall_limit is not None and now - a.started >= a.wall_limit:
                    self._stop(a, "timeout", now)
                    self.live.close(self.live.index[job])
                    changed = True
                elif beat is not None and now - beat > self.config.heartbeat_timeout:
                    self._stop(a, "hung", now, grace=0.0)
            if a.kill_at is not None and now >= a.kill_at and a.ref is not None:
                self.executor.kill(a.ref)
                a.kill_at = None
        return changed

    def _stop(self, a: Attempt, why: str, now: float, grace: float | None = None) -> None:
        """Ask an attempt to stop (recorded first, so a restart carries the stop on)."""
        a.stop = why
        with self.store.session() as s:
            att = s.get(AttemptRow, a.id)
            if att is not None:
                att.stop = why
            row = s.get(JobRow, a.job)
            if row is not None:
                row.reason = {"preempt": "Preempting", "suspend": "Suspending"}.get(
                    why, why.capitalize()
                )
            self.store.event(s, "stop", a.job, attempt=a.number, why=why)
        self._signal_stop(a, now, grace)

    def _signal_stop(self, a: Attempt, now: float, grace: float | None = None) -> None:
        if a.ref is None:
            return
        grace = self.config.stop_grace if grace is None else grace
        self.executor.signal(a.ref, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        a.kill_at = now + grace

    def _ended(self, a: Attempt, record: ExitRecord, now: float) -> None:
        cause, detail = classify(a.stop, record, a.phase, a.log)
        del self.attempts[a.job]
        for g in a.gpus:
            if self.holders.get(g) == a.job:
                del self.holders[g]
        live = self.live
        i = live.index[a.job]
        st = live.state
        # still running in the policy's view: it ended by itself, not by a plan's stop
        ours = st.status[i] == RUNNING and a.job not in self.starting
        end = min(record.end or now, now)
        with self.store.session() as s:
            row = s.get(JobRow, a.job)
            att = s.get(AttemptRow, a.id)
            assert row is not None and att is not None
            spec = JobSpec.model_validate(row.spec)
            att.end_time = max(end, att.start_time)
            att.exit_code, att.signal = record.exit_code, record.signal
            att.cause, att.detail = cause.value, detail
            att.steps_end = row.steps
            self._count_node(s, a, cause)
            if a.job not in self.starting:
                row.gpus = None
            row.exit_code = record.exit_code
            if cause in (Cause.SUCCEEDED, Cause.CANCELLED, Cause.TIMEOUT):
                self.starting.pop(a.job, None)
                live.close(i)
                row.status = {
                    Cause.SUCCEEDED: JobStatus.SUCCEEDED,
                    Cause.CANCELLED: JobStatus.CANCELLED,
                    Cause.TIMEOUT: JobStatus.TIMEOUT,
                }[cause]
                row.end_time = end
                row.gpus = None
                row.reason = None if cause == Cause.SUCCEEDED else detail
            elif cause == Cause.PRERUN_OK:
                row.phase = "main"
                row.status = JobStatus.PENDING
                row.reason = "Resources"
                if ours:
                    live.requeue(i, spec.gpus)
                else:
                    st.gpus[i] = spec.gpus
            elif cause == Cause.PREEMPTED:
                self.preempted.add(a.job)
                row.preemptions += 1
                row.status = JobStatus.STARTING if a.job in self.starting else JobStatus.PENDING
                row.reason = None if a.job in self.starting else "Preempted"
            elif cause == Cause.SUSPENDED:
                row.status = JobStatus.SUSPENDED
                row.reason = "Suspended"
            else:
                row.failures += 1
                final = row.failures > spec.max_retries or (
                    a.phase == "prerun" and cause == Cause.USER_ERROR
                )
                self.starting.pop(a.job, None)
                row.gpus = None
                if final:
                    live.close(i)
                    row.status = JobStatus.FAILED
                    row.end_time = end
                    row.reason = f"{cause.value}: {detail}"
                else:
                    live.hold(i)
                    delay = min(
                        self.config.retry.backoff * 2 ** (row.failures - 1),
                        self.config.retry.backoff_max,
                    )
                    row.eligible_at = now + delay
                    self.backoff[a.job] = row.eligible_at
                    row.status = JobStatus.PENDING
                    row.reason = (
                        f"BackOff (retry {row.failures} of {spec.max_retries} after "
                        f"{cause.value}, {delay:.0f}s)"
                    )
            self.reasons[a.job] = row.reason
            self.store.event(
                s,
                "attempt_end",
                a.job,
                attempt=a.number,
                cause=cause.value,
                detail=detail,
                exit_code=record.exit_code,
            )
        self._sync_drained()

    def _count_node(self, s: Session, a: Attempt, cause: Cause) -> None:
        """Node failures in a row drain a node; a clean exit resets the count."""
        for name in {self.node_of(g) for g in a.gpus}:
            node = s.get(NodeRow, name)
            if node is None:
                continue
            if cause == Cause.NODE_FAILURE:
                node.failures += 1
                if node.failures >= self.config.drain_after and node.state == "up":
                    node.state = "drained"
                    self.store.event(s, "node_drained", None, node=name, failures=node.failures)
            elif cause in (Cause.SUCCEEDED, Cause.PRERUN_OK):
                node.failures = 0

    # ---------------------------------------------------- submissions
    def _arrivals(self, now: float) -> bool:
        rebuild = False
        with self.store.session() as s:
            rows = list(s.scalars(select(JobRow).where(JobRow.id > self.seen).order_by(JobRow.id)))
            for row in rows:
                if self.live.full:
                    rebuild = True
                    break
                if row.status not in TERMINAL and row.id not in self.live.index:
                    i = self._add(s, row)
                    if row.status != JobStatus.SUSPENDED:
                        self._enqueue(row, i, now)
                self.seen = row.id
        if rebuild:
            self._rebuild()
        return bool(rows)

    def _requests(self, now: float) -> bool:
        """Carry out the API's requests (the API only records them in the store)."""
        live = self.live
        stops: list[tuple[Attempt, str]] = []
        with self.store.session() as s:
            rows = list(s.scalars(select(JobRow).where(JobRow.request.is_not(None))))
            for row in rows:
                request = row.request
                # Cleared only if unchanged: a request the API records meanwhile
                # (a cancel after a suspend) stays for the next pass.
                s.execute(
                    update(JobRow)
                    .where(JobRow.id == row.id, JobRow.request == request)
                    .values(request=None)
                    .execution_options(synchronize_session=False)
                )
                i = live.index.get(row.id)
                if i is None or row.status in TERMINAL:
                    continue
                a = self.attempts.get(row.id)
                self.store.event(s, f"request_{request}", row.id)
                if request == "priority":
                    live.set_priority(i, row.priority)
                elif request == "cancel":
                    self.starting.pop(row.id, None)
                    self.backoff.pop(row.id, None)
                    self.blocked.pop(row.id, None)
                    live.close(i)
                    if a is not None:
                        stops.append((a, "cancel"))
                    else:
                        row.status, row.end_time, row.gpus = JobStatus.CANCELLED, now, None
                        row.reason = "cancelled by request"
                elif request == "suspend" and row.status != JobStatus.SUSPENDED:
                    self.starting.pop(row.id, None)
                    self.backoff.pop(row.id, None)
                    self.blocked.pop(row.id, None)
                    live.hold(i)
                    if a is not None:
                        stops.append((a, "suspend"))
                    else:
                        row.status, row.gpus, row.reason = JobStatus.SUSPENDED, None, "Suspended"
                elif request == "resume":
                    if a is not None and a.stop == "suspend":
                        # still checkpointing: it goes back to the queue when it exits
                        a.stop = "preempt"
                        att = s.get(AttemptRow, a.id)
                        if att is not None:
                            att.stop = "preempt"
                        live.arrive(i, self.rel(now))
                    elif row.status == JobStatus.SUSPENDED:
                        row.status, row.reason = JobStatus.PENDING, None
                        self._enqueue(row, i, now)
        for a, why in stops:
            if why == "cancel" or a.stop in (None, "preempt"):
                self._stop(a, why, now)
        return bool(rows)

    def _enqueue(self, row: JobRow, i: int, now: float) -> None:
        """Queue a job for the policy, or hold it while its dependency is unmet."""
        dependency = JobSpec.model_validate(row.spec).dependency
        if dependency and row.first_start is None:
            self.blocked[row.id] = dict(dependency)
            row.reason = "Dependency"
            self.reasons[row.id] = row.reason
        else:
            self.live.arrive(i, self.rel(now))

    def _dependencies(self, now: float) -> bool:
        """Queue the held jobs whose dependency is met; cancel those whose never can be."""
        if not self.blocked:
            return False
        wanted = {j for dep in self.blocked.values() for ids in dep.values() for j in ids}
        with self.store.session() as s:
            known = {
                r.id: (r.status, r.first_start is not None)
                for r in s.execute(
                    select(JobRow.id, JobRow.status, JobRow.first_start).where(
                        JobRow.id.in_(wanted)
                    )
                )
            }
            changed = False
            for job, dependency in list(self.blocked.items()):
                verdict, why = dependency_verdict(dependency, known)
                if verdict == "wait":
                    continue
                del self.blocked[job]
                changed = True
                row = s.get(JobRow, job)
                i = self.live.index.get(job)
                if row is None or i is None or row.status in TERMINAL:
                    continue
                if verdict == "ready":
                    row.reason = None
                    self.live.arrive(i, self.rel(now))
                else:
                    self.live.close(i)
                    row.status, row.end_time = JobStatus.CANCELLED, now
                    row.reason = f"DependencyNeverSatisfied ({why})"
                    self.store.event(s, "dependency_never_satisfied", job, why=why)
                self.reasons[job] = row.reason
        return changed

    def _end_backoffs(self, now: float) -> bool:
        due = [job for job, t in self.backoff.items() if t <= now]
        for job in due:
            del self.backoff[job]
            i = self.live.index.get(job)
            if i is not None:
                self.live.arrive(i, self.rel(now))
        return bool(due)

    # ------------------------------------------------------ scheduling
    def _schedule(self, now: float) -> None:
        st = self.live.state
        st.now = self.rel(now)
        self.dirty = False
        try:
            plan = self.policy.schedule(st)
        except Exception as exc:
            self.errors += 1
            with self.store.session() as s:
                self.store.event(s, "policy_error", None, error=f"{type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
            self.next_wakeup = now + 5.0
            return
        self._apply(plan, now)
        wake = plan.next_wakeup
        if self.backoff:
            soonest = self.rel(min(self.backoff.values()))
            wake = soonest if wake is None else min(wake, soonest)
        self.next_wakeup = None if wake is None else self.store.epoch + wake
        self._update_reasons(self.policy.waiting_reasons(self.live.state))

    def _apply(self, plan: Plan, now: float) -> None:
        live, st = self.live, self.live.state
        names = self.cluster.gpu_type_names
        stops: list[tuple[Attempt, str]] = []
        with self.store.session() as s:
            for i in plan.stops:
                if st.status[i] != RUNNING:
                    continue
                job = live.ids[i]
                live.preempt(i)
                if job in self.starting:
                    del self.starting[job]
                    row = s.get(JobRow, job)
                    if row is not None and job not in self.attempts:
                        row.status, row.gpus, row.reason = JobStatus.PENDING, None, "Preempted"
                        self.preempted.add(job)
                if job in self.attempts and self.attempts[job].stop is None:
                    stops.append((self.attempts[job], "preempt"))
            for i, gpus in plan.starts.items():
                job = live.ids[i]
                if i in plan.packs or st.status[i] != PENDING:
                    self.store.event(s, "start_skipped", job, why="GPU sharing is not run live")
                    continue
                req = int(st.type_req[i])
                if req >= 0 and any(self.cluster.gpu_type_id[g] != req for g in gpus):
                    self.store.event(s, "start_skipped", job, why=f"needs {names[req]} GPUs")
                    continue
                gpus = tuple(int(g) for g in gpus)
                live.start(i, gpus)
                self.starting[job] = gpus
                row = s.get(JobRow, job)
                if row is not None:
                    if job not in self.attempts:
                        row.status = JobStatus.STARTING
                    row.gpus, row.reason = list(gpus), None
                    self.reasons[job] = None
                self.store.event(s, "allocated", job, gpus=list(gpus))
        for a, why in stops:
            self._stop(a, why, now)

    def _update_reasons(self, waits: dict[int, str]) -> None:
        """Why each queued job waits, in Slurm's words: ReqNodeNotAvail (drained
        nodes leave too few GPUs of its kind even when all are idle), the
        policy's own reason where it gives one (QuotaExceeded, Locality,
        Backoff), Resources (not enough free GPUs of its kind) or Priority
        (enough are free, but the policy ranks others first)."""
        st = self.live.state
        by_type = st.free.by_type()
        type_ids = self.cluster.gpu_type_id[self.usable]
        usable = np.bincount(type_ids, minlength=len(self.cluster.gpu_type_names))
        changes: dict[int, str] = {}
        for i in st.pending:
            job = self.live.ids[i]
            req = int(st.type_req[i])
            free = st.free.total if req < 0 else int(by_type[req])
            can_have = len(type_ids) if req < 0 else int(usable[req])
            if can_have < st.gpus[i]:
                reason = "ReqNodeNotAvail"
            elif i in waits:
                reason = waits[i]
            elif job in self.preempted:
                reason = "Preempted"
            else:
                reason = "Resources" if free < st.gpus[i] else "Priority"
            if self.reasons.get(job) != reason:
                changes[job] = reason
        if not changes:
            return
        with self.store.session() as s:
            for job, reason in changes.items():
                row = s.get(JobRow, job)
                if row is not None and row.status == JobStatus.PENDING:
                    row.reason = reason
                    self.reasons[job] = reason

    # -------------------------------------------------------- launching
    def _launch_ready(self, now: float) -> None:
        for job, gpus in list(self.starting.items()):
            if job in self.attempts or any(g in self.holders for g in gpus):
                continue
            del self.starting[job]
            self._launch(job, gpus, now)

    def _launch(self, job: int, gpus: tuple[int, ...], now: float) -> None:
        config = self.config
        token = secrets.token_urlsafe(24)
        with self.store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None
            spec = JobSpec.model_validate(row.spec)
            number = (s.scalar(select(func.count()).where(AttemptRow.job_id == job)) or 0) + 1
            folder = config.state_dir / "jobs" / str(job) / f"attempt-{number}"
            att = AttemptRow(
                job_id=job,
                number=number,
                phase=row.phase,
                gpus=list(gpus),
                start_time=now,
                dir=str(folder),
                token_sha256=hash_token(token),
                steps_start=row.checkpoint_step or 0.0,
            )
            s.add(att)
            s.flush()
            attempt_id = att.id
            row.status, row.gpus, row.reason = JobStatus.RUNNING, list(gpus), None
            self.preempted.discard(job)
            row.last_heartbeat = None
            if row.first_start is None:
                row.first_start = now
            self.reasons[job] = None
            self.store.event(s, "start", job, attempt=number, gpus=list(gpus), phase=row.phase)
            env = self._env(row, spec, number, gpus, folder, token)
            run_as = self.identities.get(row.user)
            row_user = row.user
        a = Attempt(job, attempt_id, number, row.phase, None, gpus, folder, now, spec.wall_time)
        self.attempts[job] = a
        for g in gpus:
            self.holders[g] = job
        folder.mkdir(parents=True, exist_ok=True)
        try:
            own = job_folder(self.config, job, run_as)
            a.ref = self.executor.launch(
                LaunchRequest(
                    spec.command,
                    env,
                    spec.workdir or str(own),
                    self._slots(gpus),
                    folder,
                    a.log,
                    run_as=run_as,
                    cpus=spec.cpus,
                    memory=spec.memory * 2**20 if spec.memory else None,
                    output=output_path(spec, job, row_user),
                )
            )
        except OSError as exc:
            write_exit_record(folder, NOT_STARTED, f"cannot launch: {exc}")
            return
        with self.store.session() as s:
            att = s.get(AttemptRow, attempt_id)
            if att is not None:
                att.pid, att.pid_start = a.ref.pid, a.ref.pid_start

    def _slots(self, gpus: Iterable[int]) -> tuple[GpuSlot, ...]:
        return tuple(self.slots[g] for g in gpus)

    def _env(
        self,
        row: JobRow,
        spec: JobSpec,
        number: int,
        gpus: tuple[int, ...],
        folder: Path,
        token: str,
    ) -> dict[str, str]:
        base = self.config.job_root / str(row.id)
        checkpoints = base / ("prerun" if row.phase == "prerun" else "checkpoint")
        slots = self._slots(gpus)
        env = dict(spec.env)
        env.update(
            CORRAL_JOB_ID=str(row.id),
            CORRAL_JOB_NAME=row.name,
            CORRAL_USER=row.user,
            CORRAL_ATTEMPT=str(number),
            CORRAL_JOB_DIR=str(base),
            CORRAL_CHECKPOINT_DIR=str(checkpoints),
            CORRAL_RANK="0",
            CORRAL_LOCAL_RANK="0",
            CORRAL_WORLD_SIZE="1",
            CORRAL_MASTER_ADDR="127.0.0.1",
            CORRAL_MASTER_PORT=str(free_port()),
            CORRAL_NUM_GPUS=str(len(gpus)),
            CORRAL_GPU_IDS=",".join(str(g) for g in gpus),
            CORRAL_GPU_TYPES=",".join(s.gpu_type for s in slots),
            CORRAL_VIRTUAL_GPUS="1" if all(s.device is None for s in slots) else "0",
            CORRAL_API_URL=self.config.url,
            CORRAL_JOB_TOKEN=token,
            CORRAL_HEARTBEAT_INTERVAL=str(self.config.heartbeat_interval),
            CORRAL_LEASE_SECONDS=str(self.config.heartbeat_timeout),
        )
        if spec.total_steps is not None:
            env["CORRAL_TOTAL_STEPS"] = str(spec.total_steps)
        if spec.array_index is not None:
            env["CORRAL_ARRAY_INDEX"] = str(spec.array_index)
            env["CORRAL_ARRAY_JOB_ID"] = str(spec.array_job or row.id)
        if row.phase == "prerun":
            env["CORRAL_PRERUN_STEPS"] = str(self._prerun_steps(spec))
        return env

    def _prerun_steps(self, spec: JobSpec) -> int:
        if spec.prerun_steps:
            return spec.prerun_steps
        return self.config.prerun.steps

    # ------------------------------------------------------- for the API
    def gpu_use(self) -> dict[int, int]:
        """GPU -> job whose process runs on it now (a copy, safe to read from other threads)."""
        return dict(self.holders)
