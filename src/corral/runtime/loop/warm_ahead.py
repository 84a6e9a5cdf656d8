"""Warm workers started while a user's jobs wait (``workers.warm``), so that even
their first start on a GPU is warm.

PipeSwitch keeps a standby worker on each GPU, its CUDA context made before the
next job comes. The executor starts a user's warm worker on a GPU at the
latest when a job of that user starts there cold; this part of the loop starts
them earlier: at each pass, for every user whose task jobs wait and could run
in a warm worker (one GPU, no memory limit, not a round's task: see
:meth:`~corral.runtime.execution.warm_worker.WarmWorkers.why_not`), on the GPUs
those jobs are likely to get next:

1. the GPUs the user's running jobs hold (a time-sliced turn, a preemption or
   the job's end hands them on, and the user's next job often comes there);
2. then the free GPUs, lowest id first;

each of a type the job may run on, one GPU per waiting job. A free GPU is
promised to one user a look (the one whose job has waited longest), so that
users waiting together do not start a worker each on every free GPU (a warm
worker holds PyTorch and a CUDA context: hundreds of megabytes).

**Accounted to the user's limits.** A user has warm workers on at most as many
GPUs as the user's jobs may hold (``max_gpus``, else ``limits.user_gpus``): a
warm worker holds a CUDA context and its memory pool on its GPU, and the user
may not reserve more GPUs that way than they may use. Idle workers end after
``workers.warm_idle`` seconds, as before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from corral.runtime.execution.identity import RunAs
from corral.runtime.loop.job_book import Phase
from corral.runtime.loop.loop_base import LoopState

EVERY = 1.0
"""Seconds between two looks at the waiting jobs (a worker takes seconds to warm;
the look reads every job the loop holds)."""


class WarmAhead:
    """Starts warm workers for waiting jobs (see the module's docstring)."""

    def __init__(self, loop: LoopState, gpu_cap: Callable[[str], int | None]) -> None:
        self.loop = loop
        self.gpu_cap = gpu_cap
        """The user's cap on GPUs held (None: no cap)."""
        self.looked: float | None = None

    def warm_up(self) -> dict[str, list[int]]:
        """Start the warm workers waiting jobs want (at most every :data:`EVERY`
        seconds); the GPUs asked, by user."""
        if not self.loop.config.workers.warm:
            return {}
        now = self.loop.clock()
        if self.looked is not None and now - self.looked < EVERY:
            return {}
        self.looked = now
        wanted = self._waiting()
        asked: dict[str, list[int]] = {}
        given: set[int] = set()  # free GPUs promised this look (one user each)
        for user, types in wanted.items():
            cap = self.gpu_cap(user)
            count = len(types) if cap is None else min(len(types), cap)
            run_as = self.loop.identities.get(user)
            if count <= 0 or (run_as is not None and not run_as.runs_python):
                continue  # (such a user's jobs start as before: the worker runs our Python)
            gpus = [g for g in self._likely_gpus(user, types) if g not in given][:count]
            started = [g for g in gpus if self._start(run_as, g, cap)]
            given.update(g for g in started if g not in self.loop.holders)
            if started:
                asked[user] = started
        return asked

    def _start(self, run_as: RunAs | None, gpu: int, cap: int | None) -> bool:
        """One worker asked of the executor. A start that fails is said on stderr and
        tried again at a later look: warming ahead saves time, and its trouble must
        never stop the pass for everyone."""
        try:
            return self.loop.executor.warm_up(run_as, self.loop.slots[gpu], cap)
        except Exception as exc:
            who = "the service's user" if run_as is None else run_as.name
            print(
                f"corral: a warm worker for {who} on GPU {gpu} did not start: {exc}",
                file=sys.stderr,
            )
            return False

    def _waiting(self) -> dict[str, list[str | None]]:
        """Each user's queued jobs that could run in a warm worker: the GPU type each
        asks for (None: any). Users in the order of their first such job (the book's
        order, which is the jobs' arrival), so the free GPUs go to the longest waiting."""
        live = self.loop.live
        out: dict[str, list[str | None]] = {}
        for rec in self.loop.book:
            spec = rec.spec
            if rec.phase is not Phase.QUEUED or spec is None or rec.attempt is not None:
                continue
            if spec.gpus != 1 or spec.memory or spec.round_of is not None:
                continue
            if spec.warm_argv() is None:
                continue
            i = live.index.get(rec.id)
            if i is None:
                continue
            out.setdefault(live.state.user[i], []).append(spec.gpu_type)
        return out

    def _likely_gpus(self, user: str, types: list[str | None]) -> list[int]:
        """The GPUs the user's waiting jobs are likely to get next, most likely first,
        of a type one of them may run on."""
        live, holders = self.loop.live, self.loop.holders
        placed = {g for gpus in self.loop.book.placed.values() for g in gpus}

        def owner(job: int) -> str | None:
            i = live.index.get(job)
            return None if i is None else live.state.user[i]

        usable = [
            slot.id
            for slot in self.loop.slots
            if self.loop.usable[slot.id] and (None in types or slot.gpu_type in types)
        ]
        theirs = [g for g in usable if g in holders and owner(holders[g]) == user]
        free = [g for g in usable if g not in holders and g not in placed]
        return theirs + free
