"""Progress from heartbeats reaches the policy: a job whose owner guessed an hour but
whose heartbeats say it ends in seconds is not preempted by SRTF for a 60 s job."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli import app
from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import TERMINAL, TOKENS

pytest.importorskip("torch")
pytest.importorskip("sklearn")


def test_srtf_ranks_a_running_job_by_its_measured_remaining_time(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path, "srtf", users=TOKENS, stop_grace=10)
    try:
        service.start()
        task = {"factory": "corral.examples.tasks:digits", "steps": 1500, "kwargs": {"seed": 1}}
        long_guess = service.client.submit(
            {"name": "fast", "task": task, "gpus": 4, "duration": "1h"}
        )
        wait_for(
            lambda: service.client.job(long_guess["id"])["throughput"] is not None,
            60,
            "a heartbeat with a throughput",
        )
        short = service.client.submit({"command": ["sleep", "1"], "gpus": 4, "duration": 60})
        shown = wait_for(
            lambda: (
                (r := service.client.job(long_guess["id"])["remaining"])
                and r["source"] == "heartbeats"
                and r
            ),
            30,
            "the measured remaining time",
        )
        assert shown["seconds"] < 600  # seconds of steps left, not the hour guessed
        assert service.client.job(short["id"])["remaining"]["source"] == "duration"
        env = {"CORRAL_URL": service.url, "CORRAL_TOKEN": TOKENS["alice"], "COLUMNS": "200"}
        listed = CliRunner().invoke(app, ["queue"], env=env)
        assert listed.exit_code == 0 and "left" in listed.output and "00:01:00" in listed.output
        for job in (long_guess, short):
            wait_for(lambda j=job: service.client.job(j["id"])["status"] in TERMINAL, 120)
        fast, then = service.client.job(long_guess["id"]), service.client.job(short["id"])
        assert fast["status"] == then["status"] == "SUCCEEDED"
        assert fast["preemptions"] == 0  # its heartbeats said seconds, not the hour guessed
        assert then["first_start"] >= fast["end_time"]
        assert fast["remaining"] is None  # ended
    finally:
        service.close()
