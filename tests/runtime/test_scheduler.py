"""The live scheduler with real processes on virtual GPUs (no network)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Update, select
from sqlalchemy.orm import Session

from corral.runtime.jobspec.config import PrerunConfig
from corral.runtime.storage.store import EventRow, JobRow, NodeRow
from tests.runtime.harness import PY, Harness, auth, check_history, wait_for


@pytest.fixture
def service(tmp_path: Path, store_url: str | None) -> Iterator[Harness]:
    h = Harness(tmp_path / "state", store=store_url)
    yield h
    h.close()


def sleeper(seconds: float) -> list[str]:
    return [PY, "-c", f"import time; time.sleep({seconds})"]


def gated(gate: Path, limit: float = 60.0) -> list[str]:
    """A job that runs until ``gate`` exists (at most ``limit`` s): timing-free ordering."""
    code = (
        "import os, sys, time; end = time.monotonic() + float(sys.argv[2])\n"
        "while not os.path.exists(sys.argv[1]) and time.monotonic() < end: time.sleep(0.05)"
    )
    return [PY, "-c", code, str(gate), str(limit)]


def test_job_runs_with_its_environment(service: Harness, tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    code = (
        "import json, os, sys; "
        f"json.dump({{k: v for k, v in os.environ.items() if k.startswith(('CORRAL_', 'CUDA'))}}, "
        f"open({str(out)!r}, 'w'))"
    )
    job = service.submit(name="env", gpus=2, gpu_type="k80", command=[PY, "-c", code])
    done = service.wait_state(job["id"], {"SUCCEEDED", "FAILED"})
    assert done["status"] == "SUCCEEDED", done
    env = json.loads(out.read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # virtual GPUs: the job runs on the CPU
    assert env["CORRAL_GPU_TYPES"] == "K80,K80"
    assert env["CORRAL_NUM_GPUS"] == env["CORRAL_NODE_GPUS"] == "2"
    assert env["CORRAL_JOB_ID"] == str(job["id"]) and env["CORRAL_ATTEMPT"] == "1"
    assert env["CORRAL_WORLD_SIZE"] == "1" and env["CORRAL_RANK"] == "0"
    assert env["CORRAL_CHECKPOINT_DIR"].endswith(f"jobs/{job['id']}/checkpoint")
    gpus = [int(g) for g in env["CORRAL_GPU_IDS"].split(",")]
    assert all(service.scheduler.slots[g].gpu_type == "K80" for g in gpus)
    assert done["attempts"][0]["cause"] == "succeeded"
    check_history(service.attempts())


def test_argv_is_never_given_to_a_shell(service: Harness, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    job = service.submit(command=["echo", f"; touch {marker}", "$(touch x)"])
    service.wait_state(job["id"], {"SUCCEEDED"})
    log = service.client.get(f"/v1/jobs/{job['id']}/logs", headers=auth("alice")).text
    assert log.strip() == f"; touch {marker} $(touch x)"
    assert not marker.exists()


def test_las_preempts_a_long_job_for_a_new_one(service: Harness, tmp_path: Path) -> None:
    gate = tmp_path / "release"
    long = service.submit(name="long", gpus=4, command=gated(gate))
    service.wait_state(long["id"], {"RUNNING"})
    short = service.submit(name="short", gpus=1, command=sleeper(0.5))
    service.wait_state(short["id"], {"SUCCEEDED"})
    gate.touch()
    jobs = service.wait_done([long["id"], short["id"]])
    assert [j["status"] for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    first = jobs[0]["attempts"][0]
    assert first["cause"] == "preempted"  # a plain script is killed and restarted
    assert jobs[0]["preemptions"] >= 1
    assert jobs[1]["attempts"][0]["start_time"] >= first["end_time"]
    check_history(service.attempts())


def test_failures_are_retried_with_backoff_then_fail(service: Harness) -> None:
    job = service.submit(command=[PY, "-c", "raise SystemExit(3)"], max_retries=2)
    done = service.wait_state(job["id"], {"FAILED"})
    causes = [a["cause"] for a in done["attempts"]]
    assert causes == ["user_error"] * 3
    assert "user_error" in done["reason"] and done["exit_code"] == 3
    gaps = [b["start_time"] - a["end_time"] for a, b in itertools.pairwise(done["attempts"])]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4  # doubling back-off (0.2 s, then 0.4 s)


def test_out_of_memory_and_missing_program_are_classified(service: Harness) -> None:
    oom = service.submit(
        command=[PY, "-c", "print('RuntimeError: CUDA out of memory.'); raise SystemExit(1)"],
        max_retries=0,
    )
    missing = service.submit(command=["/no/such/program"], max_retries=0)
    a, b = service.wait_done([oom["id"], missing["id"]])
    assert a["attempts"][0]["cause"] == "oom"
    assert b["attempts"][0]["cause"] == "user_error"
    assert "cannot start" in b["attempts"][0]["detail"]


def test_wall_time_limit_ends_in_timeout(service: Harness) -> None:
    job = service.submit(command=sleeper(30), wall_time="1s")
    done = service.wait_state(job["id"], {"TIMEOUT", "FAILED", "SUCCEEDED"}, timeout=20)
    assert done["status"] == "TIMEOUT"
    assert done["attempts"][0]["cause"] == "timeout"
    assert done["end_time"] - done["first_start"] < 10


def test_cancel_suspend_and_resume(service: Harness) -> None:
    running = service.submit(command=sleeper(30))
    service.wait_state(running["id"], {"RUNNING"})
    r = service.client.post(f"/v1/jobs/{running['id']}/suspend", headers=auth("alice"))
    assert r.status_code == 200
    suspended = service.wait_state(running["id"], {"SUSPENDED"})
    assert suspended["attempts"][0]["cause"] == "suspended"
    assert service.job(running["id"])["position"] is None
    r = service.client.post(f"/v1/jobs/{running['id']}/resume", headers=auth("alice"))
    assert r.status_code == 200
    service.wait_state(running["id"], {"RUNNING"})
    r = service.client.post(f"/v1/jobs/{running['id']}/cancel", headers=auth("alice"))
    done = service.wait_state(running["id"], {"CANCELLED"})
    assert [a["cause"] for a in done["attempts"]] == ["suspended", "cancelled"]
    check_history(service.attempts())


def test_priority_orders_the_queue(tmp_path: Path) -> None:
    h = Harness(tmp_path / "state", policy="fifo", policy_options={})
    try:
        gate = tmp_path / "release"
        blocker = h.submit(gpus=4, command=gated(gate))
        h.wait_state(blocker["id"], {"RUNNING"})
        low = h.submit(gpus=4, command=sleeper(0.1))
        high = h.submit(gpus=4, command=sleeper(0.1))
        assert h.job(low["id"])["position"] == 1
        r = h.client.put(
            f"/v1/jobs/{high['id']}/priority", json={"priority": 5}, headers=auth("root")
        )
        assert r.status_code == 200 and r.json()["priority"] == 5
        assert h.job(high["id"])["position"] == 1
        gate.touch()
        jobs = h.wait_done([blocker["id"], low["id"], high["id"]])
        assert jobs[2]["first_start"] < jobs[1]["first_start"]
        check_history(h.attempts())
    finally:
        h.close()


def test_prerun_catches_a_user_error_on_one_gpu(tmp_path: Path) -> None:
    h = Harness(tmp_path / "state", prerun=PrerunConfig(min_gpus=2, steps=2))
    try:
        bad = h.submit(gpus=4, command=[PY, "-c", "raise ValueError('typo')"], max_retries=3)
        done = h.wait_state(bad["id"], {"FAILED"})
        assert len(done["attempts"]) == 1  # no retries: the pre-run found a user error
        attempt = done["attempts"][0]
        assert attempt["phase"] == "prerun" and len(attempt["gpus"]) == 1
        assert attempt["cause"] == "user_error"
    finally:
        h.close()


def test_prerun_passes_then_the_gang_runs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    h = Harness(tmp_path / "state", prerun=PrerunConfig(min_gpus=2, steps=2))
    try:
        job = h.submit(
            gpus=3, command=[PY, "-m", "corral.examples.tiny_transformer", "--steps", "20"]
        )
        done = h.wait_state(job["id"], {"SUCCEEDED", "FAILED"}, timeout=120)
        assert done["status"] == "SUCCEEDED", done
        phases = [(a["phase"], len(a["gpus"]), a["cause"]) for a in done["attempts"]]
        assert phases == [("prerun", 1, "prerun_ok"), ("main", 3, "succeeded")]
        result = json.loads(
            (h.config.job_root / str(job["id"]) / "checkpoint" / "result.json").read_text()
        )
        assert result["final_step"] == 20  # the main run started from scratch
    finally:
        h.close()


def test_lost_processes_count_against_the_node_which_drains(tmp_path: Path) -> None:
    # LAS, not strict FIFO: the waiting V100 retry must not block the K80 job behind it
    h = Harness(tmp_path / "state", drain_after=1)
    try:
        job = h.submit(gpus=1, gpu_type="V100", command=sleeper(30), max_retries=1)
        h.wait_state(job["id"], {"RUNNING"})
        pid = wait_for(lambda: h.attempts()[0].pid, 10, "the pid to be recorded")
        os.killpg(pid, signal.SIGKILL)  # launcher and job die together: no exit record
        wait_for(lambda: h.job(job["id"])["attempts"][0]["cause"], 20, "the loss to be seen")
        first = h.job(job["id"])["attempts"][0]
        assert first["cause"] == "node_failure"
        assert h.job(job["id"])["failures"] == 0  # requeued: the node's failure, not the job's
        with h.store.session() as s:
            node = s.get(NodeRow, h.scheduler.node_of(first["gpus"][0]))
            assert node is not None and node.state == "drained"
            assert s.scalars(select(EventRow).where(EventRow.kind == "node_drained")).first()
        # the retry needs a V100; the only V100 node is drained, so it waits
        other = h.submit(gpus=1, gpu_type="K80", command=sleeper(0.1))
        h.wait_state(other["id"], {"SUCCEEDED"})
        # once its back-off ends, it waits on the drained node
        wait_for(lambda: h.job(job["id"])["reason"] == "ReqNodeNotAvail", 10, "the reason")
        assert h.job(job["id"])["status"] == "PENDING"
    finally:
        h.close()


def test_restart_adopts_running_jobs_and_requeues_nothing_twice(
    tmp_path: Path, store_url: str | None
) -> None:
    h = Harness(tmp_path / "state", policy="fifo", policy_options={}, store=store_url)
    try:
        gate = tmp_path / "release"
        ids = [h.submit(gpus=1, command=gated(gate))["id"] for _ in range(5)]
        wait_for(lambda: sum(h.job(j)["status"] == "RUNNING" for j in ids) == 4, 20, "4 running")
        h.crash()
        late = h.submit(gpus=1, command=sleeper(0.1))  # submitted while the loop is down
        h.restart()
        wait_for(lambda: len(h.events("adopted")) == 4, 20, "the four to be adopted")
        gate.touch()
        jobs = h.wait_done([*ids, late["id"]])
        assert all(j["status"] == "SUCCEEDED" for j in jobs)
        # every job ran once: the four running ones were adopted, not restarted
        assert sum(len(j["attempts"]) == 1 for j in jobs) == 6
        assert len(h.events("adopted")) == 4
        check_history(h.attempts())
    finally:
        h.close()


def test_nodes_show_each_gpus_jobs_and_utilisation_covers_the_last_hour(
    service: Harness, tmp_path: Path
) -> None:
    gate = tmp_path / "release"
    running = service.submit(gpus=2, gpu_type="V100", command=gated(gate))
    service.wait_state(running["id"], {"RUNNING"})
    nodes = service.client.get("/v1/nodes", headers=auth("alice")).json()
    v100 = next(n for n in nodes if n["gpu_type"] == "V100")
    assert len(v100["gpu_ids"]) == 2 and v100["gpu_jobs"] == [[running["id"]]] * 2
    k80 = next(n for n in nodes if n["gpu_type"] == "K80")
    assert k80["gpu_jobs"] == [[], []]
    time.sleep(0.5)
    use = service.client.get("/v1/utilisation?window=60&buckets=6", headers=auth("alice")).json()
    assert use["total_gpus"] == 4 and len(use["times"]) == len(use["busy_gpus"]) == 6
    assert 0 < use["busy_gpus"][-1] <= 2 and use["busy_gpus"][0] == 0
    bad = service.client.get("/v1/utilisation?window=-1", headers=auth("alice"))
    assert bad.status_code == 422
    gate.touch()
    service.wait_state(running["id"], {"SUCCEEDED"})


def test_an_admin_drains_and_resumes_a_node(service: Harness, tmp_path: Path) -> None:
    nodes = service.client.get("/v1/nodes", headers=auth("alice")).json()
    v100 = next(n["name"] for n in nodes if n["gpu_type"] == "V100")
    url = f"/v1/nodes/{v100}"
    assert service.client.post(f"{url}/drain", headers=auth("alice")).status_code == 403
    assert service.client.post("/v1/nodes/nowhere/drain", headers=auth("root")).status_code == 404
    gate = tmp_path / "release"
    running = service.submit(gpus=1, gpu_type="V100", command=gated(gate))
    service.wait_state(running["id"], {"RUNNING"})
    r = service.client.post(f"{url}/drain", json={"reason": "fan"}, headers=auth("root"))
    assert r.status_code == 200 and r.json()["state"] == "draining"  # (Slurm's DRAINING)
    assert r.json()["jobs"] == [running["id"]]  # what runs there goes on
    waiting = service.submit(gpus=1, gpu_type="V100", command=sleeper(0.1))
    other = service.submit(gpus=1, gpu_type="K80", command=sleeper(0.1))
    service.wait_state(other["id"], {"SUCCEEDED"})
    gate.touch()
    service.wait_state(running["id"], {"SUCCEEDED"})
    held = service.job(waiting["id"])  # a free V100, but drained
    assert (held["status"], held["reason"]) == ("PENDING", "ReqNodeNotAvail")
    nodes = service.client.get("/v1/nodes", headers=auth("alice")).json()
    assert next(n["state"] for n in nodes if n["name"] == v100) == "drained"  # none left
    r = service.client.post(f"{url}/resume", headers=auth("root"))
    assert r.status_code == 200 and r.json()["state"] == "up"
    service.wait_state(waiting["id"], {"SUCCEEDED"})
    kinds = [(e.kind, e.detail.get("reason")) for e in service.events("node_drained")]
    assert kinds == [("node_drained", "fan")] and service.events("node_resumed")
    check_history(service.attempts())


def test_a_request_recorded_during_a_pass_is_not_lost(
    tmp_path: Path, store_url: str | None
) -> None:
    h = Harness(tmp_path / "state", store=store_url)
    try:
        job = h.submit(command=gated(tmp_path / "never"))
        h.wait_state(job["id"], {"RUNNING"})
        h.crash()  # passes are driven by hand from here
        with h.store.session() as s:
            s.get(JobRow, job["id"]).request = "suspend"
        original = h.store.session
        injected = []

        @contextmanager
        def racing_session() -> Iterator[Session]:
            """The API records a cancel just as the pass clears the suspend it read.

            White-box: the cancel is committed right before the pass's UPDATE
            of the request column, the window the conditional clear closes.
            """
            with original() as s:
                execute = s.execute

                def execute_after_cancel(statement: Any, *args: Any, **kwargs: Any) -> Any:
                    if isinstance(statement, Update) and not injected:
                        with original() as api:
                            api.get(JobRow, job["id"]).request = "cancel"
                        injected.append(True)
                    return execute(statement, *args, **kwargs)

                s.execute = execute_after_cancel  # type: ignore[method-assign]
                yield s

        suspended = h.scheduler.attempts[job["id"]]
        h.store.session = racing_session  # type: ignore[method-assign]
        h.scheduler.transitions.requests(h.scheduler.clock())
        h.store.session = original  # type: ignore[method-assign]
        assert injected
        with h.store.session() as s:
            assert s.get(JobRow, job["id"]).request == "cancel"
        # The suspend's process ends before the service comes back (a cancel that
        # found it still checkpointing would rightly end the attempt as cancelled).
        assert suspended.ref is not None
        ex = h.scheduler.executor
        wait_for(lambda: ex.poll(suspended.ref, suspended.dir) is not None, 90, "the suspend")
        h.restart()
        try:
            done = h.wait_state(job["id"], {"CANCELLED"})  # the suspend was carried out first
        except TimeoutError:
            with h.store.session() as s:
                row = s.get(JobRow, job["id"])
                seen = (row.status, row.reason, row.request)
                kinds = [
                    (e.kind, e.detail)
                    for e in s.query(EventRow).filter(EventRow.job_id == job["id"])
                ]
            raise AssertionError(f"{seen} {kinds}") from None
        assert [a["cause"] for a in done["attempts"]] == ["suspended"]
    finally:
        h.close()


def test_a_restart_with_a_queue_longer_than_the_first_block_of_slots(tmp_path: Path) -> None:
    """Recovery sizes the policy's state to the queue (a soak restart found it overflowing)."""
    from corral.runtime.loop.live_state import MIN_CAPACITY

    h = Harness(tmp_path / "state")
    try:
        ids = [
            h.submit(command=sleeper(60), gpus=4, name=f"q{k}")["id"]
            for k in range(MIN_CAPACITY + 20)
        ]
        h.restart()
        assert h.scheduler.live.capacity > len(ids)
        assert {h.job(j)["status"] for j in ids} <= {"PENDING", "STARTING", "RUNNING"}
        assert h.job(ids[-1])["position"] is not None
    finally:
        h.close()


