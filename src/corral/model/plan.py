"""What a policy returns: the seam between deciding and doing.

A :class:`Plan` says which jobs must stop and which must start on which GPUs
(explicit GPU ids); every other running job keeps its GPUs. The simulator and
the live service diff nothing themselves: they carry the plan out (preempt,
start, migrate = stop + start on other GPUs) and ask again at ``next_wakeup``
or at the next event, whichever comes first. A wake-up at or before the pass's
own instant (``now + x`` rounds to ``now`` when ``x`` is tiny beside ``now``)
means the next event: both engines read it so (:func:`upcoming`) rather than
fail the run or pass again at the same instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from corral.model.free_gpus import FreeGPUs


class PlanError(RuntimeError):
    """A plan an engine cannot carry out: a policy's error (the simulator stops the
    run on it; the live loop leaves the job waiting and records why)."""


class Directive(StrEnum):
    """A system-specific part of a plan, beside its core (starts, stops, wake-up):
    what one system's policy asks an engine to carry out or to model. Each engine
    says, for each it supports, what it does with it (``SIM_DIRECTIVES`` in
    ``corral.sim.engine``, ``LIVE_DIRECTIVES`` in the live loop's scheduler); a
    plan with one its engine does not
    support is refused as a whole (:func:`corral.model.apply_plan.apply_plan`)."""

    PACKS = "packs"
    TIMESLICES = "timeslices"
    RESPEEDS = "respeeds"
    FACTORS = "factors"
    LOW_PRIORITY = "low_priority"
    BATCH_SIZES = "batch_sizes"
    OVERHEADS = "overheads"
    PRESTAGE = "prestage"


DIRECTIVES: tuple[Directive, ...] = tuple(Directive)
"""Every directive, in the plan's field order."""


@dataclass
class Plan:
    starts: dict[int, tuple[int, ...]] = field(default_factory=dict)
    stops: list[int] = field(default_factory=list)
    next_wakeup: float | None = None
    packs: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    """Starts that share a running job's GPUs: guest -> (host, guest speed
    factor, host speed factor), the factors being the pair's measured
    throughputs relative to each job alone."""
    timeslices: dict[int, float] = field(default_factory=dict)
    """Shared GPU sets whose two jobs take turns instead of running at once:
    guest -> quantum (seconds). The simulator runs such a pair at the averaged
    rate its ``packs`` or ``respeeds`` give; the live service alternates the
    two, suspending one and resuming the other at each quantum boundary."""
    respeeds: dict[int, float] = field(default_factory=dict)
    """Running jobs whose speed changes: factor relative to their speed alone
    (e.g. a packed pair found not to help, now time-sliced instead)."""
    factors: dict[int, float] = field(default_factory=dict)
    """Speed multipliers of started jobs (e.g. a job grown onto more GPUs)."""
    low_priority: dict[int, float] = field(default_factory=dict)
    """Starts that run at low priority (AntMan's opportunistic jobs) -> the
    fraction of each GPU's memory they may use: the live service lowers their
    OS priority and passes the cap on; the simulator needs nothing more (their
    speeds come with ``packs``)."""
    batch_sizes: dict[int, int] = field(default_factory=dict)
    """Jobs whose global batch size the policy sets (Pollux), started or running:
    the live service passes it at launch (``CORRAL_BATCH_SIZE``) and in
    heartbeat answers, and a job that accepts it trains at it from its next
    step; the simulator's speeds already account for it (``factors``)."""
    overheads: dict[int, float] = field(default_factory=dict)
    """Seconds a start costs instead of the engine's switch cost (e.g. a migration)."""
    prestage: list[int] = field(default_factory=list)
    """Waiting jobs whose inputs start staging now, ahead of their start (Liquid's
    pre-scheduling): the live service runs their ``stage`` command; the simulator
    needs nothing (the policy charges the launch phase left through ``overheads``)."""
    free_after: FreeGPUs | None = None
    """The free GPUs once the plan is carried out, when the plan was built
    against a scratch copy (PlanBuilder does); executors adopt it instead of
    redoing every GPU update."""

    @property
    def empty(self) -> bool:
        return not self.starts and not self.stops

    def directives(self) -> frozenset[Directive]:
        """The system-specific parts this plan uses (those not empty)."""
        return frozenset(d for d in DIRECTIVES if getattr(self, d))

    def drop_start(self, i: int) -> None:
        """Take job ``i``'s start out of the plan, with every directive about that
        start; the plan's free GPUs after it no longer hold (engines recompute)."""
        self.starts.pop(i, None)
        for about_a_start in (
            self.packs, self.factors, self.low_priority, self.overheads, self.timeslices
        ):  # fmt: skip
            about_a_start.pop(i, None)
        self.free_after = None

    def allocations(self, current: Mapping[int, tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
        """The full desired allocation, given what runs now."""
        stopped = set(self.stops)
        out = {job: gpus for job, gpus in current.items() if job not in stopped}
        out.update(self.starts)
        return out


def upcoming(wakeup: float | None, now: float) -> float | None:
    """A plan's wake-up as the engines keep it: None (the next event) when it is
    not after ``now``."""
    return wakeup if wakeup is not None and wakeup > now else None
