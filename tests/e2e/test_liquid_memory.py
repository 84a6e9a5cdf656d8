"""Liquid live: the GPU memory jobs report in their heartbeats teaches its
memory estimate, which its view of the next job of the same kind shows."""

from __future__ import annotations

from pathlib import Path

from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import PY, TERMINAL, TOKENS


def reporter(gb: float) -> list[str]:
    """A job reporting ``gb`` of peak GPU memory for a few heartbeats."""
    script = (
        "import time\n"
        "from corral.train import Session\n"
        "s = Session()\n"
        "for step in range(1, 16):\n"
        f"    s.report(step, gpu_memory={gb * 1e9})\n"
        "    time.sleep(0.2)\n"
    )
    return [PY, "-c", script]


def test_reported_memory_becomes_the_next_jobs_estimate(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path, "liquid", {"small": 3600}, users=TOKENS, stop_grace=5)
    try:
        service.start()
        client = service.client
        done = [
            client.submit(
                {"name": f"m{k}", "command": reporter(6.0), "gpus": 1, "job_type": "probe"}
            )
            for k in range(2)
        ]
        for job in done:
            wait_for(lambda job=job: client.job(job["id"])["status"] in TERMINAL, 60)
            assert client.job(job["id"])["status"] == "SUCCEEDED"
        sleeper = [PY, "-c", "import time; time.sleep(120)"]
        job = client.submit({"name": "next", "command": sleeper, "gpus": 1, "job_type": "probe"})
        wait_for(
            lambda: (
                client.job(job["id"])["policy_view"].get("predicted GPU memory") == "6.0 GB per GPU"
            ),
            30,
            "the memory the finished jobs reported to be the next job's estimate",
        )
        client.action(job["id"], "cancel")
    finally:
        service.close()
