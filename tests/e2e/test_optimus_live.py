"""Optimus live: a real training job that trains to a target loss has its work
left predicted from the loss curve its heartbeats report, and the prediction
converges on the truth.

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

from corral.runtime.service_process import ServiceProcess, wait_for

pytest.importorskip("torch")

TARGET = 0.35


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
    finally:
        service.stop()
    assert "Traceback" not in service.log.read_text()
