"""Every job ends: jobs that never checkpoint are not preempted for ever (live)."""

from __future__ import annotations

from pathlib import Path

from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import TERMINAL


def test_eight_sleeps_of_six_seconds_under_las_with_a_three_second_quantum_all_end(
    tmp_path: Path,
) -> None:
    """The livelock the rule of corral.model.unsaved_work ends: 8 x `sleep 6` on 4 GPUs
    under LAS with a 3 s quantum; before it, after 90 s none had finished."""
    service = ServiceProcess(
        tmp_path, "las", {"quantum": 3}, gpus=[{"type": "V100", "count": 4}], tick=0.1
    )
    service.start()
    try:
        ids = [service.client.submit({"command": ["sleep", "6"]})["id"] for _ in range(8)]
        for job in ids:
            wait_for(lambda j=job: service.admin.job(j)["status"] in TERMINAL, 120, f"job {job}")
        jobs = [service.admin.job(j) for j in ids]
        assert [j["status"] for j in jobs] == ["SUCCEEDED"] * 8
        attempts = [len(j["attempts"]) for j in jobs]
        assert max(attempts) <= 3, attempts  # a cut run is followed by one twice as long
    finally:
        service.close()
