"""Jobs a standby worker can switch to warm: the task interface and the worker.

Switching a GPU between jobs by stopping one process and starting another
costs seconds: a new interpreter, importing PyTorch, creating the CUDA
context, building the model and reading its checkpoint from disk. The seed
systems cut that to milliseconds (PipeSwitch's active-standby workers,
Hare's task switching, Gandiva's suspend at an iteration boundary) by
keeping a worker process that has all of that loaded and swapping only the
job's state.

A job opts in by giving a *task factory*: a function (``"module:function"``
plus keyword arguments) that builds a :class:`Task`, meaning the objects
whose state is the job's (model, optimiser: anything with
``state_dict``/``load_state_dict``) and a ``step(n)`` that runs mini-batch
``n`` and returns its loss. Batches must be a function of the step number
(as in :mod:`corral.examples.loop`), so a job switched any number of times
computes exactly what an uninterrupted run computes.

A :class:`WarmWorker` holds several jobs resident in host memory and runs
one at a time. Switching saves the outgoing job's random-number state and
restores the incoming job's; nothing is rebuilt and nothing touches the
disk. On a GPU the outgoing job's tensors are parked in pinned host memory
and the incoming job's come back, pipelined with its first step
(:mod:`corral.train.residency`). A job leaves the
worker with a normal checkpoint (:meth:`WarmWorker.checkpoint`), which any
process can resume.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from corral.train import checkpoint
from corral.train.checkpoint import Stateful

if TYPE_CHECKING:
    from corral.train.residency import HostCopy, Mover


class Task(Protocol):
    """What a warm-switchable job provides."""

    objects: dict[str, Stateful]
    """Everything whose state is the job's (model, optimiser)."""

    def step(self, step: int) -> float:
        """Run mini-batch ``step`` (forward, backward, update); its loss."""


def load_factory(path: str) -> Callable[..., Task]:
    """The function ``module:function`` names (a task factory)."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"'{path}' is not module:function")
    factory = getattr(importlib.import_module(module), name, None)
    if not callable(factory):
        raise ValueError(f"{module} has no function {name}")
    return factory


@dataclass
class Resident:
    """A job held by a worker: its task, its step and its saved RNG state."""

    task: Task
    step: int = 0
    rng: dict[str, Any] | None = None
    on_device: bool = False
    host: HostCopy | None = None
    """On a GPU, the job's pinned host copy (kept, so parking again reuses it)."""


@dataclass
class WarmWorker:
    """A process that keeps jobs loaded and switches between them in place."""

    device: str = "cpu"
    pipeline: bool = True
    """On a GPU, overlap the incoming job's transfer with its first step (PipeSwitch);
    off, the whole job is copied before it computes."""
    jobs: dict[str, Resident] = field(default_factory=dict)
    active: str | None = None
    _mover: Mover | None = field(default=None, repr=False)

    def admit(
        self,
        job: str,
        factory: str | Callable[..., Task],
        resume_from: Path | None = None,
        **kwargs: Any,
    ) -> float:
        """Build a job's task here (once; from its checkpoint if it has one); seconds taken."""
        start = time.perf_counter()
        build = load_factory(factory) if isinstance(factory, str) else factory
        self._park()
        task = build(**kwargs)
        resident = Resident(task, on_device=self.device == "cpu")  # factories build on the host
        payload = checkpoint.load(resume_from) if resume_from is not None else None
        if payload is not None:
            resident.step = checkpoint.restore(payload, task.objects)
        resident.rng = checkpoint.rng_state()  # as the build (or the checkpoint) left it
        self.jobs[job] = resident
        return time.perf_counter() - start

    def switch_to(self, job: str) -> float:
        """Make ``job`` the running one: the outgoing job is parked in host memory with its
        RNG state, the incoming one restored; seconds taken (0 if it already runs)."""
        if job not in self.jobs:
            raise KeyError(f"job {job} is not resident in this worker")
        if self.active == job:
            return 0.0
        start = time.perf_counter()
        self._park()
        incoming = self.jobs[job]
        if not incoming.on_device:
            mover = self.mover()
            parked = incoming.host or mover.pack(incoming.task.objects)
            mover.load(parked, incoming.task.objects)
            incoming.host = parked
            incoming.on_device = True
        if incoming.rng is not None:
            checkpoint.set_rng_state(incoming.rng)
        self.active = job
        return time.perf_counter() - start

    def run(self, steps: int) -> list[float]:
        """Run the active job ``steps`` mini-batches; their losses."""
        if self.active is None:
            raise RuntimeError("no job is active: switch_to one first")
        resident = self.jobs[self.active]
        losses = []
        for _ in range(steps):
            losses.append(float(resident.task.step(resident.step)))
            resident.step += 1
        return losses

    def settle(self) -> None:
        """Wait for every transfer in flight, so all jobs' state can be read."""
        if self._mover is not None:
            self._mover.settle()

    def mover(self) -> Mover:
        """The GPU's copy streams (made on first use; a CPU worker moves nothing)."""
        if self._mover is None:
            import torch

            from corral.train.residency import Mover

            self._mover = Mover(torch.device(self.device), pipeline=self.pipeline)
        return self._mover

    def checkpoint(self, job: str, folder: Path) -> Path:
        """Write a job's checkpoint (to resume it in any process) and drop it from here."""
        self.switch_to(job)
        self.settle()
        resident = self.jobs.pop(job)
        path = checkpoint.save(folder, resident.step, resident.task.objects, {})
        self.active = None
        return path

    def _park(self) -> None:
        if self.active is None:
            return
        self._park_resident(self.jobs[self.active])
        self.active = None

    def _park_resident(self, resident: Resident) -> None:
        resident.rng = checkpoint.rng_state()
        if self.device != "cpu" and resident.on_device:
            resident.host = self.mover().park(resident.task.objects, resident.host)
            resident.on_device = False


def keyword(text: str) -> tuple[str, Any]:
    """A factory's keyword argument, ``NAME=VALUE``, its value read as JSON where it
    parses (numbers, booleans), else kept as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"'{text}': give NAME=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def place_task(task: Task, device: str, pipeline: bool = True) -> HostCopy | None:
    """Run on the job's GPU when it has one (built and restored on the host first). On
    the GPU its state is copied in layer group by layer group while its first step
    computes (PipeSwitch's pipelined load, as a job coming back to a warm worker gets);
    ``pipeline=False`` copies it whole first. Returns the pinned host copy a pipelined
    load made (parking the job again reuses it), else None."""
    import torch

    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        from corral.train.residency import load_first, place

        if pipeline:
            return load_first(task.objects, torch.device("cuda", torch.cuda.current_device()))
        place(task.objects, "cuda")
    return None
