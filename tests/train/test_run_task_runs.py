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
