"""Moving a job's tensors between the GPU and pinned host memory, fast.

A warm switch on a GPU is bounded by moving state: the outgoing job's
parameters, buffers, gradients and optimiser state leave the device, the
incoming job's arrive. Three of the seed systems' ideas make that cheap,
and this module holds them:

- **One host copy per job, pinned, allocated once** (PipeSwitch's unified
  memory management). A job's tensors are packed into *chunks*: runs of
  whole tensors, in the order the model's modules are registered, of about
  ``chunk_bytes`` each. A chunk is one allocation on the device and one
  slice of the job's pinned host buffer, so moving it is one asynchronous
  copy and the tensors are views into it.
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

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

ALIGN = 256
"""Byte alignment of each tensor inside a chunk (any dtype's element size divides it)."""


@dataclass
class TensorRef:
    """One tensor of a job's state, and how to put a new tensor in its place."""

    get: Callable[[], torch.Tensor | None]
    set: Callable[[torch.Tensor], None]
    module: torch.nn.Module | None
    """The module whose forward first needs it; None for optimiser state."""


@dataclass(frozen=True)
class Slot:
    """Where one tensor lies in the packed layout."""

    chunk: int
    offset: int
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return _numel(self.shape) * _itemsize(self.dtype)


@dataclass
class Layout:
    """Chunks (their sizes in bytes, their start in the host buffer) and each tensor's slot."""

    slots: list[Slot]
    chunk_sizes: list[int]
    chunk_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        start, self.chunk_starts = 0, []
        for size in self.chunk_sizes:
            self.chunk_starts.append(start)
            start += size

    @property
    def nbytes(self) -> int:
        return sum(self.chunk_sizes)


def plan_layout(tensors: list[torch.Tensor], chunk_bytes: int) -> Layout:
    """Pack tensors, in order, into chunks of whole tensors of about ``chunk_bytes``
    (a tensor larger than that has a chunk of its own)."""
    slots: list[Slot] = []
    sizes: list[int] = []
    used = 0
    for tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if not sizes or (used > 0 and used + nbytes > chunk_bytes):
            sizes.append(0)
            used = 0
        slots.append(Slot(len(sizes) - 1, used, tensor.dtype, tuple(tensor.shape)))
        used += _aligned(nbytes)
        sizes[-1] = used
    return Layout(slots, sizes)


def view(buffer: torch.Tensor, slot: Slot) -> torch.Tensor:
    """The tensor ``slot`` describes, lying in a chunk's bytes (uint8).

    Not an autograd view of the chunk: views of one base share a version
    counter, so BatchNorm updating its running mean in place would look like a
    change to every weight of the chunk saved for the backward pass. A tensor
    set onto the same storage has a counter of its own."""
    tensor = torch.empty(0, dtype=slot.dtype, device=buffer.device)
    stride, step = [], 1
    for size in reversed(slot.shape):
        stride.append(step)
        step *= size
    start = buffer.storage_offset() + slot.offset
    tensor.set_(buffer.untyped_storage(), start // tensor.element_size(), slot.shape, stride[::-1])
    return tensor


def state_tensors(objects: dict[str, Any]) -> list[TensorRef]:
    """A job's tensors in forward order: each module's own parameters (and their
    gradients) and buffers, then the optimisers' state."""
    refs: list[TensorRef] = []
    for obj in objects.values():
        if isinstance(obj, torch.nn.Module):
            for module in obj.modules():
                refs.extend(_module_tensors(module))
    for obj in objects.values():
        if isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for key, value in state.items():
                    if torch.is_tensor(value) and value.dim() > 0:
                        refs.append(TensorRef(_item(state, key), _put(state, key), None))
    return refs


@dataclass
class HostCopy:
    """A job's state parked in pinned host memory, and what its last load left on the
    device, so the next park can copy whole chunks out without repacking."""

    layout: Layout
    buffer: torch.Tensor
    refs: list[TensorRef]
    host_views: list[torch.Tensor]
    copied: torch.cuda.Event | None = None
    """Recorded when the copy out ends (None: packed on the host, nothing in flight)."""
    chunks: list[torch.Tensor] = field(default_factory=list)
    """While loaded: the device chunks, whose storage the job's tensors lie in."""
    pointers: list[int] = field(default_factory=list)
    """While loaded: each tensor's device address, to see that none was replaced."""
    waits: dict[torch.nn.Module, int] | None = None
    """Each module's last chunk: what its forward waits for in a pipelined load."""


@dataclass
class Mover:
    """Moves jobs' state on and off one GPU on two copy streams."""

    device: torch.device
    pipeline: bool = True
    chunk_bytes: int = 4 << 20
    out_stream: torch.cuda.Stream = field(init=False)
    in_stream: torch.cuda.Stream = field(init=False)
    _hooks: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out_stream = torch.cuda.Stream(self.device)
        self.in_stream = torch.cuda.Stream(self.device)

    def pack(self, objects: dict[str, Any]) -> HostCopy:
        """A job built on the host, packed into pinned memory ready to load (its first)."""
        present = _present(objects)
        parked = _repack(present, None, self.chunk_bytes)
        for (ref, tensor), host in zip(present, parked.host_views, strict=True):
            host.copy_(tensor)
            ref.set(host)
        return parked

    def park(self, objects: dict[str, Any], cached: HostCopy | None) -> HostCopy:
        """Copy a job's state out to pinned host memory (reusing its host buffer when it
        fits) and release its device memory chunk by chunk; returns at once."""
        self.release_hooks()
        present = _present(objects)
        self.out_stream.wait_stream(torch.cuda.current_stream(self.device))  # its last step
        self.out_stream.wait_stream(self.in_stream)  # and its arrival, if it never ran
        if cached is not None and cached.chunks and _unchanged(present, cached.pointers):
            parked = cached  # the tensors are still where the last load put them
            with torch.cuda.stream(self.out_stream):
                layout = parked.layout
                for chunk, start in zip(parked.chunks, layout.chunk_starts, strict=True):
                    parked.buffer[start : start + chunk.numel()].copy_(chunk, non_blocking=True)
                    chunk.record_stream(self.out_stream)  # early cleaning: free once copied
        else:
            parked = _repack(present, cached, self.chunk_bytes)
            with torch.cuda.stream(self.out_stream):
                for (_, tensor), host in zip(present, parked.host_views, strict=True):
                    host.copy_(tensor, non_blocking=True)
                    tensor.record_stream(self.out_stream)
        for ref, host in zip(parked.refs, parked.host_views, strict=True):
            ref.set(host)
        parked.chunks, parked.pointers = [], []
        parked.copied = torch.cuda.Event()
        parked.copied.record(self.out_stream)
        return parked

    def load(self, parked: HostCopy, objects: dict[str, Any]) -> None:
        """Copy a parked job's state in, chunk by chunk; with pipelining, each module's
        forward waits only for its own chunk; otherwise compute waits for all of it."""
        self.release_hooks()
        compute = torch.cuda.current_stream(self.device)
        self.in_stream.wait_stream(compute)  # memory freed by compute is reused in order
        if parked.copied is not None:
            self.in_stream.wait_event(parked.copied)  # the host copy is complete
        layout, ready = parked.layout, []
        chunks = [
            torch.empty(size, dtype=torch.uint8, device=self.device) for size in layout.chunk_sizes
        ]
        with torch.cuda.stream(self.in_stream):
            for chunk, start in zip(chunks, layout.chunk_starts, strict=True):
                chunk.copy_(parked.buffer[start : start + chunk.numel()], non_blocking=True)
                chunk.record_stream(self.in_stream)
                event = torch.cuda.Event()
                event.record(self.in_stream)
                ready.append(event)
        pointers = []
        for ref, slot in zip(parked.refs, layout.slots, strict=True):
            tensor = view(chunks[slot.chunk], slot)
            ref.set(tensor)
            pointers.append(tensor.data_ptr())
        parked.chunks, parked.pointers = chunks, pointers
        if not self.pipeline or not ready:
            compute.wait_stream(self.in_stream)
            return
        if parked.waits is None:
            parked.waits = {}
            for ref, slot in zip(parked.refs, layout.slots, strict=True):
                if ref.module is not None:
                    parked.waits[ref.module] = max(parked.waits.get(ref.module, 0), slot.chunk)
        for module, chunk in parked.waits.items():
            self._hooks.append(module.register_forward_pre_hook(_waiter(ready[chunk])))
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


def place(objects: dict[str, Any], device: torch.device | str) -> None:
    """Move a job's modules and optimiser state to ``device`` in one plain pass: how a
    job started cold gets onto its GPU (nothing to overlap with yet)."""
    for obj in objects.values():
        if isinstance(obj, torch.nn.Module):
            obj.to(device)
    for ref in state_tensors(objects):
        tensor = ref.get()
        if ref.module is None and tensor is not None:
            ref.set(tensor.to(device))


def _repack(
    present: list[tuple[TensorRef, torch.Tensor]], cached: HostCopy | None, chunk_bytes: int
) -> HostCopy:
    """A new layout for the job's tensors as they are now, in its old host buffer if
    that is large enough (after any copy still reading it has ended)."""
    layout = plan_layout([t for _, t in present], chunk_bytes)
    if cached is not None and cached.buffer.numel() >= layout.nbytes:
        if cached.copied is not None:
            cached.copied.synchronize()
        buffer = cached.buffer
    else:
        buffer = torch.empty(max(layout.nbytes, 1), dtype=torch.uint8, pin_memory=True)
    starts = layout.chunk_starts
    host_views = [
        view(buffer, Slot(s.chunk, starts[s.chunk] + s.offset, s.dtype, s.shape))
        for s in layout.slots
    ]
    return HostCopy(layout, buffer, [ref for ref, _ in present], host_views)


def _unchanged(present: list[tuple[TensorRef, torch.Tensor]], pointers: list[int]) -> bool:
    """Whether the job has exactly the tensors its last load placed (none added, none
    replaced by a new allocation)."""
    return len(present) == len(pointers) and all(
        tensor.data_ptr() == pointer for (_, tensor), pointer in zip(present, pointers, strict=True)
    )


def _module_tensors(module: torch.nn.Module) -> Iterator[TensorRef]:
    for param in module._parameters.values():
        if param is not None:
            yield TensorRef(_param_data(param), _set_param_data(param), module)
            yield TensorRef(_grad(param), _set_grad(param), module)
    for name, buf in module._buffers.items():
        if buf is not None:
            yield TensorRef(_item(module._buffers, name), _put(module._buffers, name), module)


def _param_data(param: torch.nn.Parameter) -> Callable[[], torch.Tensor]:
    return lambda: param.data


def _set_param_data(param: torch.nn.Parameter) -> Callable[[torch.Tensor], None]:
    def put(tensor: torch.Tensor) -> None:
        param.data = tensor

    return put


def _grad(param: torch.nn.Parameter) -> Callable[[], torch.Tensor | None]:
    return lambda: param.grad


def _set_grad(param: torch.nn.Parameter) -> Callable[[torch.Tensor], None]:
    def put(tensor: torch.Tensor) -> None:
        param.grad = tensor

    return put


def _item(mapping: dict[str, Any], key: str) -> Callable[[], torch.Tensor | None]:
    return lambda: mapping.get(key)


def _put(mapping: dict[str, Any], key: str) -> Callable[[torch.Tensor], None]:
    def put(tensor: torch.Tensor) -> None:
        mapping[key] = tensor

    return put


def _waiter(event: torch.cuda.Event) -> Callable[..., None]:
    def wait(*_: Any) -> None:
        torch.cuda.current_stream().wait_event(event)

    return wait


def _present(objects: dict[str, Any]) -> list[tuple[TensorRef, torch.Tensor]]:
    pairs = []
    for ref in state_tensors(objects):
        tensor = ref.get()
        if tensor is not None:
            pairs.append((ref, tensor))
    return pairs


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
