"""sbatch's ``--exclusive``: a node that runs an exclusive job runs nothing else,
whatever the policy would have placed there (the loop fences its free GPUs and
refuses starts beside it)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from corral.errors import InputError
from corral.runtime.jobspec.directives import script_fields
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.exclusive import EXCLUSIVE_WAIT
from corral.runtime.storage.store import Store
from tests.runtime.harness import Harness, auth, check_history, wait_for

PY = sys.executable


def sleeper(seconds: float) -> dict[str, object]:
    return {"command": [PY, "-c", f"import time; time.sleep({seconds})"], "duration": seconds}


def test_an_exclusive_job_has_its_node_alone(tmp_path: Path) -> None:
    """4 virtual GPUs: 2 V100 on one node, 2 K80 on another. A runs on a K80; the
    exclusive W waits for the K80 node to be idle (A still on it) and says why; the
    exclusive X takes a V100 and keeps the other V100 from Y, though it is free
    and SJF (shortest first) would otherwise start Y at once."""
    h = Harness(tmp_path / "state", policy="sjf", policy_options={})
    try:
        a = h.submit(**sleeper(4), gpus=1, gpu_type="K80", name="a")
        h.wait_state(a["id"], {"RUNNING"})
        x = h.submit(**sleeper(3), gpus=1, gpu_type="V100", exclusive=True, name="x")
        h.wait_state(x["id"], {"RUNNING"})
        w = h.submit(**sleeper(2), gpus=1, gpu_type="K80", exclusive=True, name="w")
        waiting = wait_for(
            lambda: (j := h.job(w["id"]))["reason"] == EXCLUSIVE_WAIT and j, 10, "w's reason"
        )
        assert waiting["status"] == "PENDING"  # a K80 is free, but a runs on that node
        y = h.submit(**sleeper(0.5), gpus=1, gpu_type="V100", name="y")
        time.sleep(1.0)  # several passes: SJF would start y on the free V100 at once
        assert h.job(y["id"])["status"] == "PENDING"
        running_x = h.job(x["id"])
        assert running_x["status"] == "RUNNING"
        node = {slot.id: slot.node for slot in h.scheduler.slots}
        x_node = node[running_x["assigned_gpus"][0]]
        # the other V100 is out of the policy's sight, not only refused after it plans
        assert h.scheduler.fenced and {node[g] for g in h.scheduler.fenced} == {x_node}
        done = h.wait_done([a["id"], x["id"], y["id"], w["id"]])
        assert [j["status"] for j in done] == ["SUCCEEDED"] * 4
        attempts = h.attempts()
        check_history(attempts)
        exclusive = {x["id"], w["id"]}
        for e in (r for r in attempts if r.job_id in exclusive):
            mine = {node[g] for g in e.gpus}
            for other in attempts:
                if other.job_id == e.job_id or not mine & {node[g] for g in other.gpus}:
                    continue
                assert other.end_time <= e.start_time or other.start_time >= e.end_time, (
                    f"job {other.job_id} ran on {mine} beside exclusive job {e.job_id}"
                )
        assert not h.scheduler.fenced  # every fenced GPU came back
    finally:
        h.close()


def test_exclusive_is_read_from_sbatch_lines_and_takes_no_value(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gpus 1\n#SBATCH --exclusive\npython train.py\n")
    assert JobSpec.model_validate(script_fields(script)).exclusive
    script.write_text("#!/bin/bash\n#SBATCH --exclusive=user\npython train.py\n")
    with pytest.raises(InputError, match=r"train.sh:2: field '--exclusive'.*takes no value"):
        script_fields(script)


def test_an_operator_can_keep_exclusive_jobs_for_admins(tmp_path: Path) -> None:
    """A 1-GPU exclusive job holds a whole node while quotas count one GPU: a service
    may refuse it to users (``allow_exclusive: false``); admins may still submit it."""
    h = Harness(tmp_path / "state", policy="fifo", policy_options={}, allow_exclusive=False)
    try:
        spec = {**sleeper(0.1), "gpus": 1, "exclusive": True}
        refused = h.client.post("/v1/jobs", json=spec, headers=auth("alice"))
        assert refused.status_code == 403 and "allow_exclusive" in refused.json()["detail"]
        assert h.submit(user="root", **spec)["id"]
    finally:
        h.close()


def test_an_exclusive_job_planned_with_others_on_one_node_never_idles_it(
    tmp_path: Path,
) -> None:
    """One node: FIFO plans a job, an exclusive one and more together on it. Each
    pass used to drop them all (every start was beside the exclusive one), so the
    node stayed idle for good; now the first comes first, and everyone runs."""
    from corral.runtime.jobspec.config import GpuGroup
    from corral.testing.virtual import VirtualClock, run_for, virtual_scheduler
    from tests.runtime.harness import make_config
    from tests.runtime.virtual_loop import queue, states

    config = make_config(
        tmp_path, policy="fifo", policy_options={}, gpus=[GpuGroup(type="V100", count=8)]
    )
    store = Store(config.store_url)
    clock = VirtualClock()
    scheduler = virtual_scheduler(config, store, clock)
    jobs = [queue(store, "alice", clock, command=["sleep", "5"])]
    jobs.append(queue(store, "alice", clock, command=["sleep", "5"], exclusive=True))
    jobs += [queue(store, "bob", clock, command=["sleep", "5"]) for _ in range(3)]
    run_for(scheduler, clock, 60)
    assert all(states(store)[j][0] == "SUCCEEDED" for j in jobs), states(store)
