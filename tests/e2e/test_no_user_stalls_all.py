"""No input of one user stalls the cluster: extreme values are refused or solved, and a
job the policy cannot take fails alone, with a reason, while everyone else's run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.errors import CorralError
from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.runtime.jobspec.specs import MAX_SECONDS, MIN_WEIGHT
from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import PY, TERMINAL, Harness

SHORT = [PY, "-c", "import time; time.sleep(0.5)"]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Any]:
    made: list[ServiceProcess] = []

    def start(policy: str, options: dict[str, Any]) -> ServiceProcess:
        service = ServiceProcess(tmp_path / policy, policy, options, retry={"backoff": 0.5})
        made.append(service)
        service.start()
        return service

    yield start
    for service in made:
        service.close()


@pytest.mark.parametrize(
    ("policy", "extreme", "at_bound"),
    [
        ("gavel-max-min-fairness", {"weight": 1e-30}, {"weight": MIN_WEIGHT}),
        ("gavel-min-makespan", {"duration": 1e15}, {"duration": MAX_SECONDS}),
    ],
)
def test_an_extreme_value_is_refused_and_the_bound_still_schedules_everyone(
    live: Any, policy: str, extreme: dict[str, Any], at_bound: dict[str, Any]
) -> None:
    service = live(policy, {"round": 2})
    field = next(iter(extreme))
    with pytest.raises(CorralError, match=f"field '{field}'.*HTTP 422"):
        service.client.submit({"command": SHORT, **extreme})
    ids = [service.client.submit({"command": SHORT, **at_bound})["id"]]
    ids += [service.client.submit({"command": SHORT, "gpus": g})["id"] for g in (1, 2, 1, 2)]
    for job in ids:
        wait_for(lambda j=job: service.admin.job(j)["status"] in TERMINAL, 90, f"job {job}")
    assert [service.admin.job(j)["status"] for j in ids] == ["SUCCEEDED"] * len(ids)
    assert not service.events("policy_error")
    assert "Traceback" not in service.log.read_text()


def test_a_job_the_policy_cannot_schedule_fails_alone_and_the_rest_run(tmp_path: Path) -> None:
    """A policy that raises whenever one poisoned job waits: the loop finds that job by
    halving the queue, fails it with the policy's message, and schedules the others."""
    h = Harness(tmp_path / "state", policy="fifo", policy_options={})
    try:
        policy = h.scheduler.policy
        real = policy.schedule
        poisoned = 0.25

        def schedule(state: SchedulerState) -> Plan:
            waiting = [int(i) for i in state.pending]
            if any(state.weight[i] == poisoned for i in waiting):
                raise ValueError("the LP was refused by the solver")
            return real(state)

        policy.schedule = schedule  # type: ignore[method-assign]
        before = [h.submit(command=SHORT, gpus=g)["id"] for g in (1, 2)]
        bad = h.submit(command=SHORT, weight=poisoned)["id"]
        after = [h.submit(command=SHORT, gpus=g)["id"] for g in (1, 2, 1)]
        done = h.wait_done([*before, bad, *after])
        by_id = {j["id"]: j for j in done}
        assert [by_id[j]["status"] for j in before + after] == ["SUCCEEDED"] * 5
        assert by_id[bad]["status"] == "FAILED"
        assert by_id[bad]["reason"].startswith("PolicyError")
        assert "refused by the solver" in by_id[bad]["reason"]
        assert [e.job_id for e in h.events("policy_rejected")] == [bad]
    finally:
        h.close()
