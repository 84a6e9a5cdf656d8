"""What passes between the API's threads and the loop, so only the loop writes its book.

The API never writes the loop's memory: what a heartbeat reports that the loop
needs (a job's GPU memory) is posted to the loop's :class:`Inbox` and read at
the start of the next pass, and what a heartbeat's answer needs from the loop
(a job's batch size, its GPU memory cap) is read from the :class:`Answers` the
loop publishes at the end of each pass: an immutable value swapped whole, so a
reader on another thread never sees one half-made.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class MemoryReport:
    """A job's peak GPU memory per GPU (bytes), as its heartbeat reported it."""

    job: int
    used: float


class Inbox:
    """Reports posted by other threads for the loop, read in the order they came."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[MemoryReport] = queue.SimpleQueue()

    def post(self, report: MemoryReport) -> None:
        self._queue.put(report)

    def take(self) -> list[MemoryReport]:
        """Everything posted since the last take (never blocks)."""
        out: list[MemoryReport] = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out


@dataclass(frozen=True)
class Answers:
    """What the loop tells running jobs in their heartbeats' answers, as of its last pass."""

    batch_sizes: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    """Job -> the global batch size its policy set (Pollux)."""
    memory_caps: Mapping[int, float | None] = field(default_factory=lambda: MappingProxyType({}))
    """Job -> the share of GPU memory it may use now (opportunistic jobs, and jobs
    upgraded from opportunistic, whose cap is lifted)."""

    @classmethod
    def of(cls, batch_sizes: Mapping[int, int], memory_caps: Mapping[int, float | None]) -> Answers:
        return cls(MappingProxyType(dict(batch_sizes)), MappingProxyType(dict(memory_caps)))
