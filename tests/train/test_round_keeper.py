"""A round keeper holds a job between its tasks and computes exactly what task processes do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.train.keeper_client import KEEPER_ENV, ask
from corral.train.rounds import _take_apply_lock, main, state_path

torch = pytest.importorskip("torch")
nn = torch.nn

BN = "tests.train.test_round_keeper:bn_task"
ROOT = Path(__file__).resolve().parents[2]


def bn_task(seed: int = 0, width: int = 6) -> object:
    """A small model with batch-norm statistics and dropout, on seeded random data."""
    from corral.examples.tasks import LoopTask

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, width, 3),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(width * 6 * 6, 3),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loss_of_step(step: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed * 7919 + step)
        x = torch.randn(8, 1, 8, 8, generator=g)
        y = torch.randint(0, 3, (8,), generator=g)
        return nn.functional.cross_entropy(model(x), y)

    return LoopTask(model, optimizer, loss_of_step)


def task_argv(folder: Path, round_: int, part: int, parts: int, rounds: int) -> list[str]:
    return [
        *(BN, "--round", str(round_), "--part", str(part), "--parts", str(parts)),
        *("--round-steps", "4", "--rounds", str(rounds), "--dir", str(folder), "--seed", "3"),
        *("--kw", "width=5"),
    ]


def start_keeper(folder: Path, parts: int, rounds: int, *extra: str) -> subprocess.Popen[bytes]:
    sock = folder / "rounds" / "keeper-0.sock"
    sock.parent.mkdir(parents=True, exist_ok=True)
    argv = [*task_argv(folder, 0, 0, parts, rounds), "--socket", str(sock), *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    keeper = subprocess.Popen(
        [sys.executable, "-m", "corral.train.round_keeper", *argv], env=env, cwd=ROOT
    )
    # a task waits a second for a keeper that is starting, then runs itself: the tests
    # are about the keeper, so they begin once it listens (its start imports PyTorch,
    # which takes longer than that on a loaded machine)
    deadline = time.monotonic() + 60
    while not sock.exists() and keeper.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return keeper


def run_task(
    folder: Path, round_: int, part: int, parts: int, rounds: int, capsys: pytest.CaptureFixture
) -> dict:
    assert main(task_argv(folder, round_, part, parts, rounds)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def final_state(folder: Path, rounds: int) -> dict:
    return torch.load(state_path(folder, rounds), weights_only=False)


def assert_bit_identical(a: object, b: object) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            assert_bit_identical(a[key], b[key])
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_bit_identical(x, y)
    else:
        assert a == b


@pytest.fixture
def plain(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Three rounds of two tasks, each task its own freshly built job (no keeper)."""
    monkeypatch.delenv(KEEPER_ENV, raising=False)
    monkeypatch.syspath_prepend(str(ROOT))
    folder = tmp_path / "plain"
    for r in range(3):
        for part in (1, 0):
            run_task(folder, r, part, 2, 3, capsys)
    return final_state(folder, 3)