def test_a_checkpoint_from_before_job_folders_is_carried_over(tmp_path: Path) -> None:
    """Checkpoints used to live in the state directory; a job resumed after an upgrade
    finds its checkpoint in its own folder."""
    from corral.runtime.execution.identity import job_folder

    h = Harness(tmp_path / "state")
    try:
        old = h.config.state_dir / "jobs" / "7" / "checkpoint"
        old.mkdir(parents=True)
        (old / "checkpoint.pt").write_bytes(b"saved")
        folder = job_folder(h.config, 7, None)
        assert (folder / "checkpoint" / "checkpoint.pt").read_bytes() == b"saved"
        assert not old.exists()
    finally:
        h.close()


def test_a_start_that_would_fail_again_is_not_retried(service: Harness, tmp_path: Path) -> None:
    """An output file in a folder that does not exist, or a missing working directory,
    fails the same way on every try: the job fails at once, saying why."""
    bad_output = service.submit(
        command=["true"], output=str(tmp_path / "no" / "such" / "out.txt"), max_retries=3
    )
    missing = service.submit(command=["/no/such/program"], max_retries=3)
    flaky = service.submit(command=[PY, "-c", "raise SystemExit(3)"], max_retries=1)
    a, b, c = service.wait_done([bad_output["id"], missing["id"], flaky["id"]])
    for job in (a, b):
        assert job["status"] == "FAILED" and len(job["attempts"]) == 1, job
        assert "not retried" in job["reason"]
    assert "cannot use output" in a["attempts"][0]["detail"]
    assert len(c["attempts"]) == 2  # an ordinary failure is still retried


def test_resume_of_a_running_job_is_a_conflict(service: Harness) -> None:
    job = service.submit(command=sleeper(30), max_retries=0)
    service.wait_state(job["id"], {"RUNNING"})
    answer = service.client.post(f"/v1/jobs/{job['id']}/resume", headers=auth("alice"))
    assert answer.status_code == 409 and "not suspended" in answer.text
    service.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth("alice"))
    service.wait_state(job["id"], {"CANCELLED"})
