"""Warm workers live, on a virtual GPU (the CPU path of the same code: no CUDA context
to keep, everything else as on a GPU): a user's task jobs that preempt each other
on one GPU run one after another in that user's one warm worker, never forked,
and end with exactly the weights of uninterrupted runs; a job a warm worker
cannot take starts cold and its start event says why; a worker whose attempt is
killed ends at once; another user's process is refused by the worker."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from corral.runtime.execution.executor import GpuSlot, LaunchRequest, LocalExecutor
from corral.runtime.execution.identity import RunAs
from corral.runtime.execution.warm_worker import WARM_MARK, Warm, WarmWorkers, serve_one
from corral.runtime.jobspec.config import GpuGroup
from corral.testing.service_process import ServiceProcess, wait_for
from corral.train import checkpoint
from corral.train.task import load_factory
from tests.runtime.harness import TERMINAL, TOKENS

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

STEPS = 300
WORKER = re.compile(re.escape(WARM_MARK) + r" (\d+)")


@pytest.mark.long  # six minutes; the protocol, separation and fallback are the tests below
def test_a_users_jobs_switch_in_one_warm_worker_and_end_as_if_never_stopped(
    tmp_path: Path,
) -> None:
    service = ServiceProcess(
        tmp_path,
        "las",
        {"quantum": 1.5},
        users=TOKENS,
        gpus=[{"type": "V100", "count": 1}],
        # (idle long enough to outlive the whole test on a slow host: an idle worker
        # that ended would make the last job start cold, a different path)
        workers={"warm": True, "warm_idle": 900},
        # (a stop past the grace ends in SIGKILL, which takes the worker with it, so the
        # next start is cold in a new worker: on a loaded host a job just started took
        # 20 s to reach the step where it stops)
        stop_grace=120,
    )
    try:
        service.start()
        task = {"factory": "corral.examples.tasks:digits", "steps": STEPS}
        # a one-step job first: its launch starts this user's worker, ready before the pair
        primer = service.client.submit({"name": "primer", "task": {**task, "steps": 1}})["id"]
        wait_for(lambda: service.client.job(primer)["status"] in TERMINAL, 120, "the primer")
        sockets = tmp_path / "state" / "warm"
        wait_for(lambda: any(sockets.glob("*.sock")), 120, "the warm worker")
        ids = [
            service.client.submit(
                {"name": f"t{seed}", "task": {**task, "kwargs": {"seed": seed, "step_time": 0.02}}}
            )["id"]
            for seed in (3, 4)
        ]
        # a job with a memory limit: a shared process cannot keep it, it starts cold
        limited = service.client.submit(
            {"name": "limited", "task": {**task, "steps": 5}, "memory": "4G"}
        )
        for job in [*ids, limited["id"]]:
            wait_for(lambda j=job: service.client.job(j)["status"] in TERMINAL, 240, f"job {job}")
        workers: set[str] = set()
        warm_attempts = 0
        for job, seed in zip(ids, (3, 4), strict=True):
            done = service.client.job(job)
            assert done["status"] == "SUCCEEDED", done
            assert len(done["attempts"]) >= 2, done["attempts"]  # LAS took turns
            for attempt in done["attempts"]:
                log = service.client.logs(job, 0, attempt["number"]).text
                found = WORKER.findall(log)
                workers.update(found)
                warm_attempts += bool(found)
            hows = [e["detail"]["how"] for e in done["events"] if e["kind"] == "started"]
            assert hows and all(h.startswith(("warm", "cold")) for h in hows), hows
            saved = checkpoint.load(tmp_path / "state-jobs" / str(job) / "checkpoint")
            assert saved is not None and saved["step"] == STEPS
            alone = load_factory(task["factory"])(seed=seed)
            for step in range(STEPS):
                alone.step(step)
            expected = alone.model.state_dict()
            assert all(torch.equal(saved["state"]["model"][k], expected[k]) for k in expected)
        # every warm start of this user on this GPU was in the same process, and a job
        # that came back to it took its task from memory, not from its checkpoint
        assert warm_attempts >= 2 and len(workers) == 1, (warm_attempts, workers)
        logs = "".join(
            service.client.logs(j, 0, a["number"]).text
            for j in ids
            for a in service.client.job(j)["attempts"]
        )
        assert "resumed in memory" in logs
        events = service.client.job(limited["id"])["events"]
        hows = [e["detail"]["how"] for e in events if e["kind"] == "started"]
        assert hows and all(h.startswith("cold") and "memory limit" in h for h in hows), hows
        assert not WORKER.search(service.client.logs(limited["id"]).text)

        # the attempt killed while in the worker: the worker goes with it
        long = service.client.submit(
            {"name": "long", "task": {**task, "steps": 5000, "kwargs": {"step_time": 0.02}}}
        )["id"]

        def started() -> list[str]:
            events = service.client.job(long)["events"]
            return [e["detail"]["how"] for e in events if e["kind"] == "started"]

        hows = wait_for(started, 120, "the long job's start")
        assert hows[0].startswith("warm"), hows  # the same worker, still idle, took it
        wait_for(lambda: WORKER.search(service.client.logs(long).text), 60, "its log's mark")
        (pid,) = {int(p) for p in WORKER.findall(service.client.logs(long).text)}
        service.client.json("POST", f"/v1/jobs/{long}/cancel")  # a stop, then a kill if need be
        wait_for(lambda: service.client.job(long)["status"] in TERMINAL, 60, "the cancel")
        assert _alive(pid)  # a stop is a job's end, not the worker's
        attempt = service.client.job(long)["attempts"][-1]
        assert attempt["cause"] in ("cancelled", "preempted", "succeeded"), attempt
    finally:
        service.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ")[1][0] != "Z"


def test_each_user_gets_their_own_worker_and_a_job_it_cannot_keep_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = LocalExecutor([GpuGroup(type="V100", count=2)], warm=(tmp_path / "warm", 60))
    assert executor.warm is not None
    started: list[tuple[object, ...]] = []
    monkeypatch.setattr(executor.warm, "start", lambda *args: started.append(args))
    alice = RunAs("alice", 1501, 1501, (), "/home/alice")
    bob = RunAs("bob", 1502, 1502, (), "/home/bob")
    gpu = executor.slots()[0]

    def request(who: RunAs, gpus: tuple[GpuSlot, ...] = (gpu,), memory: int | None = None) -> Any:
        return LaunchRequest(
            ["true"], {}, str(tmp_path), gpus, tmp_path, tmp_path / "log", run_as=who,
            warm_argv=["corral.train.run_task"], memory=memory,
        )  # fmt: skip

    conf = executor.warm  # a worker marked ready for alice only
    alice_socket = tmp_path / "warm" / "1501-gpuv0.sock"
    alice_socket.touch()
    conf.workers[(1501, "v0")] = Warm(_Sleeping(), alice_socket)
    assert executor._launch_warm(request(bob), None, {})[0] is None  # type: ignore[arg-type]
    assert started == [((1502, "v0"), 1502, 1502, [])]  # bob's own worker is started
    assert conf.take((1502, "v0")) is None and conf.take((1501, "v0")) == alice_socket
    conf.workers[(1501, "v0")].busy = None
    for why, req in [
        ("memory limit", request(alice, memory=1 << 30)),
        ("one GPU", request(alice, gpus=tuple(executor.slots()))),
    ]:
        ref, how = executor._launch_warm(req, None, {})  # type: ignore[arg-type]
        assert ref is None and how.startswith("cold") and why in how


class _Sleeping:
    """A process that runs (for a worker entry in a unit test)."""

    pid = 1

    def poll(self) -> None:
        return None


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another user needs root")
def test_a_worker_refuses_another_users_process() -> None:
    folder = Path(tempfile.mkdtemp(prefix="corral-warm-"))
    folder.chmod(0o755)
    path = folder / "w.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o666)  # past the socket's own mode, to reach the identity check
    listener.listen(1)
    listener.settimeout(30)
    child = os.fork()
    if child == 0:  # another user's process tries to hand a job to root's worker
        try:
            os.setuid(65534)
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(str(path))
            job = {"argv": ["corral.train.run_task"], "env": {}, "cwd": "/"}
            with contextlib.suppress(OSError):  # (refused at once: the send may fail)
                socket.send_fds(conn, [json.dumps(job).encode()], [1, 2])
            answer = conn.makefile("rb").readline()
            os._exit(0 if b"refused" in answer else 1)
        except BaseException:
            os._exit(2)
    conn, _ = listener.accept()
    with conn:
        serve_one(conn)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    listener.close()
    shutil.rmtree(folder)


def ready_worker(folder: Path) -> tuple[Path, Any]:
    """A warm worker of the service's own user on a virtual GPU, started and taken as
    an attempt would take it: its socket and process."""
    workers = WarmWorkers(folder / "warm", 60, folder / "warm.log")
    key = (None, "v0")
    workers.start(key, None, None, [])
    sock = None
    deadline = time.monotonic() + 60
    while sock is None and time.monotonic() < deadline:
        sock = workers.take(key)
        time.sleep(0.1)
    assert sock is not None, (folder / "warm.log").read_text()
    return sock, workers.workers[key].process


def test_a_worker_ends_when_its_attempt_is_killed(tmp_path: Path) -> None:
    """The client killed (SIGKILL after a stop grace): the worker running its job
    exits at once, so the GPU is never held by a job the scheduler took it from."""
    sock, worker = ready_worker(tmp_path)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = {**os.environ, "CORRAL_CHECKPOINT_DIR": str(job_dir / "ck")}
    log = open(job_dir / "log.txt", "w")  # noqa: SIM115
    import subprocess
    import sys

    client = subprocess.Popen(
        [sys.executable, "-m", "corral.runtime.execution.warm_client", str(sock), "--",
         "corral.train.run_task", "corral.examples.tasks:digits", "--steps", "100000",
         "--kw", "step_time=0.02", "--checkpoint-every", "1e9"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=job_dir,
    )  # fmt: skip
    try:
        wait_for(lambda: "step 1 done" in (job_dir / "log.txt").read_text(), 60, "the job")
        client.send_signal(signal.SIGKILL)
        client.wait(10)
        assert worker.wait(10) == 137
    finally:
        log.close()
        client.kill()
        worker.kill()


LEAVER = """
import subprocess


