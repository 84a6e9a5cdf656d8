"""The operator's view in ``/metrics`` (virtual time, the API's own collector over
the real loop and store): each GPU's and each running job's use as the driver
reads it, and node states, a node the executor lost told apart from one an
admin drained."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from sqlalchemy import select

from corral.api.metrics import StoreCollector
from corral.runtime.execution.gpu_driver import GpuUsage
from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.storage.store import NodeRow
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop


def scrape(loop: VirtualLoop) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the collector yields, by name and labels."""
    context = SimpleNamespace(store=loop.store, scheduler=loop.scheduler, config=loop.config)
    samples = {}
    for family in StoreCollector(context).collect():  # type: ignore[arg-type]
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def two_nodes(tmp_path: Path) -> VirtualLoop:
    gpus = [GpuGroup(type="V100", count=2, node="a"), GpuGroup(type="V100", count=2, node="b")]
    return virtual_loop(tmp_path, gpus=gpus, gpu_poll=1.0)


def test_the_drivers_readings_of_each_gpu_and_each_running_job(tmp_path: Path) -> None:
    loop = two_nodes(tmp_path)
    assert not any(name.startswith("corral_gpu_util") for name, _ in scrape(loop))  # no driver
    readings = {
        0: GpuUsage(utilization=80.0, memory_used_gb=6.0),
        1: GpuUsage(utilization=60.0, memory_used_gb=2.0),
        2: GpuUsage(utilization=0.0, memory_used_gb=0.0),
        3: GpuUsage(utilization=0.0, memory_used_gb=0.0),
    }
    loop.executor.gpu_usage = lambda: readings  # type: ignore[method-assign]
    job = loop.queue(command=["sleep", "30"], gpus=2)
    loop.run(3)
    held = loop.row(job).gpus
    assert sorted(held) == [0, 1]  # (consolidated on the first node)
    samples = scrape(loop)
    node = loop.scheduler.slots[0].node
    gpu_labels = (("gpu", "0"), ("node", node), ("type", "V100"))
    assert samples[("corral_gpu_utilization_percent", gpu_labels)] == 80.0
    assert samples[("corral_gpu_memory_used_bytes", gpu_labels)] == 6e9
    assert len([k for k in samples if k[0] == "corral_gpu_utilization_percent"]) == 4
    job_labels = (("job", str(job)), ("user", "alice"))
    assert samples[("corral_job_gpu_utilization_percent", job_labels)] == 70.0
    assert samples[("corral_job_gpu_memory_bytes", job_labels)] == 8e9  # alone on its GPUs
    loop.run(40)
    assert loop.row(job).status == "SUCCEEDED"
    samples = scrape(loop)
    assert not [k for k in samples if k[0] == "corral_job_gpu_utilization_percent"]
    loop.close()


def test_a_lost_node_is_told_apart_from_a_drained_one(tmp_path: Path) -> None:
    loop = two_nodes(tmp_path)
    loop.run(1)
    first, second = sorted({slot.node for slot in loop.scheduler.slots})
    samples = scrape(loop)
    for node in (first, second):
        assert samples[("corral_node_state", (("node", node), ("state", "up")))] == 1
        for other in ("drained", "down"):  # every state from the start, at 0
            assert samples[("corral_node_state", (("node", node), ("state", other)))] == 0
    loop.executor.fail_node(second)  # lost: Ray's node died
    with loop.store.session() as s:  # drained: an admin took it out of service
        s.scalars(select(NodeRow).where(NodeRow.name == first)).one().state = "drained"
    loop.scheduler.nodes_changed()
    loop.run(2)
    samples = scrape(loop)
    assert samples[("corral_node_state", (("node", first), ("state", "drained")))] == 1
    assert samples[("corral_node_state", (("node", second), ("state", "down")))] == 1
    assert samples[("corral_node_state", (("node", second), ("state", "up")))] == 0
    gpus = {state: samples[("corral_gpus", (("state", state), ("type", "V100")))] for state in
            ("allocated", "idle", "drained", "lost", "failed")}  # fmt: skip
    assert gpus == {"allocated": 0, "idle": 0, "drained": 2, "lost": 2, "failed": 0}
    loop.executor.return_node(second)
    loop.scheduler.nodes_changed()
    loop.run(2)
    samples = scrape(loop)
    assert samples[("corral_node_state", (("node", second), ("state", "up")))] == 1
    assert samples[("corral_gpus", (("state", "lost"), ("type", "V100")))] == 0
    loop.close()
