"""Jobs of no GPUs (``gpus: 0``): a pipeline's CPU-only steps, beside the GPU jobs.

The policies plan GPUs, and none of them has a meaning for a job that holds
none (a share of zero GPUs, a throughput per GPU, a lease of nothing). Such a
job keeps a slot in the policy's state all the same, so that everything the
loop does to a job (its phases, cancels, holds, suspends, requeues, retries,
dependencies, time limits, warnings, recovery) goes through the one book; but
it is hidden from the policy whenever the policy is asked anything (queued
ones are set aside, running ones taken out of the running set, both put back
after), and this stage starts it instead, as Slurm's own scheduler starts a
job that asks for no GRES:

- **What it holds.** A CPU-only job holds its ``--cpus-per-task`` (1 unless
  given) and its ``--mem`` (nothing counted unless given); a GPU job holds
  the CPUs and memory it gives (a GPU job giving none is not counted: its
  GPUs are what it waits for). The service has ``cpu_jobs.cpus`` (unset: the
  CPUs it may use) and ``cpu_jobs.memory`` (unset: 90% of the host's).
- **Order.** Higher priority first, then the order they were queued in,
  strictly: the first that does not fit keeps those behind it waiting
  ("Priority"), so a large CPU job is never starved by a stream of small ones.
  GPU jobs never wait for CPU-only ones (the policy does not see their CPUs).
- **Where.** On this host (the local executor runs every attempt here), while
  any node of it is usable; none is while every node is drained or down.
  The Ray executor runs a job's processes on its GPUs' nodes: it takes no
  CPU-only job (refused at submission).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
from sqlalchemy import update

from corral.model.jobs import JobStatus
from corral.model.state import FUTURE, PENDING, RUNNING
from corral.runtime.jobspec.config import ServiceConfig
from corral.runtime.loop.launching import JOB_MEMORY_SHARE, host_memory
from corral.runtime.loop.loop_base import LoopState
from corral.runtime.storage.store import JobRow, in_chunks


def host_cpus() -> int:
    """The CPUs this process may run on (its affinity; a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_capacity(config: ServiceConfig) -> tuple[int, int]:
    """(CPUs, bytes of memory) the service counts out to jobs (see the module's text;
    a host whose memory is not known: none is counted)."""
    cpus = config.cpu_jobs.cpus or host_cpus()
    given = config.cpu_jobs.memory
    memory = given * 2**20 if given is not None else int(host_memory() * JOB_MEMORY_SHARE)
    return cpus, memory or 2**62


class CpuJobs:
    """Hides CPU-only jobs from the policy, and starts them on the CPUs and memory free."""

    def __init__(self, loop: LoopState, launched: Callable[[int], bool]) -> None:
        self.loop = loop
        self.launched = launched
        """Whether a job still has a process (one being stopped: a requeue's), whose
        row keeps its state until it has left, as a GPU job's placed again does."""

    def slots(self, status: int) -> list[int]:
        """The state's slots of CPU-only jobs with this status."""
        live = self.loop.live
        st = live.state
        n = len(live.ids)
        found = np.flatnonzero(st.gpus[:n] == 0)
        return found[st.status[found] == status].tolist() if len(found) else []

    def cpu_only(self, i: int) -> bool:
        return int(self.loop.live.state.gpus[i]) == 0

    @contextmanager
    def hidden(self) -> Iterator[None]:
        """The policy's state without CPU-only jobs for the time of the block: queued
        ones set aside, running ones out of the running set (their status FUTURE),
        each put back as it was after."""
        st = self.loop.live.state
        queued, running = self.slots(PENDING), self.slots(RUNNING)
        for i in queued:
            st.set_aside(i)
        for i in running:
            st.running.remove(i)
            st.status[i] = FUTURE
        try:
            yield
        finally:
            for i in running:
                st.running.add(i)
                st.status[i] = RUNNING
            for i in queued:
                st.put_back(i)

    def capacity(self) -> tuple[int, int]:
        return cpu_capacity(self.loop.config)

    def in_use(self) -> tuple[int, int]:
        """(CPUs, bytes) the jobs with a process, or placed to start one, hold."""
        book = self.loop.book
        cpus = memory = 0
        for job in {*book.attempts, *book.placed}:
            spec = book.peek(job).spec
            if spec is None:
                continue
            cpus += spec.cpus_held()
            memory += (spec.memory or 0) * 2**20
        return cpus, memory

    def place(self, now: float) -> bool:
        """Start the queued CPU-only jobs that fit, in order; give the rest their
        reason. True when one started."""
        queued = self.slots(PENDING)
        if not queued:
            return False
        live, book = self.loop.live, self.loop.book
        st = live.state
        queued.sort(key=lambda i: (-int(st.priority[i]), float(st.queued_since[i]), i))
        cpus, memory = self.capacity()
        used_cpus, used_memory = self.in_use()
        free_cpus, free_memory = cpus - used_cpus, memory - used_memory
        anywhere = bool(self.loop.usable.any()) if len(self.loop.usable) else True
        started: list[int] = []
        reasons: dict[int, str] = {}
        blocked = False
        for i in queued:
            job = live.ids[i]
            spec = book.peek(job).spec
            if spec is None:
                continue
            need_cpus, need_memory = spec.cpus_held(), (spec.memory or 0) * 2**20
            if not anywhere:
                reasons[job] = "ReqNodeNotAvail"
            elif blocked:
                reasons[job] = "Priority"
            elif need_cpus <= free_cpus and need_memory <= free_memory:
                started.append(job)
                free_cpus -= need_cpus
                free_memory -= need_memory
            else:
                reasons[job] = "Resources"
                blocked = True
        if started:
            with self.loop.store.session() as s:
                for job in started:
                    with self.loop.handling(job, "starting it on CPUs"):
                        book.place(job, ())
                        rec = book[job]
                        rec.reason = None
                        row = s.get(JobRow, job)
                        if row is not None:
                            if not self.launched(job):
                                row.status = JobStatus.STARTING
                            row.gpus, row.reason = [], None
                        spec = rec.spec
                        held = spec.cpus_held() if spec is not None else 1
                        self.loop.store.event(s, "allocated", job, gpus=[], cpus=held)
        self._give_reasons(reasons)
        return bool(started)

    def _give_reasons(self, reasons: dict[int, str]) -> None:
        """Each waiting CPU-only job's reason, written where it changed."""
        book = self.loop.book
        changed = {
            job: why
            for job, why in reasons.items()
            if (rec := book.get(job)) is not None and rec.reason != why
        }
        if not changed:
            return
        by_reason: dict[str, list[int]] = {}
        for job, why in changed.items():
            by_reason.setdefault(why, []).append(job)
            book[job].reason = why
        with self.loop.store.session() as s:
            for why, jobs in by_reason.items():
                for chunk in in_chunks(jobs):
                    s.execute(
                        update(JobRow)
                        .where(JobRow.id.in_(chunk), JobRow.status == JobStatus.PENDING)
                        .values(reason=why)
                        .execution_options(synchronize_session=False)
                    )
