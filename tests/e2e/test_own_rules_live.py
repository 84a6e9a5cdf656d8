"""A placement strategy and an admission rule of one's own, given by file in the
service's config, in ``corral serve`` with real processes: worst fit spreads 1-GPU
jobs over nodes, a gang over the quota is refused, an arrival while the queue is
full is delayed and then runs."""

from __future__ import annotations

import sys
from pathlib import Path

from corral.testing.service_process import ServiceProcess, kill_open_attempts, wait_for

EXAMPLES = Path(__file__).parents[2] / "examples" / "policies"
PY = sys.executable


def sleeper(seconds: float, gpus: int = 1) -> dict[str, object]:
    return {"command": [PY, "-c", f"import time; time.sleep({seconds})"], "gpus": gpus}


def test_worst_fit_and_a_queue_cap_in_corral_serve(tmp_path: Path) -> None:
    service = ServiceProcess(
        tmp_path,
        "fifo",
        gpus=[{"type": "V100", "count": 2, "node": "a"}, {"type": "V100", "count": 2, "node": "b"}],
        placement=f"{EXAMPLES / 'worst_fit.py'}:WorstFit",
        admission=f"{EXAMPLES / 'queue_cap.py'}:QueueCap[waiting=1,max_gpus=2,recheck=1]",
    )
    service.start()
    client = service.client
    try:
        spread = [client.submit(sleeper(5))["id"] for _ in range(2)]
        running = [
            wait_for(lambda j=j: client.job(j)["assigned_gpus"], 30, "a start") for j in spread
        ]
        assert {g // 2 for gpus in running for g in gpus} == {0, 1}  # one on each node
        big = client.submit(sleeper(1, gpus=3))["id"]
        refused = wait_for(
            lambda: (j := client.job(big))["status"] == "CANCELLED" and j, 30, "refusal"
        )
        assert refused["reason"].startswith("AdmissionRefused (asks for 3 GPUs")
        full = [client.submit(sleeper(5))["id"] for _ in range(2)]  # every GPU taken
        wait_for(lambda: all(client.job(j)["status"] == "RUNNING" for j in full), 30, "full")
        filler = client.submit(sleeper(1))["id"]  # admitted: it waits for a GPU
        wait_for(lambda: client.job(filler)["reason"] == "Resources", 30, "the filler waits")
        late = client.submit(sleeper(1))["id"]
        wait_for(
            lambda: (client.job(late)["reason"] or "").startswith("AdmissionDelay"), 30, "the delay"
        )
        for job in (*spread, *full, filler, late):
            wait_for(lambda j=job: client.job(j)["status"] == "SUCCEEDED", 90, f"job {job} ends")
    finally:
        service.stop()
        kill_open_attempts(service.attempts())
