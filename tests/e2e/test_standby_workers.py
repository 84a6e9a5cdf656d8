"""Standby workers live: a job given as a task starts in a worker that already has
PyTorch loaded, is preempted (checkpoint, exit), resumes, and ends with exactly
the weights of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.runtime.execution.standby import WARM_MARK
from corral.testing.service_process import ServiceProcess, wait_for
from corral.train import checkpoint
from corral.train.task import load_factory
from tests.runtime.harness import TERMINAL, TOKENS

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

STEPS = 400


def test_a_task_job_starts_warm_is_preempted_and_ends_as_if_never_stopped(
    tmp_path: Path,
) -> None:
    service = ServiceProcess(
        tmp_path,
        "las",
        {"quantum": 1.5},
        users=TOKENS,
        workers={"standby": 1},
        stop_grace=20,
    )
    try:
        service.start()
        wait_for(
            lambda: service.admin.json("GET", "/v1/health")["standby_ready"] >= 4,
            60,
            "one standby worker per GPU",
        )
        # at least 8 s of training (step_time does not change what is computed), so
        # the second job surely arrives, and preempts it, before it could end
        kwargs = {"seed": 3, "step_time": 0.02}
        task = {"factory": "corral.examples.tasks:digits", "steps": STEPS, "kwargs": kwargs}
        first = service.client.submit({"name": "task", "task": task, "gpus": 4})
        wait_for(lambda: service.client.job(first["id"])["steps"] > 20, 60, "the task to train")
        other = service.client.submit({"command": ["sleep", "2"], "gpus": 4})
        for job in (first, other):
            wait_for(lambda j=job: service.client.job(j["id"])["status"] in TERMINAL, 120)
        done = service.client.job(first["id"])
        assert done["status"] == "SUCCEEDED", done
        causes = [a["cause"] for a in done["attempts"]]
        assert causes[0] == "preempted" and causes[-1] == "succeeded", causes
        assert WARM_MARK in service.client.logs(first["id"], 0, 1).text  # started warm
        saved = checkpoint.load(tmp_path / "state-jobs" / str(first["id"]) / "checkpoint")
        assert saved is not None and saved["step"] == STEPS
        alone = load_factory(task["factory"])(seed=3)
        for step in range(STEPS):
            alone.step(step)
        expected = alone.model.state_dict()
        assert all(torch.equal(saved["state"]["model"][k], expected[k]) for k in expected)
    finally:
        service.close()
