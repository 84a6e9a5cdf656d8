"""Pollux live: a job that states its model and batch size and reports its
gradient noise scale has its batch tuned by the policy, sent in heartbeat
answers, and trains at it from its next step without a restart; its step
times, read from its heartbeats, teach the policy how it scales."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from corral.testing.service_process import ServiceProcess, wait_for

JOB = """
import time
from corral.train import Session

session = Session(checkpoint_every=3600)
batch = session.batch_size or 128
for step in range(1, 100000):
    if session.batch_size and session.batch_size != batch:
        batch = session.batch_size
    time.sleep(0.01)
    session.report(step, loss=1.0 / step, batch_size=batch, grad_noise_scale=1e6)
    if session.should_stop:
        session.stop(step)
"""


@contextmanager
def _cifar_job(tmp_path: Path, options: dict[str, Any]) -> Iterator[tuple[ServiceProcess, int]]:
    """A Pollux service on 4 T4s running one CIFAR-10 job at batch 128 (the
    job above); cancels the job and stops the service afterwards."""
    service = ServiceProcess(
        tmp_path, "pollux", options, gpus=[{"type": "T4", "count": 4}], heartbeat_interval=0.2
    )
    service.start()
    try:
        job = service.client.submit(
            {
                "name": "cifar",
                "command": [sys.executable, "-c", JOB],
                "gpus": 1,
                "model": "cifar10",
                "batch_size": 128,
            }
        )["id"]
        yield service, job
        service.client.action(job, "cancel")
        # its process outlives the service otherwise (jobs survive restarts)
        wait_for(
            lambda: service.client.job(job)["status"] == "CANCELLED",
            timeout=30,
            what="the job to be cancelled",
        )
    finally:
        service.stop()
    assert "Traceback" not in service.log.read_text()


def test_pollux_tunes_a_reporting_jobs_batch_size(tmp_path: Path) -> None:
    # batch tuning alone (one GPU at most: no resize)
    with _cifar_job(tmp_path, {"interval": 1.0, "max_gpus": 1}) as (service, job):
        # launched at its own batch (no noise scale known yet) ...
        wait_for(
            lambda: service.client.job(job)["batch_size"] == 128,
            timeout=60,
            what="the job to report its own batch size",
        )
        # ... then, with a large noise scale reported, a larger one
        view = wait_for(
            lambda: (v := service.client.job(job))["batch_size"] > 128 and v,
            timeout=60,
            what="the policy to raise the batch size",
        )
        assert view["grad_noise_scale"] == 1e6
        assert view["status"] == "RUNNING"
        attempts = service.client.json("GET", f"/v1/jobs/{job}")["attempts"]
        assert len(attempts) == 1  # tuned without a restart


def test_pollux_learns_a_live_jobs_scaling_from_its_heartbeats(tmp_path: Path) -> None:
    """A job that has only run on one GPU is grown to two once its step time
    there is measured (its heartbeats' throughput), not further: Pollux
    trusts its learnt model no further than twice the GPUs it has seen.
    (Without the re-allocation penalty, which would keep a job this young,
    seconds old against its 30-s restart delay, where it is.)"""
    with _cifar_job(tmp_path, {"interval": 1.0, "restart_delay": 0}) as (service, job):
        grown = wait_for(
            lambda: len(a := service.client.json("GET", f"/v1/jobs/{job}")["attempts"]) >= 2 and a,
            timeout=60,
            what="the job to be resized once measured",
        )
        assert len(grown[0]["gpus"]) == 1
        assert len(grown[1]["gpus"]) == 2  # twice what was measured, not all four


def test_an_unknown_model_is_refused_with_the_known_ones() -> None:
    from pydantic import ValidationError

    from corral.runtime.jobspec.specs import JobSpec

    with pytest.raises(ValidationError, match=r"no performance model for 'alexnet'.*resnet50"):
        JobSpec.model_validate({"command": ["true"], "model": "alexnet"})
