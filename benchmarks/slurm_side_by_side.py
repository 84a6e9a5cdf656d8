"""corral beside a real Slurm on this machine: the command line's speed, bulk
verbs, arrays, listing and the engine's pace, each measured the same way on all.

Nothing is installed. Where Slurm's programs are present (Debian's
``slurm-wlm``), two private one-node Slurms are set up in a temporary folder
(slurmctld and slurmd on loopback ports, no munge: ``auth/none``, a node with
``gpu:8`` that runs jobs as this user, ``cons_tres`` and backfill, no
accounting): one with Slurm's default scheduler parameters, one tuned as a site
running short jobs tunes it (``bf_interval=1,sched_min_interval=0,
batch_sched_delay=0``). corral runs ``corral serve`` on loopback with 8
virtual GPUs under FIFO, its state in the same temporary folder. All three run
at once and are measured in turns (A/B/C, then B/C/A, ...), never one after
the other, so a slower minute of the host falls on each alike; without Slurm,
corral's column alone, saying why.

What is measured (wall time from the shell, as a user types the command):

1. one submission: ``sbatch --wrap`` / ``corral submit`` of a 1-GPU job,
   median of ``--repeats``; then each command's start as users meet it (medians):
   ``--version``, ``--help`` (``sbatch --help`` / ``corral submit --help``), a
   batch script submitted, one job shown (``scontrol show job`` / ``corral
   show``) and the nodes listed (``sinfo`` / ``corral nodes``);
2. a one-at-a-time submission loop: ``--loop`` commands in a row, jobs/s;
3. a 2,000-task array in one command;
4. listing 10,000 pending jobs (a held 10,000-task array): ``squeue -r`` /
   ``corral queue``, median of ``--repeats``; then again with one held job
   submitted (untimed) before each listing, so that corral cannot answer from
   the listing it kept (it keeps one until the store changes; on a busy cluster
   the store changes every few seconds);
5. cancelling everything of one user: ``scancel -u`` / ``corral cancel -u``
   (the command's own time: both return once the cancel is recorded);
6. the engine: 200 one-second 1-GPU jobs on the 8 GPUs, from the submission
   (one array) until the last has ended (each scheduler alone on the host
   meanwhile, the others idle).

Run: ``python benchmarks/slurm_side_by_side.py`` (``--quick`` for small counts).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from corral.testing.service_process import ServiceProcess, wait_for
from corral.testing.slurm import TUNED, missing_slurm, private_slurm

GPUS = 8


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Seconds one command takes from the shell; it must succeed."""
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... failed: {done.stderr.strip()[-400:]}")
    return took


@dataclass
class Side:
    """One scheduler's commands for each measure (argv lists and a probe)."""

    name: str
    env: dict[str, str]
    submit: list[str]
    array: Callable[[int, bool], list[str]]
    """(tasks, held) -> the command submitting an array of that many."""
    listing: list[str]
    held: list[str]
    """One held job's submission (a change to the queue)."""
    cancel_all: list[str]
    live_jobs: Callable[[], int]
    """How many of the user's jobs have not ended."""
    starts: dict[str, Callable[[str], list[str]]]
    """Commands whose start is measured (given a job id): version, help, a batch
    script's submission, one job shown, the nodes listed."""


@contextlib.contextmanager
def slurm_side(folder: Path, name: str, extra: tuple[str, ...] = ()) -> Iterator[Side]:
    """A private Slurm's commands for each measure."""
    with private_slurm(folder, GPUS, extra) as slurm:
        wrap = ["--wrap", "sleep 1", "--gpus", "1", "-o", "/dev/null"]
        yield Side(
            name=name,
            env=slurm.env,
            submit=["sbatch", *wrap],
            array=lambda n, held: [
                "sbatch",
                f"--array=0-{n - 1}",
                *(["-H"] if held else []),
                *wrap,
            ],
            listing=["squeue", "-r", "-u", slurm.user],
            held=["sbatch", "-H", *wrap],
            cancel_all=["scancel", "-u", slurm.user],
            live_jobs=slurm.live_jobs,
            starts={
                "--version": lambda job: ["sbatch", "--version"],
                "--help": lambda job: ["sbatch", "--help"],
                "submit a script": lambda job: ["sbatch", str(script(folder))],
                "show a job": lambda job: ["scontrol", "show", "job", job],
                "list nodes": lambda job: ["sinfo"],
            },
        )


