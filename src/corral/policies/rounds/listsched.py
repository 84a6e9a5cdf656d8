"""List scheduling of round-based jobs: the greedy every round planner shares.

Jobs are taken in a given order; each of a job's remaining rounds is placed
in turn, its tasks ready when the previous round ends. Three placements:

* ``tasks`` (Hare): each task goes to the GPU where it would *finish*
  earliest, whatever its type and whenever it is free (a GPU that just ran the
  same job pays no switch);
* ``gang-type`` (Sched_Allox): all tasks of a round start together on GPUs
  of one type, the type where the round ends earliest;
* ``gang-any`` (Sched_Homo): all tasks start together on the GPUs free
  earliest, whatever their types; the round lasts as long as its slowest task.

GPU availability only moves forward (no back-filling of gaps), as in Hare's
greedy.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from corral.policies.rounds.workload import RoundWorkload

MODES = ("tasks", "gang-type", "gang-any")


@dataclass(slots=True)
class Task:
    job: int
    round: int
    gpu: int
    start: float
    end: float
    switch: float
    """Seconds of the task's time spent switching the GPU to this job."""


@dataclass
class PlanView:
    """What a planner sees when it is asked to (re-)plan at ``now``."""

    now: float
    jobs: np.ndarray
    """Unfinished jobs that have arrived."""
    next_round: np.ndarray
    placed_in_round: np.ndarray
    """Tasks of ``next_round`` already running or done."""
    ready: np.ndarray
    """When the job's next round may start (its previous round's end, or now)."""
    partial_end: np.ndarray
    """Latest end of the tasks of ``next_round`` already placed (-inf: none)."""
    prev_gpus: list[list[int]]
    gpu_free: np.ndarray
    gpu_last: np.ndarray
    switch_s: float


class _TypeHeaps:
    """Per-type heaps of (free time, gpu) with lazy deletion.

    Plain lists, not arrays: a planning pass reads and writes single GPUs
    tens of thousands of times, where numpy's per-element cost dominates.
    """

    def __init__(self, free: np.ndarray, gpu_type: np.ndarray, k: int) -> None:
        self.free: list[float] = free.astype(np.float64).tolist()
        self.gpu_type: list[int] = gpu_type.astype(np.int64).tolist()
        self.version = [0] * len(self.free)
        self.heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]
        for g, (at, t) in enumerate(zip(self.free, self.gpu_type, strict=True)):
            self.heaps[t].append((at, g, 0))
        for h in self.heaps:
            heapq.heapify(h)

    def top(self, t: int, count: int = 1) -> list[int]:
        """The ``count`` earliest-free GPUs of type ``t`` (fewer if it has fewer)."""
        heap = self.heaps[t]
        version = self.version
        if count == 1:  # the common case: drop stale entries at the top, then peek
            while heap and heap[0][2] != version[heap[0][1]]:
                heapq.heappop(heap)
            return [heap[0][1]] if heap else []
        out: list[tuple[float, int, int]] = []
        while heap and len(out) < count:
            entry = heapq.heappop(heap)
            if entry[2] == version[entry[1]]:
                out.append(entry)
        for entry in out:
            heapq.heappush(heap, entry)
        return [g for _, g, _ in out]

    def set(self, gpu: int, free: float) -> None:
        self.free[gpu] = free
        self.version[gpu] += 1
        heapq.heappush(self.heaps[self.gpu_type[gpu]], (free, gpu, self.version[gpu]))


def list_schedule(
    work: RoundWorkload, view: PlanView, order: np.ndarray | list[int], mode: str
) -> list[Task]:
    if mode not in MODES:
        raise ValueError(f"unknown list-scheduling mode '{mode}'")
    k = len(work.type_names)
    heaps = _TypeHeaps(view.gpu_free.copy(), work.gpu_type, k)
    last: list[int] = view.gpu_last.astype(np.int64).tolist()
    free, gpu_type = heaps.free, heaps.gpu_type
    pos = {int(j): p for p, j in enumerate(view.jobs.tolist())}
    out: list[Task] = []
    switch = view.switch_s
    for j in order:
        j = int(j)
        p = pos[j]
        r = int(view.next_round[p])
        placed = int(view.placed_in_round[p])
        ready = max(float(view.ready[p]), view.now)
        round_end = float(view.partial_end[p])
        prev = list(view.prev_gpus[p])
        tau_list: list[float] = work.tau[j].tolist()
        types = [t for t in range(k) if np.isfinite(tau_list[t])]
        g = int(work.tasks[j])
        while r < work.rounds[j]:
            used: list[int] = []
            if mode == "tasks":
                for _ in range(g - placed):
                    cands = set(prev)
                    for t in types:
                        cands.update(heaps.top(t))
                    best: tuple[float, float, int] | None = None
                    for gpu in cands:
                        sw = 0.0 if last[gpu] == j else switch
                        fin = max(free[gpu], ready) + sw + tau_list[gpu_type[gpu]]
                        key = (fin, sw, gpu)
                        if best is None or key < best:
                            best = key
                    assert best is not None
                    fin, sw, gpu = best
                    out.append(Task(j, r, gpu, fin - sw - tau_list[gpu_type[gpu]], fin, sw))
                    heaps.set(gpu, fin)
                    last[gpu] = j
                    used.append(gpu)
                    round_end = max(round_end, fin)
            else:
                gang = _choose_gang(heaps, last, j, g, ready, switch, mode, tau_list, types)
                start = max(ready, max(heaps.free[x] for x in gang))
                length = max(tau_list[gpu_type[x]] for x in gang)
                sw = switch if any(last[x] != j for x in gang) else 0.0
                for gpu in gang:
                    out.append(Task(j, r, gpu, start, start + sw + length, sw))
                    heaps.set(gpu, start + sw + length)
                    last[gpu] = j
                used = gang
                round_end = max(round_end, start + sw + length)
            ready = round_end
            round_end = -np.inf
            prev = used
            placed = 0
            r += 1
    return out


def _choose_gang(
    heaps: _TypeHeaps,
    last: list[int],
    j: int,
    g: int,
    ready: float,
    switch: float,
    mode: str,
    tau_list: list[float],
    types: list[int],
) -> list[int]:
    """The GPUs one synchronised round of job ``j`` takes (``tau_list``: its task
    time per GPU type; ``types``: the types it can run on)."""
    options: list[list[int]] = []
    if mode == "gang-type":
        for t in types:
            gpus = heaps.top(t, g)
            if len(gpus) == g:
                options.append(gpus)
    if not options:  # gang-any, or wider than every type: the earliest-free GPUs anywhere
        pool = [x for t in types for x in heaps.top(t, g)]
        pool.sort(key=lambda x: (heaps.free[x], x))
        options.append(pool[:g])
    best: tuple[float, int] | None = None
    for idx, gang in enumerate(options):
        start = max(ready, max(heaps.free[x] for x in gang))
        sw = switch if any(last[x] != j for x in gang) else 0.0
        fin = start + sw + max(tau_list[heaps.gpu_type[x]] for x in gang)
        if best is None or (fin, idx) < best:
            best = (fin, idx)
    assert best is not None
    return options[best[1]]
