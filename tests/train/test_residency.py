"""Packing a job's tensors for the GPU's warm switch: the layout on any machine, the
moves themselves where a GPU is present."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from corral.train.residency import ALIGN, plan_layout, state_tensors, view  # noqa: E402
from corral.train.task import WarmWorker, load_factory  # noqa: E402

DIGITS = "corral.examples.tasks:digits"
RESNET = "corral.examples.tasks:resnet50"
SMALL_RESNET = {"batch": 2, "size": 32}
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_layout_packs_whole_tensors_in_order_aligned_and_views_read_them_back() -> None:
    tensors = [
        torch.arange(10, dtype=torch.float32),
        torch.tensor(7, dtype=torch.int64),  # a 0-dim buffer (BatchNorm's batch count)
        torch.ones(3, 5, dtype=torch.float16),
        torch.arange(1000, dtype=torch.float64),  # larger than a chunk: one of its own
        torch.full((4,), 2.5),
    ]
    layout = plan_layout(tensors, chunk_bytes=1024)
    assert [s.chunk for s in layout.slots] == [0, 0, 0, 1, 2]
    assert all(s.offset % ALIGN == 0 for s in layout.slots)
    assert layout.chunk_starts == [0, layout.chunk_sizes[0], sum(layout.chunk_sizes[:2])]
    buffers = [torch.zeros(size, dtype=torch.uint8) for size in layout.chunk_sizes]
    for tensor, slot in zip(tensors, layout.slots, strict=True):
        view(buffers[slot.chunk], slot).copy_(tensor)
    for tensor, slot in zip(tensors, layout.slots, strict=True):
        back = view(buffers[slot.chunk], slot)
        assert back.dtype == tensor.dtype and back.shape == tensor.shape
        assert torch.equal(back, tensor)


def test_state_tensors_are_the_jobs_whole_state_in_forward_order() -> None:
    task = load_factory(RESNET)(**SMALL_RESNET)
    task.step(0)  # gradients and momentum now exist
    refs = state_tensors(task.objects)
    model = task.model
    expected = sum(1 for _ in model.parameters()) * 2 + sum(1 for _ in model.buffers())
    momentum = len(task.optimizer.state)
    assert len(refs) == expected + momentum
    first_module = next(m for m in model.modules() if list(m.parameters(recurse=False)))
    assert refs[0].module is first_module  # the stem's weights travel first
    assert all(ref.module is None for ref in refs[-momentum:])  # optimiser state last
    replacement = torch.zeros_like(refs[0].get())
    refs[0].set(replacement)
    assert first_module.weight.data_ptr() == replacement.data_ptr()


def alone(factory: str, seed: int, steps: int, device: str, **kwargs: object) -> dict:
    task = load_factory(factory)(seed=seed, **kwargs)
    task.model.to(device)
    for step in range(steps):
        task.step(step)
    return {k: v.cpu() for k, v in task.model.state_dict().items()}


def all_state(task: object) -> list:
    return [ref.get() for ref in state_tensors(task.objects) if ref.get() is not None]


def deterministic() -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


@gpu
@pytest.mark.parametrize("pipeline", [True, False])
@pytest.mark.parametrize(("factory", "kwargs"), [(DIGITS, {}), (RESNET, SMALL_RESNET)])
def test_gpu_jobs_switched_50_times_end_identical_to_running_alone(
    pipeline: bool, factory: str, kwargs: dict
) -> None:
    deterministic()
    worker = WarmWorker(device="cuda", pipeline=pipeline)
    worker.admit("a", factory, seed=3, **kwargs)
    worker.admit("b", factory, seed=4, **kwargs)
    for k in range(50):
        worker.switch_to("a" if k % 2 == 0 else "b")
        worker.run(2 if k % 2 == 0 else 1)
    worker.switch_to("a")  # b parked: its state is read back from host memory
    worker.settle()
    for job, seed, steps in (("a", 3, 50), ("b", 4, 25)):
        assert worker.jobs[job].step == steps
        state = {k: v.cpu() for k, v in worker.jobs[job].task.model.state_dict().items()}
        reference = alone(factory, seed, steps, "cuda", **kwargs)
        assert state.keys() == reference.keys()
        assert all(torch.equal(state[k], reference[k]) for k in state), job


@gpu
def test_gpu_switch_frees_the_outgoing_jobs_memory_and_leaves_a_resumable_checkpoint(
    tmp_path: object,
) -> None:
    from pathlib import Path

    deterministic()
    worker = WarmWorker(device="cuda")
    worker.admit("a", RESNET, seed=5, **SMALL_RESNET)
    worker.admit("b", RESNET, seed=6, **SMALL_RESNET)
    worker.switch_to("a")
    worker.run(3)
    worker.switch_to("b")
    worker.run(1)
    worker.settle()
    torch.cuda.empty_cache()
    held = torch.cuda.memory_allocated()
    one_job = sum(t.numel() * t.element_size() for t in all_state(worker.jobs["b"].task))
    assert one_job <= held < 1.5 * one_job  # b's weights and momentum (and workspaces), not a's
    assert all(not p.is_cuda for p in worker.jobs["a"].task.model.parameters())
    assert all(p.is_pinned() for p in worker.jobs["a"].task.model.parameters())
    worker.checkpoint("a", Path(str(tmp_path)))
    resumed = WarmWorker(device="cuda")
    resumed.admit("a", RESNET, resume_from=Path(str(tmp_path)), seed=5, **SMALL_RESNET)
    resumed.switch_to("a")
    resumed.run(2)
    resumed.settle()
    state = {k: v.cpu() for k, v in resumed.jobs["a"].task.model.state_dict().items()}
    reference = alone(RESNET, 5, 5, "cuda", **SMALL_RESNET)
    assert all(torch.equal(state[k], reference[k]) for k in state)


def test_tensors_sharing_a_chunk_do_not_share_a_version_counter() -> None:
    """BatchNorm updates its running statistics in place during the forward pass; the
    weights beside them in the chunk, saved for the backward pass, must not look changed."""
    tensors = [torch.ones(8), torch.zeros(8)]
    layout = plan_layout(tensors, chunk_bytes=1 << 20)
    chunk = torch.zeros(layout.chunk_sizes[0], dtype=torch.uint8)
    weight, running_mean = (view(chunk, slot) for slot in layout.slots)
    weight.requires_grad_(True)
    loss = (weight * weight).sum()  # saves weight for the backward pass
    running_mean.add_(1.0)
    loss.backward()  # raises if the in-place update bumped weight's version
    assert torch.equal(weight.grad, 2 * weight.detach())
