"""What passes between the API's threads and the loop, so only the loop writes its book.

The API never touches the loop's memory: what it learns that the loop needs (a
job's GPU memory from a heartbeat, a node an admin drained) and what it asks of
the policy (a job's view) are posted to the loop's :class:`Inbox` and handled at
the start of the next pass; a route that stored a job's request waits for the
pass that carries it out (:class:`PassAsked`); and what the API
answers from the loop's view (a heartbeat's batch size and GPU memory cap, a
job's work left, the jobs on each GPU) is read from the :class:`Answers` the
loop publishes at the end of each pass: an immutable value swapped whole, so a
reader on another thread never sees one half-made.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np


@dataclass(frozen=True)
class MemoryReport:
    """A job's peak GPU memory per GPU (bytes), as its heartbeat reported it."""

    job: int
    used: float


@dataclass(frozen=True)
class NodesChanged:
    """An admin drained or resumed a node (stored already): the loop re-reads the
    nodes' states on its next pass."""


@dataclass(frozen=True)
class ViewAsked:
    """A job's page asks for the policy's own view of the job: the loop answers it
    at the start of its next pass, from its own thread (the policy's state is the
    loop's to read as well as to write)."""

    job: int
    answer: Future[dict[str, str]] = field(default_factory=Future, compare=False)


@dataclass(frozen=True)
class PassAsked:
    """A route has stored something the loop acts on (a job's request, a node's new
    state) and waits for the pass that reads it: answered at the end of the first
    pass that read its inbox after this was posted, which read the store after the
    route's write. The route then answers from the store, as the loop left it."""

    done: Future[None] = field(default_factory=Future, compare=False)


Message = MemoryReport | NodesChanged | ViewAsked | PassAsked
"""What other threads may post to the loop."""


class Inbox:
    """Messages posted by other threads for the loop, read in the order they came."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Message] = queue.SimpleQueue()

    def post(self, message: Message) -> None:
        self._queue.put(message)

    def take(self) -> list[Message]:
        """Everything posted since the last take (never blocks)."""
        out: list[Message] = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out


class WorkLeft(Mapping[int, tuple[float, str]]):
    """Job -> the seconds of work its policy believes it has left, and where the figure
    comes from: published whole each pass as arrays (a queue of ten thousand jobs
    would otherwise cost the loop a dict of ten thousand entries a pass, where a
    listing reads a page of them). Read-only."""

    def __init__(self, jobs: np.ndarray, seconds: np.ndarray, sources: Mapping[int, str]) -> None:
        order = np.argsort(jobs, kind="stable")
        self._jobs = jobs[order]
        self._seconds = seconds[order]
        self._sources = dict(sources)
        """The jobs whose figure is not the default (the few the loop keeps a record of)."""

    def __getitem__(self, job: int) -> tuple[float, str]:
        found = self.pick([job])
        if not found:
            raise KeyError(job)
        return found[job]

    def __iter__(self) -> Iterator[int]:
        return iter(self._jobs.tolist())

    def __len__(self) -> int:
        return len(self._jobs)

    def pick(self, jobs: list[int]) -> dict[int, tuple[float, str]]:
        """The entries of those of ``jobs`` it has, looked up together (a listing's
        ten thousand jobs: one search, not one each)."""
        if not jobs or not len(self._jobs):
            return {}
        wanted = np.asarray(jobs, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._jobs, wanted), len(self._jobs) - 1)
        found = self._jobs[at] == wanted
        sources = self._sources
        return {
            job: (seconds, sources.get(job, "default"))
            for job, seconds in zip(
                wanted[found].tolist(), self._seconds[at[found]].tolist(), strict=True
            )
        }


NO_WORK_LEFT = WorkLeft(np.zeros(0, dtype=np.int64), np.zeros(0), {})


@dataclass(frozen=True)
class Answers:
    """What the loop tells running jobs in their heartbeats' answers, as of its last pass."""

    batch_sizes: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    """Job -> the global batch size its policy set (Pollux)."""
    memory_caps: Mapping[int, float | None] = field(default_factory=lambda: MappingProxyType({}))
    """Job -> the share of GPU memory it may use now (opportunistic jobs, and jobs
    upgraded from opportunistic, whose cap is lifted)."""
    remaining: WorkLeft = field(default_factory=lambda: NO_WORK_LEFT)
    """Job the loop holds -> the seconds of work its policy believes it has left, and
    where the figure comes from (only finite figures): what listings and a job's
    page show."""
    sharers: Mapping[int, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    """GPU -> the jobs on it: its holder, then any job packed on the holder."""

    @classmethod
    def of(
        cls,
        batch_sizes: Mapping[int, int],
        memory_caps: Mapping[int, float | None],
        remaining: WorkLeft = NO_WORK_LEFT,
        sharers: Mapping[int, tuple[int, ...]] | None = None,
    ) -> Answers:
        return cls(
            MappingProxyType(dict(batch_sizes)),
            MappingProxyType(dict(memory_caps)),
            remaining,
            MappingProxyType(dict(sharers or {})),
        )
