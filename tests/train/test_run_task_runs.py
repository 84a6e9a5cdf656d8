"""A task job logs the first step of each of its runs with its time (where a switch
to it ends: ``benchmarks/gpu_check.py`` measures switches from these lines), and
BERT-base's layout runs as a task (here at a toy size)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

DONE = re.compile(r"^corral: step (\d+) done at t=([\d.]+)$", re.M)


def test_the_first_step_of_a_start_and_of_each_resumption_is_logged(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    with open(log, "w") as out:
        job = subprocess.Popen(
            [
                sys.executable, "-m", "corral.train.run_task", "corral.examples.tasks:digits",
                "--steps", "60", "--kw", "step_time=0.05", "--checkpoint-every", "1e9",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env={**os.environ, "CORRAL_CHECKPOINT_DIR": str(tmp_path / "checkpoints")},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not DONE.search(log.read_text()) and time.monotonic() < deadline:
                time.sleep(0.05)
            job.send_signal(signal.SIGTSTP)  # parked at its next step's end
            time.sleep(0.5)
            paused_at = time.time()
            job.send_signal(signal.SIGCONT)
            assert job.wait(60) == 0, log.read_text()
        finally:
            job.kill()
    runs = [(int(step), float(t)) for step, t in DONE.findall(log.read_text())]
    assert len(runs) == 2, log.read_text()
    assert runs[0][0] == 1 and runs[1][0] > runs[0][0]
    assert runs[1][1] >= paused_at  # the resumed run's first step, after it was resumed


def test_bert_base_layout_trains_as_a_task() -> None:
    from corral.examples.tasks import bert_base

    task = bert_base(layers=1, width=64, length=16, batch=4)
    first = task.step(0)
    assert first > 0
    # the full layout is BERT-base's size
    from corral.examples.tasks import BertBase

    full = sum(p.numel() for p in BertBase().parameters())
    assert 105e6 < full < 115e6


def test_a_resident_task_is_taken_back_only_while_its_checkpoint_is_the_one_it_left(
    tmp_path: Path,
) -> None:
    import random

    from corral.train import resident
    from corral.train.checkpoint import FILE_NAME

    class Task:
        def __init__(self) -> None:
            self.objects: dict[str, object] = {}

    resident.clear()
    (tmp_path / FILE_NAME).write_bytes(b"step 10")
    task = Task()
    random.seed(5)
    resident.keep("job-1", task, 10, tmp_path)
    expected = random.random()
    random.seed(99)  # another job ran meanwhile
    kept = resident.take("job-1", tmp_path)
    assert kept is not None and kept.task is task and kept.step == 10
    resident.bring_back(kept)
    assert random.random() == expected  # the RNG as the job left it
    assert resident.take("job-1", tmp_path) is None  # taken once
    # the job ran elsewhere and wrote a newer checkpoint: it starts from that
    resident.keep("job-1", task, 10, tmp_path)
    time.sleep(0.01)
    (tmp_path / FILE_NAME).write_bytes(b"step 20, elsewhere")
    assert resident.take("job-1", tmp_path) is None
    for k in range(resident.KEPT + 2):  # at most KEPT jobs, the latest stopped
        resident.keep(f"job-{k}", task, 1, tmp_path)
    assert resident.take("job-0", tmp_path) is None
    assert resident.take(f"job-{resident.KEPT + 1}", tmp_path) is not None
    resident.clear()
