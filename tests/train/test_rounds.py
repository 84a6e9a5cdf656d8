"""A job run as rounds of tasks computes what running each round on one device computes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.train import checkpoint
from corral.train.rounds import main, run_part, share, state_path
from corral.train.task import load_factory

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

DIGITS = "corral.examples.tasks:digits"


@given(st.integers(1, 40), st.integers(1, 8))
def test_shares_cover_the_round_once_in_order(round_steps: int, parts: int) -> None:
    steps = [k for p in range(parts) for k in share(p, parts, round_steps)]
    assert steps == list(range(round_steps))
    sizes = [len(share(p, parts, round_steps)) for p in range(parts)]
    assert max(sizes) - min(sizes) <= 1


def run_rounds(folder: Path, parts: int, rounds: int, order: list[int] | None = None) -> dict:
    """Every round's parts, each in a freshly built task (as separate processes would)."""
    applied = 0
    for r in range(rounds):
        for part in order or range(parts):
            task = load_factory(DIGITS)(seed=5, batch=16)
            applied += run_part(task, folder, r, part, parts, round_steps=6, rounds=rounds, seed=5)
    assert applied == rounds  # exactly one task per round applied its update
    return torch.load(state_path(folder, rounds), weights_only=False)["model"]


def test_a_round_split_into_tasks_equals_the_round_on_one_device(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    one = run_rounds(tmp_path / "one", parts=1, rounds=3)
    split = run_rounds(tmp_path / "split", parts=3, rounds=3, order=[2, 0, 1])
    for name, value in one.items():
        assert torch.allclose(value, split[name], rtol=1e-5, atol=1e-7), name
    moved = max(float((value - split[name]).abs().max()) for name, value in one.items())
    start = load_factory(DIGITS)(seed=5, batch=16).model.state_dict()
    trained = max(float((value - start[name]).abs().max()) for name, value in one.items())
    assert trained > 100 * max(moved, 1e-9)  # it trained, and the split changed nothing real


def test_the_last_round_leaves_the_result_as_a_checkpoint_and_tidies_up(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    run_rounds(tmp_path, parts=2, rounds=2)
    payload = checkpoint.load(tmp_path / "checkpoint")
    assert payload is not None and payload["step"] == 12
    assert not list(tmp_path.glob("rounds/grad-*"))  # gradients are spent once applied
    left = sorted(p.name for p in tmp_path.glob("rounds/state-*"))
    assert left == ["state-1.pt", "state-2.pt"]


def test_the_task_command_refuses_a_bad_part_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [DIGITS, "--round", "0", "--part", "2", "--parts", "2", "--round-steps", "4"]
    assert main([*argv, "--rounds", "1", "--dir", str(tmp_path)]) == 2
    assert "part 2 is not in 0..1" in capsys.readouterr().err
    argv[4] = "1"
    assert main([*argv, "--rounds", "1", "--dir", str(tmp_path), "--kw", "batch=8"]) == 0
    assert (tmp_path / "rounds" / "grad-0-1.pt").exists()
    assert not (tmp_path / "rounds" / "state-1.pt").exists()