@contextlib.contextmanager
def corral_service(folder: Path) -> Iterator[Side]:
    service = ServiceProcess(
        folder,
        "fifo",
        gpus=[{"type": "V100", "count": GPUS}],
        max_jobs_per_user=100_000,
        tick=0.1,
    )
    service.start()
    try:
        env = {
            **os.environ,
            "CORRAL_URL": service.url,
            "CORRAL_TOKEN": service.users["alice"],
        }
        # the installed command, as a user types it (its entry point answers submit and
        # queue itself); else the same entry point through the interpreter
        installed = Path(sys.executable).parent / "corral"
        corral = (
            [str(installed)] if installed.exists() else [sys.executable, "-m", "corral.quick_verbs"]
        )
        job = ["--gpus", "1", "--", "sleep", "1"]

        def live_jobs() -> int:
            return len(service.client.jobs("PENDING,STARTING,RUNNING,SUSPENDED"))

        yield Side(
            name="corral",
            env=env,
            submit=[*corral, "submit", *job],
            array=lambda n, held: [
                *corral,
                "submit",
                "--array",
                f"0-{n - 1}",
                *(["--hold"] if held else []),
                *job,
            ],
            listing=[*corral, "queue", "-u", "alice"],
            held=[*corral, "submit", "--hold", *job],
            cancel_all=[*corral, "cancel", "-u", "alice"],
            live_jobs=live_jobs,
            starts={
                "--version": lambda job: [*corral, "--version"],
                "--help": lambda job: [*corral, "submit", "--help"],
                "submit a script": lambda job: [*corral, "submit", str(script(folder))],
                "show a job": lambda job: [*corral, "show", job],
                "list nodes": lambda job: [*corral, "nodes"],
            },
        )
    finally:
        service.close()


def script(folder: Path) -> Path:
    """A batch script as users write them, 1 GPU, its output thrown away (made once)."""
    path = folder / "job.sh"
    if not path.exists():
        path.write_text("#!/bin/bash\n#SBATCH --gpus=1\n#SBATCH -o /dev/null\nsleep 1\n")
    return path


def submitted_id(side: Side) -> str:
    """Submit one held job; its id (the last word of what the command says)."""
    done = subprocess.run(side.held, env=side.env, capture_output=True, text=True, check=True)
    words = done.stdout.split()  # "submitted job 5 (job)", "Submitted batch job 5"
    return words[2] if side.name == "corral" else words[-1]


def drain(side: Side, timeout: float = 600.0) -> None:
    """Cancel everything and wait until nothing of the user's is live."""
    subprocess.run(side.cancel_all, env=side.env, capture_output=True)
    wait_for(lambda: side.live_jobs() == 0, timeout, f"{side.name}'s queue to empty")


def in_turns(sides: list[Side], turn: int) -> list[Side]:
    """The sides in the order of turn ``turn`` (A/B/C, B/C/A, C/A/B, ...)."""
    k = turn % len(sides)
    return sides[k:] + sides[:k]


