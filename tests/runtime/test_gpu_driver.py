"""The GPU facts read from NVIDIA's management library, on a fake of its binding:
the inventory, NVLink and PCIe topology into the cluster's links, faults
(ECC, Xid, temperature, a GPU lost from the bus) and utilisation."""

from __future__ import annotations

from corral.model.cluster import LINK_PRESETS
from corral.runtime.execution.gpu_driver import NVLINK, links_of, open_driver

from .fake_nvml import FakeGpu, FakeNvml, nvlinked_board


def test_no_binding_or_no_driver_means_no_driver() -> None:
    lib = FakeNvml([FakeGpu()])
    lib.no_driver = True
    assert open_driver(lib) is None


def test_inventory_names_memory_and_bus() -> None:
    driver = open_driver(FakeNvml([FakeGpu(name="NVIDIA A100-SXM4-40GB", memory_gb=40.0)] * 1))
    assert driver is not None
    [gpu] = driver.gpus()
    assert gpu.name == "NVIDIA A100-SXM4-40GB" and gpu.memory_gb == 40.0
    assert gpu.bus_id == "00000000:18:00.0" and gpu.uuid.startswith("GPU-")


def test_an_nvlinked_board_gets_nvlink_links_and_a_pcie_box_keeps_the_default() -> None:
    board = open_driver(nvlinked_board(4))
    assert board is not None
    topology = board.topology()
    assert set(topology.values()) == {NVLINK} and len(topology) == 6
    links = links_of(topology)
    assert links is not None and links.intra_node == LINK_PRESETS["nvlink"]
    # two PCIe switches of two GPUs each, on two sockets, no NVLink
    box = open_driver(
        FakeNvml([FakeGpu() for _ in range(4)], lambda i, j: 10 if i // 2 == j // 2 else 50)
    )
    assert box is not None
    topology = box.topology()
    assert topology[(0, 1)] == "PCIe switch" and topology[(0, 2)] == "across sockets"
    assert links_of(topology) is None


def test_faults_name_ecc_xid_temperature_and_a_lost_gpu() -> None:
    lib = FakeNvml([FakeGpu() for _ in range(5)])
    driver = open_driver(lib)
    assert driver is not None
    assert driver.faults() == {}
    lib.gpus[0].ecc_uncorrected = 2
    lib.gpus[1].temperature = 90
    lib.gpus[2].lost = True
    lib.events.append((3, 79))  # Xid 79: fallen off the bus
    faults = driver.faults()
    assert set(faults) == {0, 1, 2, 3}
    assert "2 uncorrected ECC errors" in faults[0]
    assert "90 C" in faults[1] and "slowdown" in faults[1]
    assert "lost" in faults[2]
    assert "critical Xid 79" in faults[3]
    assert "critical Xid 79" in driver.faults()[3]  # an Xid stays until the GPU is resumed
    driver.clear(3)
    assert 3 not in driver.faults()


def test_usage_reads_utilisation_memory_and_processes() -> None:
    lib = FakeNvml([FakeGpu(utilization=87.0, used_gb=12.5, processes={4242: 12.0})])
    driver = open_driver(lib)
    assert driver is not None
    [(index, usage)] = driver.usage().items()
    assert index == 0 and usage.utilization == 87.0 and usage.memory_used_gb == 12.5
    assert usage.processes == {4242: 12.0}
    lib.gpus[0].lost = True
    assert driver.usage() == {}  # a GPU that does not answer is left out


def test_the_real_binding_without_a_driver_opens_nothing() -> None:
    """On a machine with NVIDIA's binding but no NVIDIA driver (a CPU test machine),
    the service falls back to nvidia-smi: no driver, no error."""
    import pytest

    from corral.runtime.execution.gpu_driver import load_nvml

    lib = load_nvml()
    if lib is None:
        pytest.skip("nvidia-ml-py is not installed")
    try:
        lib.nvmlInit()
    except Exception:
        assert open_driver() is None
        return
    lib.nvmlShutdown()
    pytest.skip("an NVIDIA driver is present: the fallback is not what runs here")