class Task:
    objects: dict = {}

    def step(self, step):
        return 0.0


def make():
    # a process the job starts and never waits for, and one that escapes by setsid
    subprocess.Popen(["sleep", "300.0417"])  # (durations no one else sleeps)
    subprocess.Popen(["setsid", "sleep", "301.0417"])
    return Task()
"""


def test_nothing_a_job_starts_in_a_warm_worker_outlives_it(tmp_path: Path) -> None:
    (tmp_path / "leaver.py").write_text(LEAVER)
    sock, worker = ready_worker(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CORRAL_CHECKPOINT_DIR": str(tmp_path / "c")}
    import subprocess
    import sys

    try:
        done = subprocess.run(
            [sys.executable, "-m", "corral.runtime.execution.warm_client", str(sock), "--",
             "corral.train.run_task", "leaver:make", "--steps", "3", "--checkpoint-every", "1e9"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "done at" in done.stdout
        assert _sleepers() == set(), "a process the job started outlived it"
        assert worker.poll() is None  # the worker itself carries on
    finally:
        for pid in _sleepers():
            os.kill(pid, signal.SIGKILL)
        worker.kill()


def _sleepers() -> set[int]:
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
                state = Path(entry.path, "stat").read_text().split(") ")[1][0]
                if argv[:2] in ([b"sleep", b"300.0417"], [b"sleep", b"301.0417"]) and state != "Z":
                    found.add(int(entry.name))
    return found


SERVICE_THAT_DIES = """
import os, sys, time
from pathlib import Path
from corral.runtime.execution.warm_worker import WarmWorkers
folder = Path(sys.argv[1])
workers = WarmWorkers(folder / "warm", 60, folder / "warm.log")
workers.start((None, "v0"), None, None, [])
deadline = time.monotonic() + 60
while not any((folder / "warm").glob("*.sock")) and time.monotonic() < deadline:
    time.sleep(0.1)
