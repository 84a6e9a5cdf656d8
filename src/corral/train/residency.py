"""Moving a job's tensors between the GPU and pinned host memory, fast.

A warm switch on a GPU is bounded by moving state: the outgoing job's
parameters, buffers and optimiser state leave the device, the incoming
job's arrive. Three of the seed systems' ideas make that cheap, and this
module holds them:

- **One host copy per job, pinned, allocated once** (PipeSwitch's unified
  memory management). A job's tensors are packed densely into *chunks*:
  runs of whole tensors of one dtype, in the order the model's modules are
  registered, about a sixteenth of the job each. A chunk is one allocation
  on the device and one slice of the job's pinned host buffer, so moving it
  is one asynchronous copy, and the job's tensors are views into it (made
  for a whole chunk in one call). Tensors keep their identity: only their
  ``.data`` is pointed elsewhere, so optimisers, hooks and autograd's
  version counters see the same objects.
- **Early cleaning** (Hare). The outgoing job's chunks are copied out on
  their own stream; each chunk's device memory is handed back to the
  allocator as soon as its copy is queued (``record_stream`` keeps it from
  being reused before the copy ends), not when the whole job has left.
- **Pipelined transfer** (PipeSwitch). The incoming job's chunks are copied
  in on another stream, each followed by an event. A module waits, just
  before its forward, only for the chunk that holds its own weights, so the
  first layers compute while later ones are still in flight; the optimiser
  waits for the last chunk (its state) before its step. With
  ``pipeline=False`` the compute stream waits for the whole job instead: the
  plain whole-model copy PipeSwitch compares against.

The order of modules is taken as the order of forward computation, which
holds for the sequential models this library ships and for most others. A
task whose forward reads a *later* module's weights before that module runs
should switch with ``pipeline=False``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._utils import _unflatten_dense_tensors

ALIGN = 256
"""Byte alignment of each chunk in the host buffer."""
GROUPS = 16
"""About how many chunks a job is cut into (PipeSwitch's transmission groups)."""
MIN_CHUNK = 1 << 20


Entry = tuple[torch.Tensor, torch.nn.Module | None]
"""A tensor of a job's state and the module whose forward first needs it (None for
optimiser state)."""


@dataclass(frozen=True)
class Chunk:
    """A run of same-dtype tensors, packed densely: where it starts in the host buffer."""

    dtype: torch.dtype
    start: int
    """Byte offset in the host buffer (aligned)."""
    numel: int
    first: int
    """Index of its first tensor in the job's entries; it holds ``count`` of them."""
    count: int

    @property
    def nbytes(self) -> int:
        return self.numel * _itemsize(self.dtype)


def plan_chunks(tensors: list[torch.Tensor], groups: int = GROUPS) -> list[Chunk]:
    """Cut tensors, kept in order, into same-dtype chunks of about 1/groups of the total."""
    total = sum(t.numel() * t.element_size() for t in tensors)
    limit = max(MIN_CHUNK, -(-total // max(groups, 1)))
    chunks: list[Chunk] = []
    start = first = numel = 0
    dtype: torch.dtype | None = None
    for index, tensor in enumerate(tensors):
        size = tensor.numel() * tensor.element_size()
        if dtype is not None and (
            tensor.dtype != dtype or (numel > 0 and (numel * _itemsize(dtype) + size > limit))
        ):
            chunks.append(Chunk(dtype, start, numel, first, index - first))
            start = _aligned(start + numel * _itemsize(dtype))
            first, numel = index, 0
        dtype = tensor.dtype
        numel += tensor.numel()
    if dtype is not None:
        chunks.append(Chunk(dtype, start, numel, first, len(tensors) - first))
    return chunks


def host_bytes(chunks: list[Chunk]) -> int:
    return chunks[-1].start + chunks[-1].nbytes if chunks else 0


def host_chunk(buffer: torch.Tensor, chunk: Chunk) -> torch.Tensor:
    """A chunk's bytes in the host buffer, typed as its tensors."""
    return buffer[chunk.start : chunk.start + chunk.nbytes].view(chunk.dtype)


def views(flat: torch.Tensor, templates: list[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors shaped as ``templates``, as views of ``flat`` (one chunk), made in one call."""
    return list(_unflatten_dense_tensors(flat, templates))


def state_tensors(objects: dict[str, Any]) -> list[Entry]:
    """A job's tensors in forward order: those of an odd dtype first (BatchNorm's
    counts), then each module's own parameters (and gradients) and buffers, then
    the optimisers' state."""
    entries: list[Entry] = []
    for obj in objects.values():
        if isinstance(obj, torch.nn.Module):
            for module in obj.modules():
                for param in module._parameters.values():
                    if param is not None:
                        entries.append((param, module))
                        if param.grad is not None:
                            entries.append((param.grad, module))
                for buf in module._buffers.values():
                    if buf is not None:
                        entries.append((buf, module))
    for obj in objects.values():
        if isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor) and value.dim() > 0:
                        entries.append((value, None))
    weight: Counter[torch.dtype] = Counter()
    for tensor, _ in entries:
        weight[tensor.dtype] += tensor.numel() * tensor.element_size()
    if len(weight) > 1:
        main = weight.most_common(1)[0][0]
        odd = sorted((e for e in entries if e[0].dtype != main), key=lambda e: str(e[0].dtype))
        entries = odd + [e for e in entries if e[0].dtype == main]
    return entries


@dataclass
class HostCopy:
    """A job's state parked in pinned host memory, and what its last load left on the
    device, so the next park can copy whole chunks out without repacking."""

    entries: list[Entry]
    chunks: list[Chunk]
    buffer: torch.Tensor
    host_views: list[torch.Tensor]
    copied: torch.cuda.Event | None = None
    """Recorded when the copy out ends (None: packed on the host, nothing in flight)."""
    on_device: list[torch.Tensor] = field(default_factory=list)
    """While loaded: the device chunks the job's tensors are views of."""
    pointers: list[int] = field(default_factory=list)
    """While loaded: each tensor's device address, to see that none was replaced."""
    hooked: list[tuple[torch.nn.Module, int]] | None = None
    """The modules a pipelined load makes wait, and for which chunk."""


@dataclass
class Mover:
    """Moves jobs' state on and off one GPU on two copy streams."""

    device: torch.device
    pipeline: bool = True
    groups: int = GROUPS
    out_stream: torch.cuda.Stream = field(init=False)
    in_stream: torch.cuda.Stream = field(init=False)
    _hooks: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out_stream = torch.cuda.Stream(self.device)
        self.in_stream = torch.cuda.Stream(self.device)

    def pack(self, objects: dict[str, Any]) -> HostCopy:
        """A job built on the host, packed into pinned memory ready to load (its first)."""
        return pack_on_host(objects, self.groups)

    @torch.no_grad()
    def park(self, objects: dict[str, Any], cached: HostCopy | None) -> HostCopy:
        """Copy a job's state out to pinned host memory (reusing its host buffer when it
        fits) and release its device memory chunk by chunk; returns at once."""
        self.release_hooks()
        entries = state_tensors(objects)
        self.out_stream.wait_stream(torch.cuda.current_stream(self.device))  # its last step
        self.out_stream.wait_stream(self.in_stream)  # and its arrival, if it never ran
        if cached is not None and cached.on_device and _unchanged(entries, cached):
            parked = cached  # every tensor is still where the last load put it
            with torch.cuda.stream(self.out_stream):
                for chunk, data in zip(parked.chunks, parked.on_device, strict=True):
                    host_chunk(parked.buffer, chunk).copy_(data, non_blocking=True)
                    data.record_stream(self.out_stream)  # early cleaning: free once copied
        else:
            parked = _repack(entries, cached, self.groups)
            with torch.cuda.stream(self.out_stream):
                for (tensor, _), host in zip(entries, parked.host_views, strict=True):
                    host.copy_(tensor, non_blocking=True)
                    if tensor.is_cuda:
                        tensor.record_stream(self.out_stream)
        for (tensor, _), host in zip(parked.entries, parked.host_views, strict=True):
            tensor.data = host
        parked.on_device, parked.pointers = [], []
        parked.copied = torch.cuda.Event()
        parked.copied.record(self.out_stream)
        return parked

    @torch.no_grad()
    def load(self, parked: HostCopy, objects: dict[str, Any]) -> None:
        """Copy a parked job's state in, chunk by chunk; with pipelining, each module's
        forward waits only for its own chunk; otherwise compute waits for all of it."""
        self.release_hooks()
        compute = torch.cuda.current_stream(self.device)
        self.in_stream.wait_stream(compute)  # memory freed by compute is reused in order
        if parked.copied is not None:
            self.in_stream.wait_event(parked.copied)  # the host copy is complete
        data = [torch.empty(c.numel, dtype=c.dtype, device=self.device) for c in parked.chunks]
        ready = []
        with torch.cuda.stream(self.in_stream):
            for chunk, on_device in zip(parked.chunks, data, strict=True):
                on_device.copy_(host_chunk(parked.buffer, chunk), non_blocking=True)
                on_device.record_stream(self.in_stream)
                event = torch.cuda.Event()
                event.record(self.in_stream)
                ready.append(event)
        pointers = []
        for chunk, on_device in zip(parked.chunks, data, strict=True):
            span = slice(chunk.first, chunk.first + chunk.count)
            for (tensor, _), placed in zip(
                parked.entries[span], views(on_device, parked.host_views[span]), strict=True
            ):
                tensor.data = placed
                pointers.append(placed.data_ptr())
        parked.on_device, parked.pointers = data, pointers
        if not self.pipeline or not ready:
            compute.wait_stream(self.in_stream)
            return
        for module, chunk_index in _hooked(parked):
            self._hooks.append(module.register_forward_pre_hook(_waiter(ready[chunk_index])))
        last = _waiter(ready[-1])
        for obj in objects.values():
            if isinstance(obj, torch.optim.Optimizer):
                self._hooks.append(obj.register_step_pre_hook(last))

    def release_hooks(self) -> None:
        """Drop the waits a pipelined load installed (they are only needed once)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()

    def settle(self) -> None:
        """Make the compute stream wait for every copy queued so far (before reading
        state outside a step: a checkpoint, a comparison)."""
        compute = torch.cuda.current_stream(self.device)
        compute.wait_stream(self.in_stream)
        compute.wait_stream(self.out_stream)
        compute.synchronize()


_worker_mover: Mover | None = None


def worker_mover(device: torch.device) -> Mover:
    """This process's mover for its GPU (one pair of copy streams per worker, shared by
    a job's first load and its returns)."""
    global _worker_mover
    if _worker_mover is None or _worker_mover.device != device:
        _worker_mover = Mover(device)
    return _worker_mover


def load_first(objects: dict[str, Any], device: torch.device) -> HostCopy:
    """A job built and restored on the host, onto its GPU pipelined with its first step
    (PipeSwitch's per-layer-group transfer, as when it comes back to a warm worker):
    packed into pinned memory, then copied in chunk by chunk, each module's forward
    waiting only for its own chunk. Returns the host copy, reusable when it is parked."""
    mover = worker_mover(device)
    parked = mover.pack(objects)
    mover.load(parked, objects)
    return parked


def device_of(objects: dict[str, Any]) -> torch.device | None:
    """The GPU a job's state lies on, or None when it is on the host."""
    for tensor, _ in state_tensors(objects):
        if tensor.is_cuda:
            return tensor.device
    return None


@dataclass
class Suspension:
    """A paused job's state parked in host memory (Gandiva's suspend), kept between
    pauses so the next one reuses its pinned buffer and copy streams."""

    mover: Mover
    parked: HostCopy | None = None

    def suspend(self, objects: dict[str, Any]) -> None:
        """Park the job's tensors in host memory and give its GPU memory back (the
        copy is complete when this returns: the process is about to stop)."""
        self.parked = self.mover.park(objects, self.parked)
        self.mover.settle()
        torch.cuda.empty_cache()

    def resume(self, objects: dict[str, Any]) -> None:
        """Bring the tensors back, pipelined with the next step."""
        if self.parked is not None:
            self.mover.load(self.parked, objects)


def place(objects: dict[str, Any], device: torch.device | str) -> None:
    """Move a job's modules and optimiser state to ``device`` in one plain pass: how a
    job started cold gets onto its GPU (nothing to overlap with yet)."""
    for obj in objects.values():
        if isinstance(obj, torch.nn.Module):
            obj.to(device)
    for tensor, module in state_tensors(objects):
        if module is None:
            tensor.data = tensor.data.to(device)


@torch.no_grad()
def pack_on_host(objects: dict[str, Any], groups: int = GROUPS) -> HostCopy:
    """Pack a job's host tensors into its host buffer (pinned where there is a GPU): from
    here on each tensor is a view of it."""
    parked = _repack(state_tensors(objects), None, groups)
    for (tensor, _), host in zip(parked.entries, parked.host_views, strict=True):
        host.copy_(tensor)
        tensor.data = host
    return parked


def _repack(entries: list[Entry], cached: HostCopy | None, groups: int) -> HostCopy:
    """A new layout for the job's tensors as they are now, in its old host buffer if
    that is large enough (after any copy still reading it has ended)."""
    tensors = [tensor for tensor, _ in entries]
    chunks = plan_chunks(tensors, groups)
    nbytes = host_bytes(chunks)
    if cached is not None and cached.buffer.numel() >= nbytes:
        if cached.copied is not None:
            cached.copied.synchronize()
        buffer = cached.buffer
    else:
        pinned = torch.cuda.is_available()  # page-locked, so copies to the GPU are asynchronous
        buffer = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=pinned)
    host_views: list[torch.Tensor] = []
    for chunk in chunks:
        templates = tensors[chunk.first : chunk.first + chunk.count]
        host_views.extend(views(host_chunk(buffer, chunk), templates))
    return HostCopy(entries, chunks, buffer, host_views)


def _unchanged(entries: list[Entry], cached: HostCopy) -> bool:
    """Whether the job has exactly the tensors its last load placed, where it placed
    them (none added, none given new memory)."""
    return len(entries) == len(cached.entries) and all(
        tensor is old and tensor.data_ptr() == pointer
        for (tensor, _), (old, _), pointer in zip(
            entries, cached.entries, cached.pointers, strict=True
        )
    )


def _hooked(parked: HostCopy) -> list[tuple[torch.nn.Module, int]]:
    """Where a pipelined load makes compute wait: the first module (in forward order)
    needing each later chunk. Waits are in stream order, so a module after it that
    needs no later chunk is covered."""
    if parked.hooked is None:
        needs: dict[torch.nn.Module, int] = {}
        for chunk_index, chunk in enumerate(parked.chunks):
            for _, module in parked.entries[chunk.first : chunk.first + chunk.count]:
                if module is not None:
                    needs[module] = max(needs.get(module, 0), chunk_index)
        weight: Counter[torch.dtype] = Counter()
        for chunk in parked.chunks:
            weight[chunk.dtype] += chunk.nbytes
        main = weight.most_common(1)[0][0]  # odd dtypes were packed first, out of order
        order: dict[torch.nn.Module, int] = {}
        for tensor, module in parked.entries:
            if module is not None and tensor.dtype == main and module not in order:
                order[module] = len(order)
        parked.hooked, covered = [], -1
        for module in sorted(needs, key=lambda m: order.get(m, -1)):
            if needs[module] > covered:
                parked.hooked.append((module, needs[module]))
                covered = needs[module]
    return parked.hooked


def _waiter(event: torch.cuda.Event) -> Callable[..., None]:
    def wait(*_: Any) -> None:
        torch.cuda.current_stream().wait_event(event)

    return wait


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
