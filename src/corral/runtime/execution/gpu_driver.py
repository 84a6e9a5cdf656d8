"""What the NVIDIA driver knows of this machine's GPUs, read through NVIDIA's
management library (NVML, by its Python binding ``nvidia-ml-py``, an optional
extra): the GPUs and how they are linked, whether each is healthy, and how busy
each is and with which processes.

The scheduler needs these facts from the hardware rather than from a
configuration: the locality model should see NVLink where the machine has it;
a GPU that reports uncorrected ECC errors, a critical Xid event, a temperature
at its slowdown threshold or that has fallen off the bus must stop taking jobs
(the job on it fails as the Philly study's infrastructure failures do, and is
retried elsewhere); and AntMan's and Gandiva's decisions, and the people
watching a job, want its measured GPU utilisation and memory.

Everything goes through one object, :class:`GpuDriver`, built on a module with
``pynvml``'s functions; tests give it a fake one, and on a machine with
NVIDIA GPUs the same code reads the real driver. Where NVML cannot be loaded
(no binding, no driver) :func:`open_driver` returns None and the service
falls back to ``nvidia-smi`` for the GPU list and reads no health or usage.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from corral.model.cluster import LINK_PRESETS, Links

LINK_NAMES = {
    0: "same board",  # NVML_TOPOLOGY_INTERNAL
    10: "PCIe switch",  # NVML_TOPOLOGY_SINGLE
    20: "PCIe switches",  # NVML_TOPOLOGY_MULTIPLE
    30: "PCIe host bridge",  # NVML_TOPOLOGY_HOSTBRIDGE
    40: "CPU socket",  # NVML_TOPOLOGY_NODE
    50: "across sockets",  # NVML_TOPOLOGY_SYSTEM
}
"""NVML's common-ancestor levels, by what a pair of GPUs shares."""
NVLINK = "NVLink"
XID_CRITICAL = 0x0000000000000008
"""nvmlEventTypeXidCriticalError."""
MAX_NVLINKS = 18
"""Links asked per GPU (NVML_NVLINK_MAX_LINKS is larger; GPUs today have at most 18)."""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the driver names it."""

    index: int
    name: str
    uuid: str
    bus_id: str
    memory_gb: float


@dataclass(frozen=True)
class GpuUsage:
    """One GPU's utilisation and memory now, and its processes' memory."""

    utilization: float
    """Percent of the last sample period a kernel ran (NVML's ``gpu`` rate)."""
    memory_used_gb: float
    processes: dict[int, float] = field(default_factory=dict)
    """pid -> GB of this GPU's memory it holds."""


def load_nvml() -> ModuleType | None:
    """NVIDIA's binding (``pynvml``, from the ``nvidia-ml-py`` package), or None."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def open_driver(nvml: Any = None) -> GpuDriver | None:
    """A driver over ``nvml`` (default: the installed binding), initialised; None
    where there is no binding or no driver to talk to."""
    lib = nvml if nvml is not None else load_nvml()
    if lib is None:
        return None
    try:
        lib.nvmlInit()
    except Exception:  # the binding's NVMLError: no driver, no library
        return None
    return GpuDriver(lib)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuDriver:
    """The driver's facts about this machine's GPUs (one NVML session)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._lock = threading.Lock()  # NVML is thread-safe; the event set is ours
        self._handles = [
            nvml.nvmlDeviceGetHandleByIndex(k) for k in range(nvml.nvmlDeviceGetCount())
        ]
        self._events: Any = None
        self._xid: dict[int, list[int]] = {}
        """Critical Xid codes seen per GPU (kept: a GPU stays failed until resumed)."""
        try:
            events = nvml.nvmlEventSetCreate()
            for handle in self._handles:
                nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, events)
            self._events = events
        except Exception:  # not supported (some GPUs, containers): no Xid events
            self._events = None

    def close(self) -> None:
        try:
            if self._events is not None:
                self.nvml.nvmlEventSetFree(self._events)
            self.nvml.nvmlShutdown()
        except Exception:
            pass

    # ---------------------------------------------------------------- inventory
    def gpus(self) -> list[GpuInfo]:
        nvml = self.nvml
        out = []
        for k, handle in enumerate(self._handles):
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            out.append(
                GpuInfo(
                    index=k,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId).lower(),
                    memory_gb=float(memory.total) / 1e9,
                )
            )
        return out

    def topology(self) -> dict[tuple[int, int], str]:
        """What each pair of GPUs (``i < j``) shares: ``NVLink``, or the closest
        PCIe/CPU level they have in common (:data:`LINK_NAMES`)."""
        nvml = self.nvml
        bus = [_text(nvml.nvmlDeviceGetPciInfo(h).busId).lower() for h in self._handles]
        nvlinked: set[tuple[int, int]] = set()
        for i, handle in enumerate(self._handles):
            for link in range(MAX_NVLINKS):
                try:
                    if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                        continue
                    remote = _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
                except Exception:  # no such link, or no NVLink on this GPU
                    break
                if remote.lower() in bus:
                    j = bus.index(remote.lower())
                    nvlinked.add((min(i, j), max(i, j)))
        out: dict[tuple[int, int], str] = {}
        n = len(self._handles)
        for i in range(n):
            for j in range(i + 1, n):
                if (i, j) in nvlinked:
                    out[(i, j)] = NVLINK
                    continue
                try:
                    level = int(
                        nvml.nvmlDeviceGetTopologyCommonAncestor(self._handles[i], self._handles[j])
                    )
                except Exception:
                    level = 50
                out[(i, j)] = LINK_NAMES.get(level, "across sockets")
        return out

    # ---------------------------------------------------------------- health
    def faults(self) -> dict[int, str]:
        """GPUs that must stop taking jobs now, by index, with why (a line for
        people, naming the failure as an operator would: an uncorrected ECC
        error, a critical Xid, over temperature, lost from the bus)."""
        out: dict[int, str] = {}
        with self._lock:
            self._read_xid_events()
        for k, handle in enumerate(self._handles):
            try:
                why = self._fault_of(handle)
            except Exception as exc:  # a GPU that stops answering is lost
                why = f"the driver lost it ({_text(getattr(exc, 'value', exc))}: {exc})"
            if self._xid.get(k):
                codes = ", ".join(str(c) for c in self._xid[k])
                why = f"critical Xid {codes}" + (f"; {why}" if why else "")
            if why:
                out[k] = why
        return out

    def _fault_of(self, handle: Any) -> str | None:
        nvml = self.nvml
        reasons = []
        try:
            ecc = int(nvml.nvmlDeviceGetTotalEccErrors(handle, 1, 0))  # uncorrected, volatile
        except Exception as exc:
            if _lost(nvml, exc):
                raise
            ecc = 0  # ECC off or not supported
        if ecc > 0:
            reasons.append(f"{ecc} uncorrected ECC error{'s' if ecc != 1 else ''}")
        temperature = int(nvml.nvmlDeviceGetTemperature(handle, 0))
        try:
            slowdown = int(nvml.nvmlDeviceGetTemperatureThreshold(handle, 1))
        except Exception as exc:
            if _lost(nvml, exc):
                raise
            slowdown = 0
        if slowdown and temperature >= slowdown:
            reasons.append(f"{temperature} C, at its slowdown threshold ({slowdown} C)")
        return "; ".join(reasons) or None

    def _read_xid_events(self) -> None:
        if self._events is None:
            return
        nvml = self.nvml
        while True:
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except Exception:  # timeout: no more events
                return
            if int(data.eventType) & XID_CRITICAL:
                k = next((i for i, h in enumerate(self._handles) if h == data.device), -1)
                if k >= 0:
                    self._xid.setdefault(k, []).append(int(data.eventData))

    def clear(self, index: int) -> None:
        """Forget a GPU's critical Xid events (an admin resumed it)."""
        with self._lock:
            self._xid.pop(index, None)

    # ---------------------------------------------------------------- usage
    def usage(self) -> dict[int, GpuUsage]:
        """Each GPU's utilisation and memory now (GPUs that do not answer are left out)."""
        nvml = self.nvml
        out: dict[int, GpuUsage] = {}
        for k, handle in enumerate(self._handles):
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                processes = {
                    int(p.pid): float(p.usedGpuMemory or 0) / 1e9
                    for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                }
            except Exception:
                continue
            out[k] = GpuUsage(float(rates.gpu), float(memory.used) / 1e9, processes)
        return out


def _lost(nvml: Any, exc: Exception) -> bool:
    """Whether ``exc`` says the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)."""
    return getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15)


def links_of(topology: dict[tuple[int, int], str]) -> Links | None:
    """The cluster's intra-node link for the locality model: NVLink when every
    pair of the node's GPUs is NVLink-connected, else None (the PCIe default)."""
    if topology and all(kind == NVLINK for kind in topology.values()):
        return Links(intra_node=LINK_PRESETS["nvlink"])
    return None
