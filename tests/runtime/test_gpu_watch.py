"""The live loop on GPUs its driver reports (a fake of NVIDIA's management
library): NVLink into the cluster's links, a GPU's fault draining its node with
the driver's words and ending the job's attempt as a node failure, and each
running job's measured GPU use in its view."""

from __future__ import annotations

from pathlib import Path

from corral.model.cluster import LINK_PRESETS
from corral.runtime.execution.gpu_driver import open_driver
from corral.runtime.storage.store import AttemptRow

from .fake_nvml import nvlinked_board
from .harness import PY, Harness, auth, wait_for


def test_a_failed_gpu_drains_its_node_and_ends_its_job_as_a_node_failure(tmp_path: Path) -> None:
    nvml = nvlinked_board(2)
    h = Harness(
        tmp_path / "state",
        driver=open_driver(nvml),
        gpus="auto",
        policy="fifo",
        policy_options={},
        gpu_poll=0.2,
    )
    try:
        assert h.scheduler.cluster.links.intra_node == LINK_PRESETS["nvlink"]
        assert [s.gpu_type for s in h.scheduler.slots] == ["H100", "H100"]
        job = h.submit(command=[PY, "-c", "import time; time.sleep(60)"], gpus=1)
        running = h.wait_state(job["id"], {"RUNNING"})
        [gpu] = running["assigned_gpus"]

        def launched() -> int | None:  # RUNNING comes before the launch's pid is stored
            with h.store.session() as s:
                return s.query(AttemptRow).filter(AttemptRow.job_id == job["id"]).one().pid

        pid = h.wait_loop(launched, 60, "the job's process")
        # what the driver measures of the job: its GPU busy, memory held by its process
        nvml.gpus[gpu].utilization = 77.0
        nvml.gpus[gpu].used_gb = 4.0
        nvml.gpus[gpu].processes = {pid: 3.5, 999_999: 0.5}  # and a process not its own
        seen = h.wait_loop(
            lambda: (j := h.job(job["id"]))["gpu_utilization"] == 77.0 and j, 60, "GPU use"
        )
        assert seen["gpu_memory_gb"] == 3.5
        i = h.scheduler.live.index[job["id"]]
        assert h.scheduler.live.state.gpu_memory[i] == 3.5  # what AntMan's sharing reads

        nvml.gpus[gpu].ecc_uncorrected = 3
        node = wait_for(
            lambda: (
                (n := h.client.get("/v1/nodes", headers=auth("root")).json()[0])["state"]
                == "drained"
                and n
            ),
            30,
            "the node drained",
        )
        assert "3 uncorrected ECC errors" in node["reason"] and f"GPU {gpu}" in node["reason"]
        ended = wait_for(
            lambda: (j := h.job(job["id"]))["attempts"][0]["cause"] and j, 30, "attempt end"
        )
        first = ended["attempts"][0]
        assert first["cause"] == "node_failure", first
        assert "uncorrected ECC" in first["detail"] and "GPU failed" in first["detail"]
        assert h.wait_state(job["id"], {"PENDING"})["reason"] is not None
        assert [e.detail["reason"] for e in h.events("gpu_failed")] == ["3 uncorrected ECC errors"]

        # resumed while the GPU still fails: drained again; once it is healthy, used again
        h.client.post("/v1/nodes/" + node["name"] + "/resume", headers=auth("root"), json={})
        wait_for(lambda: len(h.events("gpu_failed")) == 2, 30, "drained again")
        nvml.gpus[gpu].ecc_uncorrected = 0
        h.client.post("/v1/nodes/" + node["name"] + "/resume", headers=auth("root"), json={})
        h.wait_state(job["id"], {"RUNNING"}, 60)
        up = h.client.get("/v1/nodes", headers=auth("root")).json()[0]
        assert up["state"] == "up" and up["reason"] is None
        h.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth("alice"))
        h.wait_state(job["id"], {"CANCELLED"})
    finally:
        h.close()


def test_an_xid_event_fails_the_gpu_and_pcie_machines_keep_the_default_links(
    tmp_path: Path,
) -> None:
    from .fake_nvml import FakeGpu, FakeNvml

    nvml = FakeNvml([FakeGpu(name="Tesla V100-PCIE-16GB") for _ in range(2)])
    h = Harness(tmp_path / "state", driver=open_driver(nvml), gpus="auto", gpu_poll=0.2)
    try:
        assert h.scheduler.cluster.links.intra_node == LINK_PRESETS["pcie"]
        nvml.events.append((1, 48))  # Xid 48: a double-bit ECC error
        wait_for(lambda: len(h.events("gpu_failed")) == 1, 30, "the Xid read")
        node = h.client.get("/v1/nodes", headers=auth("root")).json()[0]
        assert node["state"] == "drained" and "critical Xid 48" in node["reason"]
    finally:
        h.close()


def test_a_job_that_asked_no_requeue_ends_failed_when_its_gpu_fails(tmp_path: Path) -> None:
    nvml = nvlinked_board(2)
    h = Harness(tmp_path / "state", driver=open_driver(nvml), gpus="auto", gpu_poll=0.2)
    try:
        job = h.submit(command=[PY, "-c", "import time; time.sleep(60)"], gpus=1, requeue=False)
        [gpu] = h.wait_state(job["id"], {"RUNNING"})["assigned_gpus"]
        nvml.gpus[gpu].ecc_uncorrected = 1
        done = h.wait_state(job["id"], {"FAILED"})
        assert done["attempts"][0]["cause"] == "node_failure"
        assert "not requeued: the job asked --no-requeue" in done["reason"]
    finally:
        h.close()
