"""What the scheduler loop measures of itself, for ``/metrics``: pass times and GPU states.

The loop owns a Prometheus registry of its own (not the process-wide one:
two services in one process, as in the tests, must not share series). The
API reads it and the GPU snapshot below; nothing here imports the API.

May import: prometheus_client and the loop's own state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Gauge, Histogram

from corral.runtime.execution.executor import GpuSlot

PASS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds: a pass of a few thousand jobs takes milliseconds, a Gavel LP seconds."""
GPU_STATES = ("allocated", "idle", "drained", "lost", "failed")
"""A GPU's state in ``corral_gpus``: lost is on a node the executor lost (a dead Ray
node), drained on a node an admin or a GPU fault took out of service."""


WAIT_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
"""Waits, from a second to a week."""


class LoopMetrics:
    """The loop's registry: ``corral_pass_seconds{policy}``, a histogram of the time
    one scheduling pass takes (the policy's plan and its application), and
    ``corral_loop_last_step_timestamp_seconds``, when the loop last went round (it
    does every tick, with or without a pass: an alert on its age finds a loop that
    is stuck while the API still answers)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.pass_seconds = Histogram(
            "corral_pass_seconds",
            "Time of one scheduling pass (plan and apply), by policy",
            ["policy"],
            buckets=PASS_BUCKETS,
            registry=self.registry,
        )
        self.last_step = Gauge(
            "corral_loop_last_step_timestamp_seconds",
            "When the scheduler loop last went round (Unix time)",
            registry=self.registry,
        )
        self.wait_seconds = Histogram(
            "corral_job_wait_seconds",
            "From a job's submission to its first start (jobs started since the service did)",
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.set_aside = Gauge(
            "corral_jobs_set_aside",
            "Jobs the loop set aside (a record it cannot use, or a fault of the loop's)",
            registry=self.registry,
        )


class GpuBooks(Protocol):
    """What the loop keeps about its GPUs (:class:`~corral.runtime.loop.loop_base.LoopState`)."""

    @property
    def slots(self) -> Sequence[GpuSlot]: ...
    @property
    def holders(self) -> Mapping[int, int]: ...
    @property
    def failed_gpus(self) -> Mapping[int, str]: ...
    @property
    def reserved(self) -> set[int]: ...
    @property
    def usable(self) -> np.ndarray: ...
    @property
    def lost_nodes(self) -> frozenset[str]: ...


def gpu_states(loop: GpuBooks) -> Counter[tuple[str, str]]:
    """GPUs by (type, state): allocated to a job's process, idle, drained (their node
    taken out of service), lost (their node lost by the executor), failed (the
    driver reported a fault). Read from another
    thread: the loop's maps are copied first, and a copy taken while the loop
    changes one is simply taken again."""
    for _ in range(5):
        try:
            holders, failed, reserved = set(loop.holders), set(loop.failed_gpus), set(loop.reserved)
            break
        except RuntimeError:  # changed size during the copy
            continue
    else:
        holders, failed, reserved = set(), set(), set()
    out: Counter[tuple[str, str]] = Counter()
    for slot in loop.slots:  # every state of every type, from the start (0 while none)
        for state in GPU_STATES:
            out[(slot.gpu_type, state)] += 0
    lost = loop.lost_nodes
    for gpu, slot in enumerate(loop.slots):
        if gpu in failed:
            state = "failed"
        elif gpu in holders:
            state = "allocated"
        elif slot.node in lost:
            state = "lost"
        elif gpu in reserved or not loop.usable[gpu]:
            state = "drained"
        else:
            state = "idle"
        out[(slot.gpu_type, state)] += 1
    return out
