"""One scheduling pass of a priority scheduler, shared by SJF, SRTF and LAS.

Jobs are ranked by a key (lower runs first, ties by submit order); the
highest-ranked jobs that fit get the GPUs, skipping jobs that do not fit so
smaller ones behind them can run (work conserving). A preemptive policy also
ranks the running jobs, and stops those that fall out of the chosen set,
except jobs it pins (e.g. LAS' minimum run quantum).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from corral.model.state import SchedulerState
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, greedy_fit

Key = Callable[[np.ndarray], "np.ndarray | tuple[np.ndarray, ...]"]
"""Ranks jobs: one array, or a tuple of arrays compared in order (primary first)."""


def priority_pass(
    state: SchedulerState,
    placement: PlacementStrategy,
    pending_key: Key,
    running_key: Key | None = None,
    pinned: Callable[[np.ndarray], np.ndarray] | None = None,
) -> PlanBuilder:
    """Build the plan of one pass; ``running_key=None`` makes it non-preemptive.

    Given one function as both keys (LAS' attained service, SRTF's remaining
    time), all candidates are keyed in one call.
    """
    builder = PlanBuilder(state)
    pending = state.pending.array()
    if not len(pending):
        return builder
    gpus = state.gpus
    free = state.free.total
    # the ufunc's own method: ndarray.sum adds a Python wrapper, and this runs
    # at every event
    if running_key is None or free >= int(np.add.reduce(gpus[pending])):
        if free == 0:
            return builder
        ranked = _rank(pending, pending_key(pending), state)
        for i in ranked[greedy_fit(gpus[ranked], free)].tolist():
            builder.place(i, placement)
        return builder
    running = state.running.array()
    if pinned is not None:
        pin = pinned(running)
        movable = running[~pin]
        capacity = state.cluster.total_gpus - int(np.add.reduce(gpus[running[pin]]))
    else:
        movable = running
        capacity = state.cluster.total_gpus
    candidates = np.concatenate((movable, pending))
    if running_key is pending_key:
        keys: np.ndarray | tuple[np.ndarray, ...] = running_key(candidates)
    else:
        run_keys, pend_keys = _as_tuple(running_key(movable)), _as_tuple(pending_key(pending))
        if len(run_keys) != len(pend_keys):
            raise ValueError("running and pending keys must have the same number of parts")
        keys = tuple(np.concatenate(pair) for pair in zip(run_keys, pend_keys, strict=True))
    order = _order(candidates, keys, state)
    ranked = candidates[order]
    take = greedy_fit(gpus[ranked], capacity)
    is_pending = order >= len(movable)  # candidates list the movable running jobs first
    for i in ranked[~(take | is_pending)].tolist():
        builder.stop(i)
    for i in ranked[take & is_pending].tolist():
        builder.place(i, placement)
    return builder


def _as_tuple(keys: np.ndarray | tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    return keys if isinstance(keys, tuple) else (keys,)


RESOLUTION = 1e-3
"""Seconds (or GPU-seconds) within which two jobs' keys are the same, for keys in
time (attained service, remaining time): closer values are a tie, broken by
submission order as equal ones are. Float rounding, never a real difference,
separates jobs that ran equal quanta or have equal work left: a trace's times
are single precision, the service's are seconds since its epoch, and the order
of such a pair must not depend on which engine did the sums."""


def tie_resolution(seconds: np.ndarray) -> np.ndarray:
    """A key in seconds, to :data:`RESOLUTION`, for ranking."""
    out: np.ndarray = np.round(seconds / RESOLUTION)
    return out


def on_grid(seconds: np.ndarray) -> np.ndarray:
    """Seconds rounded to :data:`RESOLUTION` (for values compared with each other
    that two engines may sum differently: Gittins' samples and the service they
    are looked up at)."""
    out: np.ndarray = tie_resolution(seconds) * RESOLUTION
    return out


def _rank(
    jobs: np.ndarray, keys: np.ndarray | tuple[np.ndarray, ...], state: SchedulerState
) -> np.ndarray:
    """Jobs sorted by user priority (higher first), then key(s), then index (= submit order)."""
    out: np.ndarray = jobs[_order(jobs, keys, state)]
    return out


def _order(
    jobs: np.ndarray, keys: np.ndarray | tuple[np.ndarray, ...], state: SchedulerState
) -> np.ndarray:
    """The permutation :func:`_rank` applies to ``jobs``."""
    if isinstance(keys, np.ndarray):
        parts: tuple[np.ndarray, ...] = (jobs, keys)
    else:
        parts = (jobs, *reversed(keys))
    if state.tiered:
        parts = (*parts, -state.priority[jobs])
    return np.lexsort(parts)
