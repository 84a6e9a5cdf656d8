"""What one task of a round costs, with and without a round keeper holding its job.

    python benchmarks/round_tasks.py                     # digits CNN and ResNet-50 layout
    python benchmarks/round_tasks.py --tasks 10 --models digits

A job run as rounds (Hare; ``corral serve --policy hare``) is a sequence of
short tasks. Each kind below runs the same job's rounds, one task per round
(so each task also applies its round's update), and times every task from
its start to its answer:

- **process**: a new ``python -m corral.train.rounds`` process per task, as
  without standby workers: interpreter, imports, build, read the state.
- **standby**: the task in an interpreter with PyTorch loaded (what a standby
  worker gives): build the model and read the state from disk, then run.
- **keeper, new process**: a new process that hands the task to the job's
  keeper (``workers: {keep: N}``), as a live task does when no standby worker
  is free: it imports no NumPy or PyTorch and builds nothing.
- **keeper**: the task handed to the keeper from a running process (as a
  task in a standby worker does): the keeper's own cost.

The mini-batches themselves cost the same in every kind; the last line gives
how much faster a task is in a keeper than in a standby worker, for the
largest model, as ``<ratio>x``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corral.train.keeper_client import KEEPER_ENV, ask
from corral.train.rounds import main as run_task_main
from corral.train.rounds import parser, request_of

MODELS = {
    "digits": ("corral.examples.tasks:digits", ["batch=16"], 4),
    "resnet50": ("corral.examples.tasks:resnet50", ["batch=2", "size=32"], 1),
}
"""Name -> (factory, keyword arguments, mini-batches per round)."""


def argv(factory: str, kws: list[str], folder: Path, round_: int, rounds: int, m: int) -> list[str]:
    out = [factory, "--round", str(round_), "--part", "0", "--parts", "1"]
    out += ["--round-steps", str(m), "--rounds", str(rounds), "--dir", str(folder)]
    for kw in kws:
        out += ["--kw", kw]
    return out


def run_task_here(args: list[str]) -> None:
    """A task in this interpreter (its one line of output dropped)."""
    with contextlib.redirect_stdout(io.StringIO()):
        if run_task_main(args) != 0:
            raise SystemExit(f"the task failed: {args}")


def timed(tasks: int, run: Callable[[int], None]) -> list[float]:
    out = []
    for r in range(tasks):
        began = time.perf_counter()
        run(r)
        out.append(time.perf_counter() - began)
    return out


def measure(name: str, tasks: int, scratch: Path) -> dict[str, list[float]]:
    factory, kws, m = MODELS[name]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    results: dict[str, list[float]] = {}

    folder = scratch / f"{name}-process"
    results["process"] = timed(
        tasks,
        lambda r: subprocess.run(
            [sys.executable, "-m", "corral.train.rounds", *argv(factory, kws, folder, r, tasks, m)],
            check=True,
            capture_output=True,
            env=env,
        ),
    )

    folder = scratch / f"{name}-standby"
    run_task_here(argv(factory, kws, scratch / "warm-up", 0, 1, m))  # imports, first step
    results["standby"] = timed(
        tasks, lambda r: run_task_here(argv(factory, kws, folder, r, tasks, m))
    )

    folder = scratch / f"{name}-keeper"
    sock = folder / "rounds" / "keeper.sock"
    keeper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral.train.round_keeper",
            *argv(factory, kws, folder, 0, 2 * tasks, m),
            "--socket",
            str(sock),
        ],
        stdout=subprocess.DEVNULL,
        env=env,
    )
    try:
        first = ask(sock, request(factory, kws, folder, 0, 2 * tasks, m))  # built, listening
        while first is None:
            time.sleep(0.1)
            first = ask(sock, request(factory, kws, folder, 0, 2 * tasks, m))
        results["keeper, new process"] = timed(
            tasks,
            lambda r: subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "corral.train.rounds",
                    *argv(factory, kws, folder, 1 + r, 2 * tasks, m),
                ],
                check=True,
                capture_output=True,
                env={**env, KEEPER_ENV: str(sock)},
            ),
        )
        results["keeper"] = timed(
            tasks - 1,
            lambda r: _asked(ask(sock, request(factory, kws, folder, 1 + tasks + r, 2 * tasks, m))),
        )
    finally:
        keeper.terminate()
        keeper.wait(30)
    return results


def request(factory: str, kws: list[str], folder: Path, round_: int, rounds: int, m: int) -> dict:
    args = parser("").parse_args(argv(factory, kws, folder, round_, rounds, m))
    return request_of(args)


def _asked(answer: dict | None) -> None:
    if answer is None or "error" in answer or not answer.get("held"):
        raise SystemExit(f"the keeper did not run the task on its held state: {answer}")


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--tasks", type=int, default=20, help="tasks per kind and model")
    options.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    args = options.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    print(f"{'model':<10} {'kind':<22} {'median':>10} {'p95':>10}")
    ratio = None
    for name in names:
        with tempfile.TemporaryDirectory() as scratch:
            results = measure(name, args.tasks, Path(scratch))
        for kind, times in results.items():
            ordered = sorted(times)
            p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
            median = statistics.median(times)
            print(f"{name:<10} {kind:<22} {median * 1e3:>8.1f}ms {p95 * 1e3:>8.1f}ms")
        ratio = statistics.median(results["standby"]) / statistics.median(results["keeper"])
    print(json.dumps({"tasks": args.tasks, "models": names}))
    print(f"{ratio:.1f}x")


if __name__ == "__main__":
    main()
