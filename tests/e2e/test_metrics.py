"""``/metrics`` in Prometheus' text format, scraped with curl as Prometheus would:
the series the issue lists are there and change as jobs run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import TOKENS

PY = sys.executable


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    made = ServiceProcess(
        tmp_path_factory.mktemp("metrics"), "fifo", users=TOKENS,
        gpus=[{"type": "V100", "count": 2}, {"type": "K80", "count": 1}],
    )  # fmt: skip
    made.start()
    yield made
    made.close()


def scrape(
    service: ServiceProcess, token: str | None = TOKENS["alice"]
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, by name and labels (curl, as a scraper would)."""
    args = ["curl", "-s", "-w", "\n%{http_code}", f"{service.url}/metrics"]
    if token:
        args += ["-H", f"Authorization: Bearer {token}"]
    if shutil.which("curl") is None:  # pragma: no cover - curl is in every CI image we use
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = httpx.get(f"{service.url}/metrics", headers=headers)
        body, code = answer.text, answer.status_code
    else:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
        body, _, code_text = out.rpartition("\n")
        code = int(code_text)
    if code != 200:
        return {("__status__", ()): float(code)}
    samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_need_a_token(service: ServiceProcess) -> None:
    assert scrape(service, token=None) == {("__status__", ()): 401.0}


def test_the_series_change_as_jobs_run(service: ServiceProcess) -> None:
    before = scrape(service)
    assert value(before, "corral_gpus", type="V100", state="idle") == 2
    assert value(before, "corral_gpus", type="K80", state="idle") == 1
    # every label value is there from the start, at 0 (increase() then sees the first)
    for state in ("allocated", "drained", "failed"):
        assert ("corral_gpus", (("state", state), ("type", "K80"))) in before
    for cause in ("succeeded", "user_error", "node_failure", "preempted"):
        assert ("corral_attempts_total", (("cause", cause),)) in before
    for state in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"):
        assert ("corral_jobs_finished_total", (("state", state),)) in before
        assert ("corral_jobs", (("state", state),)) not in before  # live states only
    stepped = value(before, "corral_loop_last_step_timestamp_seconds")
    assert abs(stepped - time.time()) < 30  # the loop goes round
    client = service.client
    # one job that holds a GPU while we look, one that fails, one that succeeds
    long = client.submit({"name": "long", "command": [PY, "-c", "import time; time.sleep(60)"],
                          "gpus": 1, "vc": "lab"})  # fmt: skip
    wait_for(lambda: client.job(long["id"])["status"] == "RUNNING", 60, "the long job to run")
    bad = client.submit({"name": "bad", "command": [PY, "-c", "raise SystemExit(3)"], "gpus": 1,
                         "max_retries": 0})  # fmt: skip
    good = client.submit({"name": "good", "command": [PY, "-c", "pass"], "gpus": 1})
    for job in (bad, good):
        wait_for(lambda j=job: client.job(j["id"])["status"] in ("FAILED", "SUCCEEDED"), 90)
    during = scrape(service)
    assert (
        value(during, "corral_jobs", state="RUNNING")
        == value(before, "corral_jobs", state="RUNNING") + 1
    )
    assert (
        value(during, "corral_jobs_finished_total", state="SUCCEEDED")
        >= value(before, "corral_jobs_finished_total", state="SUCCEEDED") + 1
    )
    assert (
        value(during, "corral_jobs_finished_total", state="FAILED")
        >= value(before, "corral_jobs_finished_total", state="FAILED") + 1
    )
    assert value(during, "corral_gpus_in_use", vc="lab", user="alice") == 1  # the long job
    assert value(during, "corral_loop_last_step_timestamp_seconds") > stepped
    assert value(during, "corral_attempts_total", cause="succeeded") >= 1
    assert sum(v for (n, labels), v in during.items() if n == "corral_attempts_total") >= 2
    allocated = sum(
        v for (n, labels), v in during.items()
        if n == "corral_gpus" and ("state", "allocated") in labels
    )  # fmt: skip
    assert allocated == 1
    assert value(during, "corral_pass_seconds_count", policy="fifo") > value(
        before, "corral_pass_seconds_count", policy="fifo"
    )
    assert (
        value(during, "corral_api_requests_total", route="/v1/jobs", method="POST", status="201")
        + value(during, "corral_api_requests_total", route="/v1/jobs", method="POST", status="200")
        >= 3
    )
    # a job id never becomes a label: the route's template does
    routes = {dict(labels)["route"] for (n, labels) in during if n == "corral_api_requests_total"}
    assert "/v1/jobs/{job_id}" in routes
    assert not any(re.search(r"/\d+(/|$)", route) for route in routes), routes
    # a waiting job shows in its VC's and user's queue, with its wait
    for _ in range(2):
        client.submit({"name": "waits", "command": [PY, "-c", "import time; time.sleep(60)"],
                       "gpus": 2, "vc": "lab"})  # fmt: skip

    def queued_now() -> dict | None:  # type: ignore[type-arg]
        now = scrape(service)
        return now if value(now, "corral_queue_jobs", vc="lab", user="alice") >= 1 else None

    queued = wait_for(queued_now, 30, "a queued job in the metrics")
    assert value(queued, "corral_queue_oldest_wait_seconds", vc="lab", user="alice") >= 0
    client.action(long["id"], "cancel")


def test_a_grafana_dashboard_reads_the_series() -> None:
    import json

    board = json.loads((Path(__file__).parents[2] / "docs" / "grafana" / "corral.json").read_text())
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p.get("targets", []))
    for series in ("corral_jobs", "corral_queue_jobs", "corral_gpus", "corral_pass_seconds_bucket",
                   "corral_preemptions_total", "corral_attempts_total", "corral_api_requests_total",
                   "corral_queue_oldest_wait_seconds", "corral_gpus_in_use",
                   "corral_jobs_finished_total",
                   "corral_loop_last_step_timestamp_seconds", "corral_node_state",
                   "corral_gpu_utilization_percent", "corral_gpu_memory_used_bytes",
                   "corral_job_gpu_utilization_percent"):  # fmt: skip
        assert series in exprs, series
    # one service's figures at a time, chosen by its instance (two are never summed)
    assert any(v["name"] == "instance" for v in board["templating"]["list"])
    for panel in board["panels"]:
        for target in panel["targets"]:
            assert target["expr"].count("corral_") == target["expr"].count('instance="$instance"')


def test_the_operators_series_are_there_from_the_first_scrape(service: ServiceProcess) -> None:
    """The process's own series, the version, the jobs set aside, and the queue of every
    user at 0 while it is empty: alerts and graphs need them before anything happens."""
    samples = scrape(service)
    names = {name for name, _ in samples}
    assert {
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_resident_memory_bytes",
    } <= names
    assert any(name == "corral_build_info" for name, _ in samples)
    assert ("corral_jobs_set_aside", ()) in samples
    for user in TOKENS:
        assert ("corral_queue_jobs", (("user", user), ("vc", "default"))) in samples
        assert ("corral_gpus_in_use", (("user", user), ("vc", "default"))) in samples


def test_the_wait_from_submission_to_start_is_a_histogram(service: ServiceProcess) -> None:
    before = value(scrape(service), "corral_job_wait_seconds_count")
    job = service.client.submit({"command": ["true"], "gpus": 1})
    wait_for(lambda: service.client.job(job["id"])["first_start"] is not None, 120, "its start")
    samples = scrape(service)
    count = value(samples, "corral_job_wait_seconds_count")
    assert count >= before + 1  # (this one, and any of the module's still waiting before)
    assert value(samples, "corral_job_wait_seconds_bucket", le="+Inf") == count
