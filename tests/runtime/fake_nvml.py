"""A stand-in for NVIDIA's ``pynvml`` binding: the functions corral's GPU driver
calls, over a machine described in Python, with faults to inject.

It answers as the real binding does (its return shapes, its constants, an
``NVMLError`` with a ``value``, ``GPU is lost`` for a GPU that fell off the
bus), so the code that reads a real driver is the code under test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_INVALID_ARGUMENT = 2
nvmlEventTypeXidCriticalError = 0x0000000000000008


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__({15: "GPU is lost", 10: "Timeout", 3: "Not Supported"}.get(value, "?"))
        self.value = value


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    bus_id: str = ""
    memory_gb: float = 80.0
    used_gb: float = 0.0
    utilization: float = 0.0
    temperature: int = 40
    slowdown: int = 87
    ecc_uncorrected: int = 0
    lost: bool = False
    nvlinks: list[int] = field(default_factory=list)
    """Indices of the GPUs its NVLinks reach (one link each)."""
    processes: dict[int, float] = field(default_factory=dict)
    """pid -> GB."""


class FakeNvml:
    """``pynvml``'s functions over ``gpus``; ``ancestor`` gives the PCIe/CPU level two
    GPUs share (NVML_TOPOLOGY_*: 10 one switch ... 50 across sockets)."""

    NVMLError = NVMLError
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST

    def __init__(self, gpus: list[FakeGpu], ancestor: Any = None) -> None:
        self.gpus = gpus
        for k, gpu in enumerate(gpus):
            gpu.bus_id = gpu.bus_id or f"00000000:{0x18 + k:02X}:00.0"
        self.ancestor = ancestor or (lambda i, j: 10 if i // 4 == j // 4 else 50)
        self.events: list[tuple[int, int]] = []
        """(GPU, Xid) events not yet read."""
        self.initialised = False
        self.no_driver = False

    # the session
    def nvmlInit(self) -> None:
        if self.no_driver:
            raise NVMLError(9)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, k: int) -> int:
        return k

    def _gpu(self, handle: int) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return gpu

    # inventory
    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-fake-{handle:04d}"

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.gpus[handle].bus_id.encode())

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu(handle)
        return SimpleNamespace(total=int(gpu.memory_gb * 1e9), used=int(gpu.used_gb * 1e9))

    # topology
    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        if link >= len(self.gpus[handle].nvlinks):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> SimpleNamespace:
        other = self.gpus[handle].nvlinks[link]
        return SimpleNamespace(busId=self.gpus[other].bus_id.encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return int(self.ancestor(a, b))

    # health
    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        assert (error_type, counter) == (1, 0)  # uncorrected, volatile
        return self._gpu(handle).ecc_uncorrected

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self._gpu(handle).temperature

    def nvmlDeviceGetTemperatureThreshold(self, handle: int, which: int) -> int:
        assert which == 1  # slowdown
        return self._gpu(handle).slowdown

    def nvmlEventSetCreate(self) -> str:
        return "events"

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, events: str) -> None:
        assert types == nvmlEventTypeXidCriticalError

    def nvmlEventSetWait(self, events: str, timeout_ms: int) -> SimpleNamespace:
        if not self.events:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        gpu, xid = self.events.pop(0)
        return SimpleNamespace(device=gpu, eventType=nvmlEventTypeXidCriticalError, eventData=xid)

    def nvmlEventSetFree(self, events: str) -> None:
        return None

    # usage
    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._gpu(handle).utilization, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        gpu = self._gpu(handle)
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=int(gb * 1e9))
            for pid, gb in gpu.processes.items()
        ]


def nvlinked_board(n: int = 8) -> FakeNvml:
    """An HGX-like board: ``n`` GPUs, each NVLinked to every other."""
    return FakeNvml([FakeGpu(nvlinks=[j for j in range(n) if j != k]) for k in range(n)])