print(workers.workers[(None, "v0")].process.pid, flush=True)
os._exit(0)  # the service dies (kill -9 alike): nothing closes its workers
"""


def test_an_idle_worker_goes_with_its_service(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", SERVICE_THAT_DIES, str(tmp_path)],
        capture_output=True, text=True, timeout=90, check=True,
    )  # fmt: skip
    pid = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _alive(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "an idle warm worker outlived its service"


def test_a_task_that_waits_has_its_warm_worker_ready_and_starts_warm_the_first_time(
    tmp_path: Path,
) -> None:
    """The loop starts the user's warm worker while the task waits for the GPU
    (``runtime.loop.warm_ahead``), so even its first start is warm; before, the
    first start of a user on a GPU was always cold."""
    service = ServiceProcess(
        tmp_path, "fifo", gpus=[{"type": "V100", "count": 1}],
        workers={"warm": True, "warm_idle": 300},
    )  # fmt: skip
    try:
        service.start()
        blocker = service.client.submit({"name": "blocker", "command": ["sleep", "300"]})["id"]
        wait_for(lambda: service.client.job(blocker)["status"] == "RUNNING", 60, "the blocker")
        task = {"factory": "corral.examples.tasks:digits", "steps": 5}
        job = service.client.submit({"name": "waits", "task": task})["id"]
        sockets = tmp_path / "state" / "warm"
        wait_for(lambda: any(sockets.glob("*.sock")), 120, "a warm worker while the task waits")
        assert service.client.job(job)["status"] == "PENDING"
        service.client.action(blocker, "cancel")
        wait_for(lambda: service.client.job(job)["status"] in TERMINAL, 120, "the task")
        done = service.client.job(job)
        hows = [e["detail"]["how"] for e in done["events"] if e["kind"] == "started"]
        assert done["status"] == "SUCCEEDED" and hows == [
            "warm: in this user's warm worker on this GPU"
        ], hows
    finally:
        service.close()
