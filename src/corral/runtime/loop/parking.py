"""Warm preemption: a preempted job is parked (paused, its state resident) rather
than stopped, and resumes in place when the policy gives it the same GPUs.

A stop-and-restart costs a job seconds (checkpoint, exit, a new interpreter,
imports, rebuilding the model, reading the checkpoint: 2-9 s measured), which
is what PipeSwitch's and Gandiva's fast switching avoid. With
``workers: {park: N}`` in the service's config, a job that uses
:mod:`corral.train` and that a policy preempts is asked to pause at its next
iteration boundary (SIGTSTP, as for Gandiva's time slices; on a GPU the
session parks its tensors in pinned host memory and frees the device's) and
is kept so, at most N per GPU. To the policy it is preempted: queued, its GPUs
free once it has paused. When the policy starts it again:

- on the same GPUs, it is resumed (SIGCONT): the same attempt carries on,
  with nothing rebuilt or read from disk;
- elsewhere, it is stopped (SIGTERM, then SIGCONT): the session checkpoints
  from its parked state without touching the GPU it left, exits, and the job
  starts on its new GPUs from that checkpoint, as any preempted job.

Cancel and suspend stop a parked job the same way; a service that restarts
finds parked jobs and stops them so (they resume from their checkpoints).
Jobs that are not cooperative (no heartbeat yet), packed or time-sliced pairs,
tasks of rounds and pre-runs are preempted as before.
"""

from __future__ import annotations

from collections import Counter

from corral.model.jobs import JobStatus
from corral.runtime.execution.exits import PARK
from corral.runtime.loop.job_book import Attempt
from corral.runtime.loop.loop_base import LoopState
from corral.runtime.loop.sharing import Sharing
from corral.runtime.loop.stops import Stops
from corral.runtime.storage.store import JobRow

PARKED = "Preempted (parked)"
"""A parked job's reason, as ``corral queue`` shows it."""

PAUSE_POLL = 0.01
"""Seconds between the loop's looks at a job asked to park, until it has paused."""


class Parking:
    """Parking preempted jobs and resuming them in place (a stage of the loop)."""

    def __init__(self, loop: LoopState, sharing: Sharing, stops: Stops) -> None:
        self.loop = loop
        self.sharing = sharing
        self.stops = stops

    def parked(self, job: int) -> bool:
        """True while the job's process is parked (it waits for the plan's next word)."""
        a = self.loop.attempts.get(job)
        return a is not None and a.stop == PARK

    def launched(self, job: int) -> bool:
        """True while the job has a process that runs, or is being stopped."""
        return job in self.loop.attempts and not self.parked(job)

    def preempt(self, a: Attempt, now: float) -> None:
        """Carry out a plan's stop: park the job where it can be, else stop it."""
        if self.parkable(a):
            self._park(a, now)
        else:
            self.stops.stop(a, "preempt", now)

    def parkable(self, a: Attempt) -> bool:
        limit = self.loop.config.workers.park
        if not limit or a.stop is not None or a.paused or a.ref is None:
            return False
        rec = self.loop.book.peek(a.job)
        if not rec.beating or a.phase == "prerun" or rec.round_ref is not None:
            return False
        packed = self.loop.book.packed_on
        if a.job in packed or a.job in packed.values() or self.sharing.taking_turns(a.job):
            return False
        parked = Counter(  # jobs parked and not being started again
            g
            for b in self.loop.attempts.values()
            if b.stop == PARK and b.job not in self.loop.book.placed
            for g in b.gpus
        )
        return all(parked[g] < limit for g in a.gpus)

    def _park(self, a: Attempt, now: float) -> None:
        a.parked = True
        with self.loop.store.session() as s:
            self.stops.set_stop(s, a, PARK)
            row = s.get(JobRow, a.job)
            if row is not None:
                row.preemptions += 1
                if a.job not in self.loop.book.placed:
                    row.status, row.gpus, row.reason = JobStatus.PENDING, None, PARKED
            self.loop.store.event(s, "park", a.job, attempt=a.number, gpus=list(a.gpus))
        rec = self.loop.book[a.job]
        rec.reason, rec.preempted = PARKED, True
        self.sharing.pause(a, now, reason=PARKED)

    def awaiting_pause(self) -> bool:
        """True while a parked job still holds GPUs it has not paused on yet: the
        loop then looks again within milliseconds, not at its next tick."""
        return any(
            a.stop == PARK and any(self.loop.holders.get(g) == a.job for g in a.gpus)
            for a in self.loop.attempts.values()
        )

    def release_parked(self, now: float) -> None:
        """A parked job's GPUs are free for others once it has paused (or its pause
        grace has passed and it was stopped where it was)."""
        for a in self.loop.attempts.values():
            if a.stop != PARK or a.paused_at is None or a.ref is None:
                continue
            held = [g for g in a.gpus if self.loop.holders.get(g) == a.job]
            if not held:
                continue
            if (
                self.loop.executor.paused(a.ref)
                or now >= a.paused_at + self.loop.config.pause_grace + 1.0
            ):
                for g in held:
                    del self.loop.holders[g]

    def restart_parked(self, a: Attempt, gpus: tuple[int, ...], now: float) -> None:
        """The policy started a parked job again: resume it in place on the same GPUs
        (once they are free), or stop it so it starts from its checkpoint elsewhere."""
        if sorted(gpus) != sorted(a.gpus) or a.job in self.loop.book.packed_on:
            self.stops.stop(a, "preempt", now)
            return
        if any(self.loop.holders.get(g, a.job) != a.job for g in gpus):
            return  # the job preempted from these GPUs is still leaving
        self.loop.book.launched(a.job)
        for g in gpus:
            self.loop.holders[g] = a.job
        a.parked = False
        rec = self.loop.book[a.job]
        note, rec.start_note = rec.start_note, None
        with self.loop.store.session() as s:
            self.stops.set_stop(s, a, None)
            row = s.get(JobRow, a.job)
            if row is not None:
                row.status, row.gpus, row.reason = JobStatus.RUNNING, list(gpus), note
            parked_for = now - a.paused_at if a.paused_at is not None else 0.0
            self.loop.store.event(
                s, "unpark", a.job, attempt=a.number, gpus=list(gpus), parked_s=round(parked_for, 3)
            )
        rec.reason, rec.preempted = note, False
        i = self.loop.live.index.get(a.job)
        if i is not None:  # it progresses from now: a warm switch costs no start-up
            self.loop.live.progress_from(i, self.loop.rel(now))
        self.sharing.resume(a, now, reason=note)
