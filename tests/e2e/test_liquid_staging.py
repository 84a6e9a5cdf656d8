"""Liquid's pre-scheduling, live: a waiting job's inputs are staged while the job
ahead of it still runs, so it starts with them there; without pre-scheduling the
attempt stages them itself before its command."""

from __future__ import annotations

import json
from pathlib import Path

from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import PY, TERMINAL, TOKENS


def stager(out: Path) -> list[str]:
    """A stage command that takes a second and records when it ran."""
    script = f"import time; time.sleep(1); open({str(out)!r}, 'a').write(f'{{time.time()}} ')"
    return [PY, "-c", script]


def needs(staged: Path) -> list[str]:
    """A job that fails unless its inputs were staged before it began."""
    script = f"import os, sys; sys.exit(0 if os.path.exists({str(staged)!r}) else 3)"
    return [PY, "-c", script]


def run(tmp_path: Path, policy: str, options: dict) -> tuple[dict, dict, list[float], str]:
    staged = tmp_path / "staged-at"
    service = ServiceProcess(
        tmp_path, policy, options, users=TOKENS, gpus=[{"type": "V100", "count": 1}]
    )
    try:
        service.start()
        # Liquid expects it to end after its launch phase and its stated 4 s, 10 s
        # after its start, and stages the next job's inputs a launch phase before
        first = service.client.submit(
            {"command": ["sleep", "10"], "gpus": 1, "duration": 4, "name": "first"}
        )
        wait_for(lambda: service.client.job(first["id"])["status"] == "RUNNING", 30)
        spec = {"command": needs(staged), "stage": stager(staged), "gpus": 1, "name": "second"}
        second = service.client.submit(spec)
        for job in (first, second):
            wait_for(lambda j=job: service.client.job(j["id"])["status"] in TERMINAL, 60)
        first, second = service.client.job(first["id"]), service.client.job(second["id"])
        times = [float(t) for t in staged.read_text().split()]
        log = service.client.logs(second["id"]).text
        events = [e.kind for e in service.events() if e.job_id == second["id"]]
        return first, second, times, log + json.dumps(events)
    finally:
        service.close()


def test_liquid_stages_a_waiting_jobs_inputs_while_the_job_ahead_runs(tmp_path: Path) -> None:
    first, second, times, log = run(tmp_path, "liquid", {"launch": 6.0})
    assert first["status"] == second["status"] == "SUCCEEDED"
    assert len(times) == 1  # staged once, early
    assert times[0] < first["end_time"]  # while the job ahead still ran
    assert "inputs already staged" in log and '"prestage"' in log and '"prestaged"' in log


def test_without_pre_scheduling_the_attempt_stages_first(tmp_path: Path) -> None:
    first, second, times, log = run(tmp_path, "fifo", {})
    assert first["status"] == second["status"] == "SUCCEEDED"
    assert len(times) == 1 and times[0] > first["end_time"]
    assert "staging inputs" in log and '"prestage"' not in log
