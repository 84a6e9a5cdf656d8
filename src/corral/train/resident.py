"""Jobs kept resident in a warm worker between their attempts.

A job preempted in a warm worker (:mod:`corral.runtime.execution.warm_worker`)
checkpoints as anywhere, since it may start next on another GPU. But if its
next attempt comes back to the same worker and its checkpoint is still the one
it wrote there, nothing needs rebuilding or reading: its model and optimiser
are still in the worker's memory. So a stopped job's task is kept (its GPU
tensors parked in pinned host memory, the GPU's memory left to the caching
allocator for the next job), and taken back by its next attempt, whose
tensors are copied in layer group by layer group while its first step
computes (:class:`corral.train.residency.Mover`), with the random-number
state it stopped with. The checkpoint is recognised by its file's size and
modification time: if the job ran anywhere else meanwhile it is newer, and
the job starts from it as usual. A worker keeps at most :data:`KEPT` jobs,
the most recently stopped.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.train import checkpoint

KEPT = 4
"""Jobs a warm worker keeps resident (least recently stopped dropped first)."""


@dataclass
class Resident:
    task: Any
    step: int
    rng: dict[str, Any]
    stamp: tuple[int, int] | None
    parked: Any = None
    """The task's tensors in host memory (on a GPU), to copy back in."""
    mover: Any = None
    """The worker's mover for that GPU (its copy streams)."""


_kept: OrderedDict[str, Resident] = OrderedDict()


def _stamp(folder: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(folder / checkpoint.FILE_NAME)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def _gpu_mover(objects: dict[str, Any]) -> Any:
    """The worker's mover for its GPU, when the task's state is on one."""
    from corral.train.residency import device_of, worker_mover

    device = device_of(objects)
    return None if device is None else worker_mover(device)


def keep(key: str, task: Any, step: int, folder: Path, host: Any = None) -> None:
    """Keep a stopped job's task (its checkpoint at ``step`` just written in ``folder``);
    ``host``: the pinned host copy its last load made, which parking reuses."""
    resident = Resident(task, step, checkpoint.rng_state(), _stamp(folder))
    mover = _gpu_mover(task.objects)
    if mover is not None:
        resident.parked, resident.mover = mover.park(task.objects, host), mover
        mover.settle()
    _kept[key] = resident
    _kept.move_to_end(key)
    while len(_kept) > KEPT:
        _kept.popitem(last=False)


def take(key: str, folder: Path) -> Resident | None:
    """The job's resident task if its checkpoint is still the one it left (removed
    from the kept ones either way: a job comes back once)."""
    resident = _kept.pop(key, None)
    if resident is None or resident.stamp is None or resident.stamp != _stamp(folder):
        return None
    return resident


def bring_back(resident: Resident) -> None:
    """The job's RNG state as it stopped, and its tensors copied back to the GPU,
    pipelined with its next step."""
    checkpoint.set_rng_state(resident.rng)
    if resident.parked is not None:
        resident.mover.load(resident.parked, resident.task.objects)


def clear() -> None:
    _kept.clear()
