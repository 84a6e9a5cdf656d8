"""A standby worker never initialises CUDA before it forks a job: caught on a CPU.

On an NVIDIA GPU every task job started in a standby worker crashed ("Cannot
re-initialize CUDA in forked subprocess", later ``cudaErrorInitializationError``):
the worker's warm-up ran a backward pass and an optimiser step, and on a machine
with a GPU each initialises the CUDA driver (the autograd engine counts the CUDA
devices when it first starts; the step asks for the current accelerator stream;
``torch.cuda.is_available`` counts devices through the driver). A machine without
a GPU never takes those paths, so here a test double stands in for CUDA: PyTorch
is told a CUDA device is present, and every call that would initialise the
driver on a real GPU records that it was made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from corral.runtime.execution import standby  # noqa: E402
from corral.runtime.execution.launcher import NOT_STARTED, Confinement, supervise  # noqa: E402


class FakeCuda:
    """Records whether anything initialised "CUDA" in this process."""

    def __init__(self) -> None:
        self.initialised_by: list[str] = []

    def mark(self, what: str) -> None:
        self.initialised_by.append(what)


class _Stream:
    def is_capturing(self) -> bool:
        return False


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCuda]:
    fake = FakeCuda()

    def current_stream(*_args: object) -> _Stream:
        fake.mark("torch.accelerator.current_stream")
        return _Stream()

    real_backward = torch.autograd.backward

    def backward(*args: object, **kwargs: object) -> None:
        fake.mark("the autograd engine (it counts CUDA devices as it starts)")
        real_backward(*args, **kwargs)  # type: ignore[arg-type]

    def device_count() -> int:
        fake.mark("torch.cuda.device_count (through the driver)")
        return 1

    def available() -> bool:
        fake.mark("torch.cuda.is_available (through the driver)")
        return True

    monkeypatch.setattr(torch.cuda, "is_available", available)
    monkeypatch.setattr(torch.cuda, "device_count", device_count)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: bool(fake.initialised_by))
    monkeypatch.setattr(torch.cuda, "init", lambda: fake.mark("torch.cuda.init"))
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: fake.mark("torch.cuda._lazy_init"))
    monkeypatch.setattr(
        torch.cuda, "is_current_stream_capturing", lambda: fake.mark("stream capture") or False
    )
    monkeypatch.setattr(torch.autograd, "backward", backward)
    # the double stands in for the driver too: on a GPU machine the test process's own
    # driver may be initialised (the faithfulness test's real backward pass does it)
    monkeypatch.setattr(standby, "driver_initialised", lambda: bool(fake.initialised_by))
    if hasattr(torch, "accelerator"):
        monkeypatch.setattr(
            torch.accelerator,
            "current_accelerator",
            lambda check_available=False: torch.device("cuda"),
        )
        monkeypatch.setattr(torch.accelerator, "current_stream", current_stream)
    yield fake


def test_the_double_sees_the_old_warm_up_initialise_cuda(fake_cuda: FakeCuda) -> None:
    """The double is faithful: the warm-up that crashed on the GPU is recorded here."""
    weight = torch.zeros(4, requires_grad=True)
    optimizer = torch.optim.Adam([weight])
    (weight * 2).sum().backward()
    optimizer.step()
    assert fake_cuda.initialised_by, "a backward pass and a step on a CUDA machine init CUDA"
    assert any("autograd" in what for what in fake_cuda.initialised_by)


def test_the_driver_probe_never_loads_the_driver() -> None:
    """Asked in a process without the CUDA driver loaded, the probe answers False and
    leaves it unloaded (it opens the library only if it is already there). In a
    fresh interpreter: on a GPU machine the tests before this one load the driver."""
    probe = (
        "from pathlib import Path\n"
        "from corral.runtime.execution import standby\n"
        "maps = lambda: Path('/proc/self/maps').read_text()\n"
        "assert '/libcuda.so' not in maps()\n"
        "assert standby.driver_initialised() is False\n"
        "assert '/libcuda.so' not in maps()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_warm_up_of_a_standby_worker_leaves_cuda_alone(fake_cuda: FakeCuda) -> None:
    standby.warm_up([])
    assert fake_cuda.initialised_by == []
    assert not standby.cuda_initialised()
    assert torch.cuda.is_available()  # the warm-up's blindfold is taken off again


def test_a_worker_that_initialised_cuda_refuses_to_fork_the_job(
    fake_cuda: FakeCuda, tmp_path: Path
) -> None:
    """The last line of defence (a preloaded module of the config used the GPU): the
    attempt ends as not started, with the reason in its record, and nothing forks."""
    torch.cuda.init()
    assert standby.cuda_initialised()
    with pytest.raises(standby.CudaBeforeFork):
        standby._fork_task(Confinement(), {}, ["corral.train.run_task"], lambda: None)
    folder = tmp_path / "attempt"
    folder.mkdir()
    # as a worker does, in a process of its own: being a launcher ignores SIGTERM and
    # makes the process a subreaper, which must not leak into the test process
    pid = os.fork()
    if pid == 0:
        code = supervise(
            folder,
            Confinement(),
            lambda setup: standby._fork_task(Confinement(), {}, ["corral.train.run_task"], setup),
        )
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    record = json.loads((folder / "exit.json").read_text())
    assert os.waitstatus_to_exitcode(status) == NOT_STARTED
    assert record["exit_code"] == NOT_STARTED
    assert "initialised CUDA" in record["detail"]


def test_a_real_standby_worker_process_never_initialises_cuda(tmp_path: Path) -> None:
    """The worker process itself, as the service starts it: after its warm-up it has not
    initialised CUDA (on a GPU machine this is the real check; on a CPU it still runs
    the whole warm-up path)."""
    code = (
        "import sys, torch\n"
        "from corral.runtime.execution import standby\n"
        "standby.warm_up([])\n"
        "torch.cuda.is_available()  # through NVML in a worker: the driver stays unloaded\n"
        "print('cuda-initialised', standby.cuda_initialised())\n"
    )
    out = subprocess.run(
        [*standby.isolated_python(), "-c", code],
        env={**standby.root_environment(), **standby.WORKER_ENV},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "cuda-initialised False" in out
