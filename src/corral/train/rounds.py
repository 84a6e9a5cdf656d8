"""A job as rounds of tasks (Hare): synchronous SGD whose pieces run anywhere, any time.

Hare splits a training job into *rounds*: a round is a fixed number of
mini-batches followed by one optimiser update, and its mini-batches are
shared among the round's *tasks*. The scheduler may run a round's tasks on
GPUs of different types and at different times; the update waits for all of
them. So the job computes exactly what running the round on one device
computes (the gradient of all its mini-batches, applied once), up to the
order floating-point sums are taken in.

Each task is one short process, ``python -m corral.train.rounds FACTORY
--round R --part K --parts G --round-steps M --rounds N --dir DIR``, working
in the job's folder, which every task of the job shares (``DIR/rounds``
holds the rounds' files):

1. it restores the job's state after round ``R - 1`` (``state-R.pt``; round
   0 builds it from the factory, which must be deterministic);
2. it accumulates the gradients of its share of the round's mini-batches
   (contiguous, near-equal shares), each mini-batch's loss divided by the
   round's size, and writes them to ``grad-R-K.pt``;
3. the task that finds every part's gradients written (exactly one: it takes
   the round's lock file) sums them in part order, applies the optimiser
   once and writes ``state-(R+1).pt``; after the last round it also writes the
   job's ordinary checkpoint, its result.

The random-number generators are seeded per mini-batch (from ``--seed`` and
the mini-batch's number), so dropout draws the same masks wherever and
whenever a mini-batch runs. Buffers that are not trained (batch-norm running
statistics) come from part 0, as data-parallel training keeps its first
rank's. Every file is written under a temporary name and renamed, so a task
killed part-way leaves nothing half-written and can simply run again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Protocol

from corral.train import checkpoint
from corral.train.run_task import keyword
from corral.train.task import load_factory


class RoundTask(Protocol):
    """What a job needs to run as rounds: a model, its optimiser and the loss of a
    mini-batch given its number (:class:`corral.examples.tasks.LoopTask` has them)."""

    model: Any
    optimizer: Any

    def loss_of_step(self, step: int) -> Any: ...


def share(part: int, parts: int, round_steps: int) -> range:
    """The mini-batches (numbered within the round) that task ``part`` of ``parts`` runs."""
    if not 0 <= part < parts:
        raise ValueError(f"part {part} is not in 0..{parts - 1}")
    base, extra = divmod(round_steps, parts)
    start = part * base + min(part, extra)
    return range(start, start + base + (1 if part < extra else 0))


def state_path(folder: Path, round_: int) -> Path:
    """The job's state after ``round_`` rounds (``folder``: the job's own folder)."""
    return folder / "rounds" / f"state-{round_}.pt"


def grad_path(folder: Path, round_: int, part: int) -> Path:
    return folder / "rounds" / f"grad-{round_}-{part}.pt"


def _save(path: Path, payload: Any) -> None:
    import torch

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        torch.save(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _load(path: Path) -> Any:
    import torch

    with open(path, "rb") as handle:
        return torch.load(handle, map_location="cpu", weights_only=False)


def _restore(task: RoundTask, folder: Path, round_: int) -> None:
    """The job's state after ``round_`` rounds (round 0: as the factory built it)."""
    if round_ == 0:
        return
    state = _load(state_path(folder, round_))
    task.model.load_state_dict(state["model"])
    task.optimizer.load_state_dict(state["optimizer"])


def run_part(
    task: RoundTask,
    folder: Path,
    round_: int,
    part: int,
    parts: int,
    round_steps: int,
    rounds: int,
    seed: int = 0,
) -> bool:
    """Run one task of a round; True when this task also applied the round's update."""
    import torch

    (folder / "rounds").mkdir(parents=True, exist_ok=True)
    _restore(task, folder, round_)
    model = task.model
    model.train()
    model.zero_grad(set_to_none=True)
    first = round_ * round_steps
    for k in share(part, parts, round_steps):
        torch.manual_seed(seed * 1_000_003 + first + k)  # same masks wherever it runs
        (task.loss_of_step(first + k) / round_steps).backward()
    grads = {
        name: (p.grad.detach().cpu() if p.grad is not None else None)
        for name, p in model.named_parameters()
    }
    buffers = {name: b.detach().cpu() for name, b in model.named_buffers()}
    _save(grad_path(folder, round_, part), {"grads": grads, "buffers": buffers})
    if not all(grad_path(folder, round_, k).exists() for k in range(parts)):
        return False
    try:  # every part is in: exactly one task applies the update
        lock = folder / "rounds" / f"apply-{round_}.lock"
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    apply_round(task, folder, round_, parts, round_steps, rounds)
    return True


def apply_round(
    task: RoundTask, folder: Path, round_: int, parts: int, round_steps: int, rounds: int
) -> None:
    """Sum the round's gradients in part order, update once, write the next state."""
    _restore(task, folder, round_)
    model = task.model
    pieces = [_load(grad_path(folder, round_, k)) for k in range(parts)]
    params = dict(model.named_parameters())
    for name, p in params.items():
        total = None
        for piece in pieces:
            g = piece["grads"].get(name)
            if g is not None:
                total = g.clone() if total is None else total + g
        p.grad = None if total is None else total.to(p.device)
    buffers = dict(model.named_buffers())
    for name, value in pieces[0]["buffers"].items():
        if name in buffers:
            buffers[name].copy_(value)
    task.optimizer.step()
    model.zero_grad(set_to_none=True)
    state = {"model": model.state_dict(), "optimizer": task.optimizer.state_dict()}
    _save(state_path(folder, round_ + 1), state)
    if round_ + 1 == rounds:  # the trained state is the job's result
        objects = {"model": model, "optimizer": task.optimizer}
        checkpoint.save(folder / "checkpoint", rounds * round_steps, objects, {"rounds": rounds})
    for k in range(parts):  # the round's gradients are spent
        with contextlib.suppress(FileNotFoundError):
            grad_path(folder, round_, k).unlink()
    if round_ > 0:
        with contextlib.suppress(FileNotFoundError):
            state_path(folder, round_ - 1).unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("factory", help="module:function building the task")
    parser.add_argument("--round", type=int, required=True, dest="round_")
    parser.add_argument("--part", type=int, required=True)
    parser.add_argument("--parts", type=int, required=True)
    parser.add_argument("--round-steps", type=int, required=True, help="mini-batches per round")
    parser.add_argument("--rounds", type=int, required=True, help="rounds in all")
    parser.add_argument(
        "--dir", type=Path, default=None, help="the job's folder (default: $CORRAL_ROUND_DIR)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds each mini-batch's RNG")
    parser.add_argument("--kw", type=keyword, action="append", default=[], help="NAME=VALUE")
    args = parser.parse_args(argv)
    folder = args.dir or Path(os.environ.get("CORRAL_ROUND_DIR", "."))
    try:
        factory = load_factory(args.factory)
        if not 0 <= args.round_ < args.rounds:
            raise ValueError(f"round {args.round_} is not in 0..{args.rounds - 1}")
        share(args.part, args.parts, args.round_steps)
    except (ImportError, ValueError) as exc:
        print(f"corral: {exc}", file=sys.stderr)
        return 2
    task = factory(**dict(args.kw))
    applied = run_part(
        task, folder, args.round_, args.part, args.parts, args.round_steps, args.rounds, args.seed
    )
    print(json.dumps({"round": args.round_, "part": args.part, "applied": applied}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
