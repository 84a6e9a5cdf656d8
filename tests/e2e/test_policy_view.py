"""A job's page shows the policy's own view of it: Tiresias' queue, Gavel's share."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli import app
from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import TERMINAL, TOKENS


@pytest.mark.parametrize(
    ("policy", "key", "starts"),
    [
        ("tiresias-las", "queue", "1 of "),
        ("gavel", "share of time", ""),
    ],
)
def test_a_running_job_shows_the_policys_view_and_an_ended_one_none(
    tmp_path: Path, policy: str, key: str, starts: str
) -> None:
    service = ServiceProcess(tmp_path, policy, users=TOKENS, stop_grace=5)
    try:
        service.start()
        job = service.client.submit({"command": ["sleep", "60"], "gpus": 1, "duration": 60})
        view = wait_for(
            lambda: (
                (v := service.client.job(job["id"]))["status"] == "RUNNING"
                and v["policy_view"].get(key)
                and v["policy_view"]
            ),
            30,
            f"{policy}'s view of a running job",
        )
        assert view[key].startswith(starts)
        if policy == "gavel":  # its one job gets all of the fastest type's time it can use
            assert "%" in view[key] and ("V100" in view[key] or "K80" in view[key])
        else:
            assert view["promotions"] == "0"
            service_text = view["service in this queue"]
            assert re.match(r"\d\d:\d\d:\d\d GPU-time, moves down at ", service_text)
        env = {"CORRAL_URL": service.url, "CORRAL_TOKEN": TOKENS["alice"], "COLUMNS": "200"}
        shown = CliRunner().invoke(app, ["show", str(job["id"])], env=env)
        assert shown.exit_code == 0 and f"policy    {key}: " in shown.output  # the CLI too
        service.client.action(job["id"], "cancel")
        wait_for(lambda: service.client.job(job["id"])["status"] in TERMINAL, 60)
        assert service.client.job(job["id"])["policy_view"] == {}
    finally:
        service.close()
