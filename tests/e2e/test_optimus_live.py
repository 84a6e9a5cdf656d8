"""Optimus live: a real training job that trains to a target loss has its work
left predicted from the loss curve its heartbeats report, and the prediction
converges on the truth; a job resized by the policy resumes from its
checkpoint at its new size (batch scaled with it) and reports what goodput
models read (batch size, gradient noise scale).

The tiny transformer example trains until its loss, averaged over 50 steps,
reaches 0.35 (about 570 steps; 0.02 s of extra work per step makes it ~20 s).
Once it has done half of the steps it will end up doing, the service's
prediction of its length (steps done + predicted seconds left x measured
steps/s) must be within 25% of the steps it really took.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corral.runtime.storage.store import JobRow
from corral.testing.service_process import ServiceProcess, wait_for

pytest.importorskip("torch")

TARGET = 0.35


@pytest.mark.long  # a minute of real training; Optimus' fit in tests/policies/test_optimus.py
def test_optimus_predicts_a_training_job_from_its_loss_curve(tmp_path: Path) -> None:
    service = ServiceProcess(
        tmp_path,
        "optimus",
        gpus=[{"type": "V100", "count": 2}],
        heartbeat_interval=0.2,
    )
    service.start()
    try:
        spec = {
            "name": "transformer",
            "command": [
                sys.executable,
                "-m",
                "corral.examples.tiny_transformer",
                "--steps",
                "5000",
                "--step-time",
                "0.02",
                "--target-loss",
                str(TARGET),
                "--noise-every",
                "10",
            ],
            "gpus": 1,
            "target_loss": TARGET,
        }
        job = service.client.submit(spec)["id"]
        samples: list[tuple[float, float, float | None, dict | None]] = []

        def ended() -> bool:
            view = service.client.job(job)
            samples.append((view["loss"], view["steps"], view["throughput"], view["remaining"]))
            return view["status"] in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT")

        wait_for(ended, timeout=120, what="the training job to end")
        view = service.client.job(job)
        assert view["status"] == "SUCCEEDED", view
        final = view["steps"]
        assert 300 < final < 5000  # it stopped at its target, not at --steps
        predicted = [
            (steps, steps + left["seconds"] * rate)
            for _, steps, rate, left in samples
            if left is not None and left["source"] == "convergence" and rate
        ]
        assert predicted, f"no convergence estimate was ever shown: {samples[::10]}"
        at_half = next(total for steps, total in predicted if steps >= final / 2)
        assert at_half == pytest.approx(final, rel=0.25)
        shown = service.client.json("GET", f"/v1/jobs/{job}")
        assert shown["spec"]["target_loss"] == TARGET
        # the curve the fit reads is in the store (a restarted service fits the same points)
        store = service.store()
        try:
            with store.session() as s:
                curve = s.get(JobRow, job).loss_curve
        finally:
            store.dispose()
        assert len(curve["steps"]) >= 20 and curve["steps"][-1] <= final
        assert curve["steps"] == sorted(curve["steps"])
        # what goodput models read: the batch and an estimate of the noise scale
        assert shown["batch_size"] == 32
        assert shown["grad_noise_scale"] is not None and shown["grad_noise_scale"] > 0
    finally:
        service.stop()
    assert "Traceback" not in service.log.read_text()


def _transformer(steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "corral.examples.tiny_transformer",
        "--steps",
        str(steps),
        "--step-time",
        "0.02",
        "--elastic-batch",
        "--checkpoint-every",
        "1",
    ]


def test_a_resized_job_resumes_at_its_new_size(tmp_path: Path) -> None:
    """Alone on 2 GPUs, a 1-GPU job is grown onto both (Optimus assumes linear
    scaling until it has measured otherwise) and trains at twice the batch; a
    second job arrives to no free GPU, so the GPUs are re-divided at once: the
    first job is stopped at a checkpoint and resumes on one GPU at its own
    batch."""
    service = ServiceProcess(tmp_path, "optimus", gpus=[{"type": "V100", "count": 2}])
    service.start()
    try:
        first = service.client.submit({"name": "grown", "command": _transformer(1500), "gpus": 1})[
            "id"
        ]
        wait_for(
            lambda: service.client.job(first)["batch_size"] == 64,
            timeout=60,
            what="the first job to train on 2 GPUs at batch 64",
        )
        second = service.client.submit({"name": "second", "command": _transformer(100), "gpus": 1})[
            "id"
        ]
        wait_for(
            lambda: (
                service.client.job(first)["batch_size"] == 32
                and service.client.job(first)["status"] == "RUNNING"
            ),
            timeout=60,
            what="the first job to resume on 1 GPU at batch 32",
        )
        attempts = service.client.json("GET", f"/v1/jobs/{first}")["attempts"]
        assert [len(a["gpus"]) for a in attempts[:2]] == [2, 1]
        assert attempts[0]["cause"] == "preempted"
        assert attempts[1]["steps_start"] > 0  # resumed from its checkpoint
        wait_for(
            lambda: service.client.job(second)["status"] == "SUCCEEDED",
            timeout=60,
            what="the second job to end",
        )
        service.client.action(first, "cancel")
        # its process outlives the service otherwise (jobs survive restarts)
        wait_for(
            lambda: service.client.job(first)["status"] == "CANCELLED",
            timeout=30,
            what="the job to be cancelled",
        )
    finally:
        service.stop()
    assert "Traceback" not in service.log.read_text()
