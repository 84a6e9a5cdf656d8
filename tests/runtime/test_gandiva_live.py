"""Gandiva live: time-slicing by pausing and resuming real processes, packing
two jobs' processes on one GPU, and migration of a real job to free a server.

(Packing judged by the throughputs jobs report is tested in virtual time, in
``test_gandiva_measured.py``: the verdict there is exact, never the load's.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.storage.store import EventRow
from tests.runtime.harness import PY, Harness, auth, wait_for

QUANTUM = 2.0


@pytest.fixture
def one_gpu(tmp_path: Path) -> Any:
    h = Harness(
        tmp_path / "state",
        policy="gandiva",
        policy_options={"quantum": QUANTUM},
        gpus=[GpuGroup(type="V100", count=1)],
    )
    yield h
    h.close()


def progress_writer(path: Path, steps: int, step_time: float) -> list[str]:
    """A plain job (no corral.train) that appends the time of every step to a file."""
    code = (
        "import time\n"
        f"with open({str(path)!r}, 'a') as f:\n"
        f"    for _ in range({steps}):\n"
        f"        time.sleep({step_time}); f.write(f'{{time.time()}}\\n'); f.flush()\n"
    )
    return [PY, "-c", code]


def process_state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2]


def spans(h: Harness, job: int) -> list[tuple[float, float]]:
    """When ``job`` was paused: (pause, resume) pairs from its events."""
    out: list[tuple[float, float]] = []
    paused: float | None = None
    with h.store.session() as s:
        rows = s.query(EventRow).filter(EventRow.job_id == job).order_by(EventRow.id).all()
        for e in rows:
            if e.kind == "pause":
                paused = e.time
            elif e.kind == "resume" and paused is not None:
                out.append((paused, e.time))
                paused = None
    return out


def test_a_time_sliced_pair_takes_turns_by_pausing_its_processes(
    one_gpu: Harness, tmp_path: Path
) -> None:
    h = one_gpu
    logs = {name: tmp_path / f"{name}.steps" for name in "ab"}
    a = h.submit(name="a", command=progress_writer(logs["a"], 80, 0.05), gpus=1)["id"]
    h.wait_state(a, {"RUNNING"}, timeout=30)
    # (work enough for several turns: on a loaded machine a turn's end may come late)
    b = h.submit(name="b", command=progress_writer(logs["b"], 100, 0.05), gpus=1)["id"]
    # the newcomer shares the GPU and takes the first turn: the running job is paused
    wait_for(lambda: any(e.job_id == a for e in h.events("pause")), 20, "job a to be paused")
    pid = next(x.pid for x in h.attempts() if x.job_id == a)
    assert pid is not None
    wait_for(lambda: process_state(pid) == "T", 2, "job a's processes to be stopped")
    jobs = h.wait_done([a, b], timeout=90)
    assert [j["status"] for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    assert [j["preemptions"] for j in jobs] == [0, 0]
    assert len(h.attempts()) == 2  # nobody restarted: paused and resumed in place
    assert h.events("packed") and h.events("resume")
    # no step was made while a job was paused (a step in flight may end just after)
    for job, name in ((a, "a"), (b, "b")):
        stamps = [float(x) for x in logs[name].read_text().split()]
        for paused, resumed in spans(h, job):
            inside = [t for t in stamps if paused + 0.15 < t < resumed - 0.01]
            assert not inside, f"job {name} made steps while paused ({paused}-{resumed})"
    assert spans(h, a) and spans(h, b)


def test_migration_frees_a_server_for_a_gang(tmp_path: Path) -> None:
    """Two servers of 2 GPUs, one GPU free on each: a 2-GPU job waits for one
    server, so Gandiva migrates the 1-GPU job off it (checkpoint, stop, start
    on the other server) and the gang takes the server."""
    # no grow-shrink: under load the first cancel's idle GPU can stay idle for a
    # quantum before the second, and a neighbour would grow into it (a restart)
    options = {"quantum": QUANTUM, "grow": 0}
    h = Harness(tmp_path / "state", policy="gandiva", policy_options=options)
    try:
        job = str(Path(__file__).parents[1] / "e2e" / "parity_job.py")

        def resumable(name: str, work: float, gpus: int = 1) -> int:
            command = [PY, job, str(work), str(gpus), "0.8"]
            return int(h.submit(name=name, command=command, gpus=gpus)["id"])

        first = [resumable(f"j{k}", 60 if k in (0, 2) else 600) for k in range(4)]
        for j in first:
            h.wait_state(j, {"RUNNING"}, timeout=30)
        placed = {h.job(j)["assigned_gpus"][0]: j for j in first}
        assert sorted(placed) == [0, 1, 2, 3]
        for gpu in (1, 3):  # free one GPU on each server
            h.client.post(f"/v1/jobs/{placed[gpu]}/cancel", headers=auth("root"))
            h.wait_state(placed[gpu], {"CANCELLED"}, timeout=30)
        gang = resumable("gang", 1.0, gpus=2)
        h.wait_state(gang, {"SUCCEEDED"}, timeout=60)
        (gang_attempt,) = [a for a in h.attempts() if a.job_id == gang]
        server = sorted(gang_attempt.gpus)
        assert server in ([0, 1], [2, 3]), "the gang got one server"
        mover = placed[server[0]]
        moves = [a for a in h.attempts() if a.job_id == mover]
        assert len(moves) == 2, "the 1-GPU job on that server was moved once"
        assert moves[0].gpus == [server[0]] and moves[0].cause == "preempted"
        assert moves[1].gpus[0] not in server and moves[1].end_time is None
        assert gang_attempt.start_time >= moves[0].end_time  # no GPU used twice
        assert h.job(mover)["status"] == "RUNNING"
    finally:
        h.close()


@pytest.mark.parametrize("holder_steps", [60, 20], ids=["holder-last", "holder-first"])
def test_three_jobs_time_sliced_on_one_gpu_take_turns_one_at_a_time(
    one_gpu: Harness, tmp_path: Path, holder_steps: int
) -> None:
    """Gandiva's default time-slices any number of jobs on a GPU set: three jobs
    on one GPU run one at a time, each paused while another has its turn, and
    all end without a restart. When the job holding the GPU ends first, the next
    holds it and the third goes on taking turns with it."""
    h = one_gpu
    logs = {name: tmp_path / f"{name}.steps" for name in "abc"}
    a = h.submit(name="a", command=progress_writer(logs["a"], holder_steps, 0.05), gpus=1)["id"]
    h.wait_state(a, {"RUNNING"}, timeout=30)
    # (work enough for several turns each: on a loaded machine a turn's end may come late)
    b = h.submit(name="b", command=progress_writer(logs["b"], 100, 0.05), gpus=1)["id"]
    c = h.submit(name="c", command=progress_writer(logs["c"], 100, 0.05), gpus=1)["id"]
    jobs = h.wait_done([a, b, c], timeout=120)
    assert [j["status"] for j in jobs] == ["SUCCEEDED"] * 3
    assert [j["preemptions"] for j in jobs] == [0, 0, 0]
    assert len(h.attempts()) == 3  # paused and resumed in place
    slices = h.events("timeslice")
    assert {e.job_id for e in slices} == {b, c}
    assert max(e.detail["jobs"] for e in slices) == 3, "the three shared the GPU at once"
    for job, name in ((a, "a"), (b, "b"), (c, "c")):
        assert spans(h, job), f"job {name} never gave up its turn"
        stamps = [float(x) for x in logs[name].read_text().split()]
        for paused, resumed in spans(h, job):
            inside = [t for t in stamps if paused + 0.15 < t < resumed - 0.01]
            assert not inside, f"job {name} made steps while paused ({paused}-{resumed})"
