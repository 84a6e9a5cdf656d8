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
killed part-way leaves nothing half-written and can simply run again (a
round's lock its dead holder left is taken over).

A task builds the job and reads its state from disk, unless the service
runs a *round keeper* for the job on the task's GPU
(:mod:`corral.train.round_keeper`, named by ``$CORRAL_ROUND_KEEPER``): then
the task runs there, on the state the keeper holds in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from corral.train.keeper_client import KEEPER_ENV, ask
from corral.train.task import Task, keyword


class RoundTask(Task, Protocol):
    """What a job needs to run as rounds: a task (:class:`corral.train.task.Task`)
    with its model, its optimiser and the loss of a mini-batch given its number
    (:class:`corral.examples.tasks.LoopTask` has them)."""

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


def check_task(round_: int, part: int, parts: int, round_steps: int, rounds: int) -> None:
    """Refuse a task that is not one of the job's (ValueError saying why)."""
    if not 0 <= round_ < rounds:
        raise ValueError(f"round {round_} is not in 0..{rounds - 1}")
    share(part, parts, round_steps)


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


@dataclass
class Held:
    """A job's state in this process's memory between its tasks.

    A task process holds the job only for its own share. A *round keeper*
    (:mod:`corral.train.round_keeper`) holds it across tasks: a task of the
    round whose starting state it holds needs nothing from disk, and the
    keeper that applied a round's update holds the next round's state. What it
    holds is exactly what the state file holds (the model's and optimiser's
    tensors, copied bit for bit by a save and a load), so the result is the
    same whichever process runs a task. The untrained buffers a task's forward
    pass changes (batch-norm statistics) are put back from a host copy first.
    """

    task: RoundTask
    rebuild: Callable[[], RoundTask] | None = None
    """Builds the job afresh (the factory): how round 0's state is had again."""
    round_: int = 0
    """The round whose starting state the model and optimiser hold (as built: 0)."""
    buffers: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.buffers = _buffers_on_host(self.task)

    @classmethod
    def built(cls, build: Callable[[], RoundTask]) -> Held:
        """The job as its factory builds it (round 0), on its GPU when it has one."""
        task = build()
        place(task)
        return cls(task, rebuild=build)

    def restore(self, folder: Path, round_: int) -> None:
        """Hold the job's state after ``round_`` rounds."""
        if round_ == self.round_:
            for name, value in self.task.model.named_buffers():
                value.copy_(self.buffers[name])
            return
        if round_ == 0:
            if self.rebuild is None:
                raise ValueError("round 0's state is the factory's: give rebuild")
            self.task = self.rebuild()
            place(self.task)
        else:
            state = _load(state_path(folder, round_))
            self.task.model.load_state_dict(state["model"])
            self.task.optimizer.load_state_dict(state["optimizer"])
        self.round_ = round_
        self.buffers = _buffers_on_host(self.task)

    def advanced(self) -> None:
        """The model and optimiser now hold the next round's state (this applied it)."""
        self.round_ += 1
        self.buffers = _buffers_on_host(self.task)


def _buffers_on_host(task: RoundTask) -> dict[str, Any]:
    return {name: b.detach().to("cpu", copy=True) for name, b in task.model.named_buffers()}


def place(task: RoundTask, device: str = "auto") -> None:
    """On the task's GPU when it has one (``auto``), as a job run whole is placed."""
    from corral.train.task import place_task  # (PyTorch: only where a task runs)

    place_task(task, device)


def run_part(
    held: Held | RoundTask,
    folder: Path,
    round_: int,
    part: int,
    parts: int,
    round_steps: int,
    rounds: int,
    seed: int = 0,
) -> bool:
    """Run one task of a round; True when this task also applied the round's update.

    ``held``: the job as this process holds it (a bare task: as its factory built it)."""
    import torch

    if not isinstance(held, Held):
        held = Held(held)
    (folder / "rounds").mkdir(parents=True, exist_ok=True)
    held.restore(folder, round_)
    model = held.task.model
    model.train()
    model.zero_grad(set_to_none=True)
    first = round_ * round_steps
    for k in share(part, parts, round_steps):
        torch.manual_seed(seed * 1_000_003 + first + k)  # same masks wherever it runs
        (held.task.loss_of_step(first + k) / round_steps).backward()
    grads = {
        name: (p.grad.detach().cpu() if p.grad is not None else None)
        for name, p in model.named_parameters()
    }
    model.zero_grad(set_to_none=True)  # a held job keeps no gradients between its tasks
    buffers = {name: b.detach().cpu() for name, b in model.named_buffers()}
    _save(grad_path(folder, round_, part), {"grads": grads, "buffers": buffers})
    if not all(grad_path(folder, round_, k).exists() for k in range(parts)):
        return False
    if not _take_apply_lock(folder / "rounds" / f"apply-{round_}.lock"):
        return False  # every part is in: exactly one task applies the update
    apply_round(held, folder, round_, parts, round_steps, rounds)
    return True


def _take_apply_lock(lock: Path) -> bool:
    """Take the round's lock, or a lock whose holder died before applying (a task
    killed part-way must not leave the round waiting for an update forever)."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            try:
                holder = int(lock.read_text() or "0")
            except (OSError, ValueError):
                return False  # being written: its holder is alive
            if holder <= 0 or _alive(holder):
                return False
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def apply_round(
    held: Held, folder: Path, round_: int, parts: int, round_steps: int, rounds: int
) -> None:
    """Sum the round's gradients in part order, update once, write the next state."""
    held.restore(folder, round_)
    model, optimizer = held.task.model, held.task.optimizer
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
    optimizer.step()
    model.zero_grad(set_to_none=True)
    held.advanced()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    _save(state_path(folder, round_ + 1), state)
    if round_ + 1 == rounds:  # the trained state is the job's result
        from corral.train import checkpoint

        objects = {"model": model, "optimizer": optimizer}
        checkpoint.save(folder / "checkpoint", rounds * round_steps, objects, {"rounds": rounds})
    for k in range(parts):  # the round's gradients are spent
        with contextlib.suppress(FileNotFoundError):
            grad_path(folder, round_, k).unlink()
    if round_ > 0:
        with contextlib.suppress(FileNotFoundError):
            state_path(folder, round_ - 1).unlink()


def parser(description: str) -> argparse.ArgumentParser:
    """The arguments of a task of a round (a round keeper takes the same, for its job)."""
    out = argparse.ArgumentParser(description=description)
    out.add_argument("factory", help="module:function building the task")
    out.add_argument("--round", type=int, required=True, dest="round_")
    out.add_argument("--part", type=int, required=True)
    out.add_argument("--parts", type=int, required=True)
    out.add_argument("--round-steps", type=int, required=True, help="mini-batches per round")
    out.add_argument("--rounds", type=int, required=True, help="rounds in all")
    out.add_argument(
        "--dir", type=Path, default=None, help="the job's folder (default: $CORRAL_ROUND_DIR)"
    )
    out.add_argument("--seed", type=int, default=0, help="seeds each mini-batch's RNG")
    out.add_argument("--kw", type=keyword, action="append", default=[], help="NAME=VALUE")
    return out


def request_of(args: argparse.Namespace) -> dict[str, Any]:
    """A task's arguments as the message a round keeper reads (the job's folder absolute)."""
    folder = args.dir or Path(os.environ.get("CORRAL_ROUND_DIR", "."))
    return {
        "factory": args.factory,
        "kw": sorted([key, value] for key, value in args.kw),
        "seed": args.seed,
        "rounds": args.rounds,
        "round_steps": args.round_steps,
        "dir": str(folder.resolve()),
        "round": args.round_,
        "part": args.part,
        "parts": args.parts,
    }


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    request = request_of(args)
    folder = Path(request["dir"])
    try:
        check_task(args.round_, args.part, args.parts, args.round_steps, args.rounds)
    except ValueError as exc:
        print(f"corral: {exc}", file=sys.stderr)
        return 2
    keeper = os.environ.get(KEEPER_ENV)
    if keeper:  # the job's state may be held in a keeper on this GPU: no import, no build
        answer = ask(Path(keeper), request)
        if answer is not None:
            if "error" in answer:
                print(f"corral: the round keeper failed: {answer['error']}", file=sys.stderr)
                return 1
            report = {"round": args.round_, "part": args.part, "applied": answer["applied"]}
            print(json.dumps({**report, "kept": answer["held"]}), flush=True)
            return 0
    from corral.train.task import load_factory

    try:
        factory = load_factory(args.factory)
    except (ImportError, ValueError) as exc:
        print(f"corral: {exc}", file=sys.stderr)
        return 2

    held = Held.built(lambda: cast(RoundTask, factory(**dict(args.kw))))
    applied = run_part(
        held, folder, args.round_, args.part, args.parts, args.round_steps, args.rounds, args.seed
    )
    print(json.dumps({"round": args.round_, "part": args.part, "applied": applied}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