def measure(
    sides: list[Side], repeats: int, loop: int, array: int, listed: int, engine: int
) -> dict[str, dict[str, str]]:
    """Each measure on every side, taken in turns; the raw figures, by side and measure."""
    out: dict[str, dict[str, str]] = {side.name: {} for side in sides}
    runs: dict[str, list[float]] = {side.name: [] for side in sides}

    def medians(key: str, once: Callable[[Side], float]) -> None:
        for side in sides:
            runs[side.name] = []
        for turn in range(repeats):
            for side in in_turns(sides, turn):
                runs[side.name].append(once(side))
        for side in sides:
            out[side.name][key] = f"{statistics.median(runs[side.name]):.3f} s"

    def each(key: str, once: Callable[[Side], str]) -> None:
        for side in sides:
            out[side.name][key] = once(side)

    medians("one submit", lambda side: timed(side.submit, side.env))
    for side in sides:
        drain(side)
    held = {side.name: submitted_id(side) for side in sides}
    for name in sides[0].starts:
        medians(name, lambda side, name=name: timed(side.starts[name](held[side.name]), side.env))
    for side in sides:
        drain(side)

    def submit_loop(side: Side) -> str:
        began = time.perf_counter()
        for _ in range(loop):
            timed(side.submit, side.env)
        return f"{loop / (time.perf_counter() - began):.1f} jobs/s"

    each("submit loop", submit_loop)
    for side in sides:
        drain(side)
    each(f"{array:,}-task array", lambda side: f"{timed(side.array(array, True), side.env):.3f} s")
    for side in sides:
        drain(side)
        timed(side.array(listed, True), side.env)
    for side in sides:
        wait_for(lambda side=side: side.live_jobs() >= listed, 300, "the held array listed")
    medians(f"list {listed:,} pending", lambda side: timed(side.listing, side.env))

    def after_a_change(side: Side) -> float:
        timed(side.held, side.env)
        return timed(side.listing, side.env)

    medians(f"list {listed:,} pending, just changed", after_a_change)
    each("cancel everything", lambda side: f"{timed(side.cancel_all, side.env):.3f} s")
    for side in sides:
        wait_for(lambda side=side: side.live_jobs() == 0, 600, f"{side.name}'s queue to empty")

    def engine_run(side: Side) -> str:
        began = time.perf_counter()
        timed(side.array(engine, False), side.env)
        wait_for(lambda: side.live_jobs() == 0, 1200, f"{side.name}'s {engine} jobs to end")
        return f"{time.perf_counter() - began:.1f} s"

    each(f"{engine} one-second jobs on {GPUS} GPUs", engine_run)
    return out


def ratio(slurm: str, corral: str) -> str:
    """corral's figure over Slurm's (for jobs/s, Slurm's over corral's): >1 is slower."""
    a, unit = slurm.split()
    b, _ = corral.split()
    x, y = float(a), float(b)
    if not x or not y:
        return "-"
    return f"{(x / y if unit == 'jobs/s' else y / x):.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    counts = (
        {"loop": 10, "array": 200, "listed": 500, "engine": 24}
        if args.quick
        else {"loop": 100, "array": 2_000, "listed": 10_000, "engine": 200}
    )
    # corral's bytecode as an install leaves it (pip compiles it; a source checkout under
    # PYTHONDONTWRITEBYTECODE would compile every module at every command's start)
    import compileall

    import corral

    compileall.compile_dir(Path(corral.__file__).parent, quiet=1)
    why_not = missing_slurm()
    with (
        tempfile.TemporaryDirectory(prefix="corral-vs-slurm-") as tmp,
        contextlib.ExitStack() as up,
    ):
        sides = [up.enter_context(corral_service(Path(tmp) / "corral"))]
        if why_not is None:
            sides.append(up.enter_context(slurm_side(Path(tmp) / "slurm", "Slurm")))
            sides.append(up.enter_context(slurm_side(Path(tmp) / "tuned", "Slurm tuned", (TUNED,))))
        columns = measure(sides, args.repeats, **counts)
    print(f"on {os.cpu_count()} CPUs; medians of {args.repeats} where repeated, taken in turns")
    if why_not is not None:
        print(f"Slurm's columns are missing: {why_not}")
    slurms = [name for name in ("Slurm", "Slurm tuned") if name in columns]
    head = ["measure", *slurms, "corral", *(f"corral / {name}" for name in slurms)]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for key, figure in columns["corral"].items():
        theirs = [columns[name][key] for name in slurms]
        cells = [key, *theirs, figure, *(ratio(t, figure) for t in theirs)]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
