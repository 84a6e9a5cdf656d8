"""Warm switching in a standby worker computes exactly what an unswitched run does."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.train.task import WarmWorker, load_factory

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

DIGITS = "corral.examples.tasks:digits"


def run_alone(seed: int, steps: int) -> dict[str, object]:
    task = load_factory(DIGITS)(seed=seed)
    for step in range(steps):
        task.step(step)
    return task.model.state_dict()


def same(a: dict[str, object], b: dict[str, object]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_two_jobs_switched_50_times_end_bit_identical_to_running_alone() -> None:
    torch.set_num_threads(1)
    worker = WarmWorker()
    worker.admit("a", DIGITS, seed=3)
    worker.admit("b", DIGITS, seed=4)
    switches = 0
    for _ in range(25):  # both use dropout: each needs its own random stream back
        switches += worker.switch_to("a") >= 0
        worker.run(3)
        switches += worker.switch_to("b") >= 0
        worker.run(2)
    assert switches == 50
    assert worker.jobs["a"].step == 75 and worker.jobs["b"].step == 50
    assert same(worker.jobs["a"].task.model.state_dict(), run_alone(3, 75))
    assert same(worker.jobs["b"].task.model.state_dict(), run_alone(4, 50))


def test_a_job_leaves_with_a_checkpoint_any_process_resumes(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    first = WarmWorker()
    first.admit("a", DIGITS, seed=5)
    first.switch_to("a")
    first.run(20)
    first.checkpoint("a", tmp_path)
    assert "a" not in first.jobs
    second = WarmWorker()
    second.admit("a", DIGITS, resume_from=tmp_path, seed=5)
    second.switch_to("a")
    second.run(10)
    assert second.jobs["a"].step == 30
    assert same(second.jobs["a"].task.model.state_dict(), run_alone(5, 30))


def test_a_bad_factory_is_named() -> None:
    with pytest.raises(ValueError, match="not module:function"):
        load_factory("corral.examples.tasks")
    with pytest.raises(ValueError, match="has no function"):
        load_factory("corral.examples.tasks:nothing")
    with pytest.raises(KeyError, match="not resident"):
        WarmWorker().switch_to("ghost")


def test_a_task_runs_cold_as_a_job_and_resumes_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.train import checkpoint
    from corral.train.run_task import main

    torch.set_num_threads(1)
    worker = WarmWorker()  # stopped warm after 10 steps: its checkpoint is where it left
    worker.admit("a", DIGITS, seed=6)
    worker.switch_to("a")
    worker.run(10)
    worker.checkpoint("a", tmp_path)
    monkeypatch.setenv("CORRAL_CHECKPOINT_DIR", str(tmp_path))
    resume = [DIGITS, "--steps", "20", "--kw", "seed=6", "--device", "cpu"]
    assert main(resume) == 0  # resumes cold at step 10, on the host as the reference runs
    saved = checkpoint.load(tmp_path)
    assert saved is not None and saved["step"] == 20
    assert same(saved["state"]["model"], run_alone(6, 20))
    assert main(["corral.examples.tasks", "--steps", "1"]) == 2