def test_tasks_run_in_a_keeper_hold_the_state_and_end_bit_identical(
    plain: dict, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "kept"
    keeper = start_keeper(folder, 2, 3)
    monkeypatch.setenv(KEEPER_ENV, str(folder / "rounds" / "keeper-0.sock"))
    try:
        answers = [run_task(folder, r, part, 2, 3, capsys) for r in range(3) for part in (1, 0)]
    finally:
        keeper.send_signal(signal.SIGTERM)
        assert keeper.wait(60) == 0
    assert [a.get("kept") for a in answers] == [True] * 6  # it applied every round itself
    assert [a["applied"] for a in answers] == [False, True] * 3
    assert_bit_identical(plain, final_state(folder, 3))
    assert not (folder / "rounds" / "keeper-0.sock").exists()  # tidied on SIGTERM


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_keeper_that_did_not_apply_reads_the_next_state_and_stays_exact(
    prefetch: bool,
    plain: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Part 1 runs in the keeper, part 0 (which applies) in a process of its own: the
    keeper must take the next round's state from its file, buffers included, when the
    next task comes or (prefetching) as soon as the file is written."""
    folder = tmp_path / "half"
    keeper = start_keeper(folder, 2, 3, *([] if prefetch else ["--no-prefetch"]))
    sock = str(folder / "rounds" / "keeper-0.sock")
    answers = []
    try:
        for r in range(3):
            if r and prefetch:
                time.sleep(2.0)  # it looks every 50 ms
            monkeypatch.setenv(KEEPER_ENV, sock)
            answers.append(run_task(folder, r, 1, 2, 3, capsys))
            monkeypatch.delenv(KEEPER_ENV)
            answers.append(run_task(folder, r, 0, 2, 3, capsys))
    finally:
        keeper.kill()
        keeper.wait(60)
    later = prefetch  # held when the task came: read ahead, or read by the task
    assert [a.get("kept") for a in answers] == [True, None, later, None, later, None]
    assert_bit_identical(plain, final_state(folder, 3))


def test_a_keeper_refuses_another_jobs_task_and_the_task_runs_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "job"
    keeper = start_keeper(folder, 1, 1)
    sock = folder / "rounds" / "keeper-0.sock"
    try:
        request = {"factory": BN, "kw": [["width", 5]], "seed": 4, "rounds": 1}
        request |= {"round_steps": 4, "dir": str(folder), "round": 0, "part": 0, "parts": 1}
        assert ask(sock, request) is None  # another seed: another job
        monkeypatch.setenv(KEEPER_ENV, str(sock))
        monkeypatch.syspath_prepend(str(ROOT))
        other = tmp_path / "other"
        assert "kept" not in run_task(other, 0, 0, 1, 1, capsys)  # its folder differs
        assert state_path(other, 1).exists()
    finally:
        keeper.kill()
        keeper.wait(60)


def test_a_task_without_its_keeper_runs_itself_soon(tmp_path: Path) -> None:
    missing = tmp_path / "rounds" / "keeper-0.sock"
    missing.parent.mkdir(parents=True)
    began = time.monotonic()
    assert ask(missing, {"round": 0}) is None
    assert time.monotonic() - began < 3
    import socket

    stale = socket.socket(socket.AF_UNIX)  # bound, never listening: a dead keeper's file
    stale.bind(str(missing))
    began = time.monotonic()
    assert ask(missing, {"round": 0}) is None
    assert time.monotonic() - began < 0.5
    stale.close()


def test_an_idle_keeper_ends_by_itself(tmp_path: Path) -> None:
    folder = tmp_path / "idle"
    keeper = start_keeper(folder, 1, 1, "--idle", "1")
    try:
        assert keeper.wait(60) == 0
    finally:
        keeper.kill()
    assert not (folder / "rounds" / "keeper-0.sock").exists()


def test_a_round_lock_left_by_a_dead_task_is_taken_over(tmp_path: Path) -> None:
    lock = tmp_path / "apply-0.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(str(dead.pid))
    assert _take_apply_lock(lock)
    assert lock.read_text() == str(os.getpid())
    assert not _take_apply_lock(lock)  # held by a live process (this one)


def test_a_keepers_socket_appears_only_once_it_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that finds the keeper's socket file connects at once: bound but not
    yet listening, it would be refused and run itself. The socket is bound under a
    name of its own and renamed into place once it listens."""
    import socket as sockets

    from corral.train import round_keeper
    from corral.train.keeper_client import short_name

    path = tmp_path / "rounds" / "keeper-0.sock"
    seen: list[bool] = []
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        seen.append(Path(dst).exists())
        probe = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
        with probe, short_name(Path(src)) as name:
            probe.connect(name)  # refused unless it listens already
        real_replace(src, dst)

    monkeypatch.setattr(round_keeper.os, "replace", replace)
    listener, inode = round_keeper._listen(path)
    with listener:
        assert seen == [False]  # not at its name before it listened
        assert path.stat().st_ino == inode
        assert [p.name for p in path.parent.iterdir()] == ["keeper-0.sock"]
