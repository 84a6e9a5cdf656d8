"""Packing a job's tensors for the GPU's warm switch: the layout on any machine, the
moves themselves where a GPU is present."""

from __future__ import annotations

import itertools
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from corral.train.residency import (  # noqa: E402
    ALIGN,
    host_bytes,
    host_chunk,
    pack_on_host,
    place,
    plan_chunks,
    state_tensors,
    views,
)
from corral.train.task import WarmWorker, load_factory  # noqa: E402

DIGITS = "corral.examples.tasks:digits"
RESNET = "corral.examples.tasks:resnet50"
SMALL_RESNET = {"batch": 2, "size": 32}
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_chunks_hold_whole_tensors_of_one_dtype_in_order_and_views_read_them_back() -> None:
    tensors = [
        torch.arange(10, dtype=torch.float32),
        torch.full((3, 5), 2.5),
        torch.tensor(7, dtype=torch.int64),  # a 0-dim buffer (BatchNorm's batch count)
        torch.arange(300_000, dtype=torch.float32),  # 1.2 MB: over a chunk's least size
        torch.ones(4),
    ]
    chunks = plan_chunks(tensors, groups=16)
    assert [(c.first, c.count, c.dtype) for c in chunks] == [
        (0, 2, torch.float32),
        (2, 1, torch.int64),
        (3, 1, torch.float32),
        (4, 1, torch.float32),
    ]
    assert all(c.start % ALIGN == 0 for c in chunks)
    assert all(b.start >= a.start + a.nbytes for a, b in itertools.pairwise(chunks))
    buffer = torch.zeros(host_bytes(chunks), dtype=torch.uint8)
    placed = []
    for chunk in chunks:
        placed += views(host_chunk(buffer, chunk), tensors[chunk.first : chunk.first + chunk.count])
    for tensor, host in zip(tensors, placed, strict=True):
        host.copy_(tensor)
    for tensor, host in zip(tensors, placed, strict=True):
        assert host.dtype == tensor.dtype and host.shape == tensor.shape
        assert torch.equal(host, tensor)
    assert torch.equal(views(host_chunk(buffer, chunks[0]), tensors[:2])[1], tensors[1])


def test_state_tensors_are_the_jobs_whole_state_in_forward_order() -> None:
    task = load_factory(RESNET)(**SMALL_RESNET)
    task.step(0)  # momentum now exists; the task drops its gradients after a step
    entries = state_tensors(task.objects)
    model = task.model
    expected = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    momentum = len(task.optimizer.state)
    assert len(entries) == expected + momentum
    counts = [t for t, _ in entries if t.dtype == torch.int64]
    assert entries[: len(counts)] == [(t, m) for t, m in entries if t.dtype == torch.int64]
    first_module = next(m for m in model.modules() if list(m.parameters(recurse=False)))
    assert entries[len(counts)][1] is first_module  # the stem's weights lead the rest
    assert all(module is None for _, module in entries[-momentum:])  # optimiser state last


def test_tensors_keep_their_identity_and_version_counter_when_their_data_moves() -> None:
    """BatchNorm updates its running statistics in place during the forward pass; the
    weights beside them in the chunk, saved for the backward pass, must not look changed."""
    weight = torch.nn.Parameter(torch.ones(8))
    running_mean = torch.zeros(8)
    chunks = plan_chunks([weight.detach(), running_mean])
    buffer = torch.zeros(host_bytes(chunks), dtype=torch.uint8)
    placed = views(host_chunk(buffer, chunks[0]), [weight.detach(), running_mean])
    with torch.no_grad():
        for tensor, host in zip((weight, running_mean), placed, strict=True):
            host.copy_(tensor)
            tensor.data = host
    loss = (weight * weight).sum()  # saves weight for the backward pass
    running_mean.add_(1.0)
    loss.backward()  # raises if the in-place update bumped weight's version
    assert torch.equal(weight.grad, 2 * weight.detach())
    assert torch.equal(placed[1], torch.ones(8))  # the update landed in the chunk


def test_a_job_packed_into_its_host_buffer_trains_exactly_as_before() -> None:
    """The packing a GPU switch relies on, checked on any machine: every tensor (weights,
    BatchNorm's statistics and counts, momentum) becomes a view of the job's buffer, in
    chunks of one dtype, and training on those views is bit-identical."""
    task = load_factory(RESNET)(seed=7, **SMALL_RESNET)
    for step in range(2):
        task.step(step)
    parked = pack_on_host(task.objects, groups=16)
    assert len({c.dtype for c in parked.chunks}) == 2  # float32 and BatchNorm's int64 counts
    assert host_bytes(parked.chunks) <= parked.buffer.numel()
    buffer = parked.buffer.untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() == buffer for t, _ in state_tensors(task.objects))
    for step in range(2, 4):
        task.step(step)  # BatchNorm updates its statistics in place, inside the buffer
    reference = load_factory(RESNET)(seed=7, **SMALL_RESNET)
    for step in range(4):
        reference.step(step)
    mine, theirs = task.model.state_dict(), reference.model.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    assert parked.buffer.abs().sum() > 0  # the state really lies in the buffer


