"""POP: a large allocation problem as k independent smaller ones (Narayanan et
al., "Solving Large-Scale Granular Resource Allocation Problems Efficiently
with POP", SOSP'21).

Gavel's LPs grow faster than linearly with the jobs present (about n^2.2 with
HiGHS here: 0.1 s at 1,000 jobs, 16 s at 10,000). POP's observation is that in
a *granular* problem (many jobs, each small against the cluster) a random or
balanced split of the jobs into k groups, each given 1/k of every GPU type,
loses little: each group looks like the whole, scaled down. Each part is
solved on its own (side by side, in threads: HiGHS lets go of the interpreter
while it runs) and the allocations are put together; every constraint of the
whole holds, since each part keeps within its 1/k of each type.

How the jobs are split:

* ``balanced`` (the default): jobs sorted by GPUs asked, then by their
  weight (by the GPU-seconds they have left, under min makespan, whose
  objective is a sum of work), dealt out in a snake (1, 2, ..., k, k, ..., 2,
  1, ...), so each part has about the same demand and the same mix of sizes;
* ``random``: a random permutation dealt out in turn (POP's own default),
  from a seed, so a run replays.

The number of parts is chosen from the size (:func:`parts_for`): one part up
to :data:`JOBS_PER_PART` jobs (no change at the sizes the papers measure), then
the next power of two that keeps every part at most that size, and never
more parts than a part keeps a whole gang of the largest size. A policy's
``pop`` option sets it (1: off).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

JOBS_PER_PART = 1000
"""Jobs a part holds at most when the number of parts is chosen from the size."""
SPLITS = ("balanced", "random")
KEPT_SLACK = 0.05
"""How far above an even share of the load a kept split lets a part that is
solved again anyway take a new job, before new jobs go to the lightest part."""
T = TypeVar("T")


def parts_for(jobs: int, capacity: np.ndarray, largest_gang: int, parts: int | None) -> int:
    """How many parts a problem of ``jobs`` jobs is split into.

    ``parts`` as given (None: chosen from the size); never so many that a part's
    share of the largest type holds less than the largest gang, nor more than
    the jobs."""
    if parts is None:
        parts = 1 if jobs <= JOBS_PER_PART else 2 ** math.ceil(math.log2(jobs / JOBS_PER_PART))
    most = int(float(np.max(capacity, initial=0.0)) // max(largest_gang, 1))
    return max(1, min(parts, most, jobs))


def split(
    gpus: np.ndarray,
    weights: np.ndarray,
    parts: int,
    how: str = "balanced",
    seed: int = 0,
    load: np.ndarray | None = None,
) -> list[np.ndarray]:
    """The jobs (row numbers) of each part, each in increasing order. ``balanced``
    deals by ``load`` where given (the policy's measure of a job's demand: the
    GPU-seconds it has left, for min makespan), else by GPUs asked, then weight."""
    n = len(gpus)
    if parts <= 1 or n == 0:
        return [np.arange(n)]
    if how == "random":
        order = np.random.default_rng(seed).permutation(n)
        part = np.arange(n) % parts
    elif how == "balanced":
        if load is not None:
            order = np.lexsort((np.arange(n), -np.asarray(load)))
        else:
            order = np.lexsort((np.arange(n), -np.asarray(weights), -np.asarray(gpus)))
        turn, place = np.divmod(np.arange(n), parts)
        part = np.where(turn % 2 == 0, place, parts - 1 - place)  # a snake
    else:
        raise ValueError(f"POP splits jobs 'balanced' or 'random', not '{how}'")
    return [np.sort(order[part == k]) for k in range(parts)]


def keep_parts(
    part_of: dict[int, int], jobs: np.ndarray, load: np.ndarray, parts: int
) -> list[np.ndarray] | None:
    """The last split carried forward to ``jobs`` (ids; ``load`` each one's demand):
    each job still present stays in its part, and each new one, the heaviest
    first, joins a part that is solved again anyway (one a job left or joined)
    while that keeps it within :data:`KEPT_SLACK` of an even share, else the part
    with the least load. None where the split cannot be kept: the number of
    parts changed, or a part would hold more than a quarter again of an even
    share of the load or of the jobs (the caller splits afresh).

    Why: a part whose jobs are those of the last solve need not be solved again
    (its share of each type is the same 1/k), so a pass after a few arrivals and
    ends re-solves only the parts they touched; a fresh split deals every job
    anew and changes every part."""
    if parts <= 1 or not part_of or max(part_of.values()) >= parts:
        return None
    placed = np.fromiter((part_of.get(j, -1) for j in jobs.tolist()), np.int64, len(jobs))
    kept = placed >= 0
    loads = np.bincount(placed[kept], weights=load[kept], minlength=parts).astype(float)
    counts = np.bincount(placed[kept], minlength=parts)
    before = np.bincount(np.fromiter(part_of.values(), np.int64), minlength=parts)
    touched = counts < before  # a job left: solved again
    even_load = float(np.sum(load)) / parts
    for r in sorted(np.flatnonzero(~kept).tolist(), key=lambda r: (-load[r], r)):
        room = touched & (loads + load[r] <= even_load * (1 + KEPT_SLACK))
        pool = np.flatnonzero(room) if room.any() else np.arange(parts)
        k = int(pool[np.lexsort((pool, counts[pool], loads[pool]))[0]])
        placed[r] = k
        loads[k] += load[r]
        counts[k] += 1
        touched[k] = True
    even_count = len(jobs) / parts
    if counts.min() == 0 or loads.max() > 1.25 * even_load or counts.max() > 1.25 * even_count:
        return None
    return [np.flatnonzero(placed == k) for k in range(parts)]


def solve_parts(
    groups: list[np.ndarray], solve_one: Callable[[np.ndarray], T], threads: int | None = None
) -> list[T]:
    """``solve_one`` of each part, in the parts' order, solved in ``threads`` threads
    (None: as many as the CPUs this process may use, at most the parts)."""
    if threads is None:
        threads = min(len(groups), len(os.sched_getaffinity(0)))
    if threads <= 1 or len(groups) <= 1:
        return [solve_one(group) for group in groups]
    return list(_pool(threads).map(solve_one, groups))


_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    """A pool of ``threads`` threads kept for the process's life: a pass at every
    round paid for starting its threads each time (and each thread for making
    its solver), a tenth of a pass at 10,000 jobs on a busy host. By process id:
    a process forked from one with a pool (a sweep's workers) has none of its
    threads, so it makes its own rather than rely on the copied pool's state."""
    key = (os.getpid(), threads)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(threads, thread_name_prefix="pop")
        return pool