def alone(factory: str, seed: int, steps: int, device: str, **kwargs: object) -> dict:
    task = load_factory(factory)(seed=seed, **kwargs)
    place(task.objects, device)
    for step in range(steps):
        task.step(step)
    return {k: v.cpu() for k, v in task.model.state_dict().items()}


def all_state(task: object) -> list:
    return [tensor for tensor, _ in state_tensors(task.objects)]


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


@gpu
def test_gpu_a_suspended_job_frees_its_memory_and_resumes_identical() -> None:
    """Gandiva's suspend, as the training session does it on SIGTSTP."""
    from corral.train.residency import Mover, Suspension

    deterministic()
    task = load_factory(RESNET)(seed=8, **SMALL_RESNET)
    place(task.objects, "cuda")
    task.step(0)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    pause = Suspension(Mover(torch.device("cuda")))
    for k in range(1, 4):
        pause.suspend(task.objects)
        assert torch.cuda.memory_allocated() < before / 4  # its state left the GPU
        pause.resume(task.objects)
        task.step(k)
    state = {k: v.cpu() for k, v in task.model.state_dict().items()}
    reference = alone(RESNET, 8, 4, "cuda", **SMALL_RESNET)
    assert all(torch.equal(state[k], reference[k]) for k in state)


@gpu
@pytest.mark.parametrize(("factory", "kwargs"), [(DIGITS, {}), (RESNET, SMALL_RESNET)])
def test_gpu_a_first_load_pipelined_trains_identical_to_a_whole_copy(
    factory: str, kwargs: dict
) -> None:
    """A task job's first attempt (run_task): its state comes in chunk by chunk while
    its first step computes, and training is bit-identical to placing it whole."""
    from corral.train.task import place_task

    deterministic()
    task = load_factory(factory)(seed=9, **kwargs)
    place_task(task, "cuda")
    assert all(p.is_cuda for p in task.model.parameters())
    for step in range(4):
        task.step(step)
    state = {k: v.cpu() for k, v in task.model.state_dict().items()}
    reference = alone(factory, 9, 4, "cuda", **kwargs)
    assert all(torch.equal(state[k], reference[k]) for k in state)


class _RecordingMover:
    """Stands in for the GPU's copy streams on a CPU: records what a first load asks."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.calls: list[str] = []

    def pack(self, objects):
        self.calls.append("pack")
        available = torch.cuda.is_available
        torch.cuda.is_available = lambda: False  # (a CPU has no pinned memory to pack into)
        try:
            return pack_on_host(objects)
        finally:
            torch.cuda.is_available = available

    def load(self, parked, objects) -> None:
        self.calls.append("load")
        assert all(
            t is e for (t, _), (e, _) in zip(parked.entries, state_tensors(objects), strict=True)
        )

    def park(self, objects, cached):
        self.calls.append("park")
        self.parked_with = cached
        return pack_on_host(objects)

    def settle(self) -> None:
        self.calls.append("settle")


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_jobs_first_start_on_a_gpu_is_a_pipelined_load_unless_asked_whole(
    monkeypatch, pipeline
) -> None:
    """The first attempt of a task job (built and restored on the host) reaches its GPU
    through the worker's mover, chunk by chunk with its first step, as a job coming
    back to a warm worker does; ``--no-pipeline`` keeps the plain whole copy."""
    from corral.train import residency
    from corral.train import task as task_module

    made: list[_RecordingMover] = []

    def fake_mover(device):
        made.append(_RecordingMover(device))
        return made[-1]

    placed: list[str] = []
    monkeypatch.setattr(residency, "_worker_mover", None)
    monkeypatch.setattr(residency, "Mover", fake_mover)
    monkeypatch.setattr(residency, "place", lambda objects, device: placed.append(device))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    job = load_factory(DIGITS)()
    host = task_module.place_task(job, "auto", pipeline=pipeline)
    if pipeline:
        assert [m.calls for m in made] == [["pack", "load"]] and placed == []
        assert host is not None  # returned, for parking to reuse
        assert made[0].device == torch.device("cuda", 0)
        # the worker keeps one mover: a second job's first load reuses its streams
        task_module.place_task(load_factory(DIGITS)(), "auto")
        assert len(made) == 1 and made[0].calls == ["pack", "load", "pack", "load"]
    else:
        assert made == [] and placed == ["cuda"] and host is None


def test_a_job_kept_in_a_worker_comes_back_through_the_mover_that_parked_it(
    monkeypatch, tmp_path
) -> None:
    from corral.train import residency, resident

    mover = _RecordingMover(torch.device("cuda", 0))
    monkeypatch.setattr(residency, "device_of", lambda objects: mover.device)
    monkeypatch.setattr(residency, "worker_mover", lambda device: mover)
    job = load_factory(DIGITS)()
    (tmp_path / "checkpoint.pt").write_bytes(b"x")
    monkeypatch.setattr(resident.checkpoint, "FILE_NAME", "checkpoint.pt")
    first_load = pack_on_host(job.objects)  # the pinned copy its first load made
    resident.keep("job-1", job, 3, tmp_path, first_load)
    assert mover.parked_with is first_load  # parking reuses it: no second pinned buffer
    kept = resident.take("job-1", tmp_path)
    assert kept is not None and kept.mover is mover
    resident.bring_back(kept)
    assert mover.calls == ["park", "settle", "load"]
    resident.clear()
