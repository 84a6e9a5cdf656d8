"""``srun`` in a job's script, as Slurm's users write it: ``srun python train.py``
starts the job's tasks on this node, each with the variables a Slurm task reads.

corral runs a job's script once on each of its nodes (once in all on one
machine) and puts this program first on the script's ``PATH`` as ``srun``. Each
``srun`` line then starts, on its node, the job's tasks per node
(``--ntasks-per-node``, or ``--ntasks`` split over the nodes; 1 unless given):
task ``k`` of node ``n`` gets ``SLURM_PROCID = n x tasks per node + k``,
``SLURM_LOCALID = k``, ``SLURM_NTASKS`` and the step's counts; with
``--gpus-per-task=G`` it sees only its own G of the node's GPUs
(``CUDA_VISIBLE_DEVICES``, and their ids in ``SLURM_JOB_GPUS``), otherwise all
of them, as under Slurm. It waits for
every task and exits with the highest exit status among them (0 when all
succeed); ``--kill-on-bad-exit`` stops the others when one fails (their ends
then do not count), ``--label``
prefixes each line of output with its task's number.

Signals reach the tasks from the job's process group (a stop, a suspend, a
cancel), so this program only waits through them. Options it cannot honour are
refused by name, never ignored: the line then fails with status 1, as a wrong
option does under Slurm. Standard library only: it starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

FLAGS = {
    "-l": "label",
    "--label": "label",
    "-K": "kill",
    "--kill-on-bad-exit": "kill",
    "-u": None,
    "--unbuffered": None,
    "-Q": None,
    "--quiet": None,
    "-v": None,
    "--verbose": None,
    "--exclusive": None,
    "--overlap": None,
}
"""Options without a value -> what they set (None: nothing to do here)."""
VALUED = {
    "-n": "ntasks",
    "--ntasks": "ntasks",
    "--ntasks-per-node": "per_node",
    "-N": "nodes",
    "--nodes": "nodes",
    "--gpus-per-task": "gpus_per_task",
    "-c": None,
    "--cpus-per-task": None,
    "--cpu-bind": None,
    "--cpu_bind": None,
    "-J": None,
    "--job-name": None,
    "--mpi": "mpi",
    "--export": "export",
}
"""Options with a value -> what they set (None: taken and left to the job's own
settings: its CPUs, its name)."""


class Refused(Exception):
    """An srun line this program cannot carry out as Slurm would."""


@dataclass
class Step:
    """One srun line, read."""

    command: list[str]
    per_node: int
    label: bool = False
    kill: bool = False
    gpus_per_task: int | None = None


def read_line(argv: Sequence[str], env: dict[str, str]) -> Step:
    """The step an srun line asks for, given the job's variables (``env``)."""
    given: dict[str, str] = {}
    flags: set[str] = set()
    k = 0
    while k < len(argv):
        word = argv[k]
        if word == "--":
            k += 1
            break
        if not word.startswith("-") or word == "-":
            break
        name, eq, value = word.partition("=")
        if not word.startswith("--") and len(word) > 2 and word[:2] in VALUED:
            name, value, eq = word[:2], word[2:], "="  # (-n4, as Slurm takes it)
        if name in FLAGS:
            if eq and name in ("-K", "--kill-on-bad-exit"):
                if value not in ("0", "1"):
                    raise Refused(f"{name}={value}: give 0 or 1")
                if value == "1":
                    flags.add("kill")
            elif eq:
                raise Refused(f"{name} takes no value")
            elif FLAGS[name] is not None:
                flags.add(str(FLAGS[name]))
            k += 1
            continue
        if name not in VALUED:
            raise Refused(
                f"corral's srun does not take {name} (it takes -n, --ntasks-per-node, -N, "
                "--gpus-per-task, -l, -K and options it can leave to the job's settings)"
            )
        if not eq:
            if k + 1 >= len(argv):
                raise Refused(f"{name} needs a value")
            value = argv[k + 1]
            k += 1
        k += 1
        what = VALUED[name]
        if what is not None:
            given[what] = value
    command = list(argv[k:])
    if not command:
        raise Refused("no command to run: srun [options] command [arguments]")
    return _step(command, given, flags, env)


def _count(value: str, what: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise Refused(f"{what} '{value}' is not a whole number") from None
    if number < 1:
        raise Refused(f"{what} '{value}': give at least 1")
    return number


def _step(command: list[str], given: dict[str, str], flags: set[str], env: dict[str, str]) -> Step:
    nodes = int(env.get("SLURM_NNODES", "1") or 1)
    per_node = int(env.get("SLURM_NTASKS_PER_NODE", "1") or 1)
    if "nodes" in given and _count(given["nodes"], "--nodes") != nodes:
        raise Refused(
            f"--nodes {given['nodes']}: corral runs this script on each of the job's {nodes} "
            f"node{'s' if nodes > 1 else ''}, and srun starts tasks on its own node; "
            f"give -N {nodes} or leave it out"
        )
    if "per_node" in given:
        per_node = _count(given["per_node"], "--ntasks-per-node")
    if "ntasks" in given:
        total = _count(given["ntasks"], "--ntasks")
        if total % nodes:
            raise Refused(
                f"--ntasks {total} does not split evenly over the job's {nodes} nodes "
                "(each node's srun starts the same number)"
            )
        if "per_node" in given and per_node * nodes != total:
            raise Refused(f"--ntasks {total} and --ntasks-per-node {per_node} disagree")
        per_node = total // nodes
    if given.get("mpi", "none") != "none":
        raise Refused(f"--mpi={given['mpi']}: corral starts tasks without an MPI launcher")
    if given.get("export", "ALL") != "ALL":
        raise Refused(f"--export={given['export']}: tasks get the job's environment (ALL)")
    gpus_per_task = None
    if "gpus_per_task" in given:
        gpus_per_task = _count(given["gpus_per_task"], "--gpus-per-task")
        have = len(_split(env, "SLURM_JOB_GPUS"))
        if per_node * gpus_per_task > have:
            raise Refused(
                f"--gpus-per-task {gpus_per_task} for {per_node} tasks needs "
                f"{per_node * gpus_per_task} GPUs; the job has {have} on this node"
            )
    return Step(command, per_node, "label" in flags, "kill" in flags, gpus_per_task)


def _split(env: dict[str, str], name: str) -> list[str]:
    return [d for d in env.get(name, "").split(",") if d]


def task_env(step: Step, env: dict[str, str], local: int) -> dict[str, str]:
    """Task ``local``'s variables on this node."""
    nodes = int(env.get("SLURM_NNODES", "1") or 1)
    node = int(env.get("SLURM_NODEID", "0") or 0)
    total = nodes * step.per_node
    out = dict(env)
    out.update(
        SLURM_PROCID=str(node * step.per_node + local),
        SLURM_LOCALID=str(local),
        SLURM_NTASKS=str(total),
        SLURM_NPROCS=str(total),
        SLURM_STEP_NUM_TASKS=str(total),
        SLURM_STEP_NUM_NODES=str(nodes),
        SLURM_STEP_TASKS_PER_NODE=str(step.per_node),
        SLURM_STEP_ID=env.get("SLURM_STEP_ID", "0"),
    )
    if step.gpus_per_task is not None:  # its own share of the node's GPUs
        share = slice(local * step.gpus_per_task, (local + 1) * step.gpus_per_task)
        out["SLURM_JOB_GPUS"] = ",".join(_split(env, "SLURM_JOB_GPUS")[share])
        out["SLURM_GPUS_ON_NODE"] = str(step.gpus_per_task)
        devices = _split(env, "CUDA_VISIBLE_DEVICES")  # (none where the GPUs are virtual)
        if devices:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(devices[share])
    return out


def _copy(source: IO[bytes], sink: IO[bytes], prefix: bytes, lock: threading.Lock) -> None:
    for line in source:
        with lock:
            sink.write(prefix + line)
            sink.flush()


def run(step: Step, env: dict[str, str]) -> int:
    """Start the step's tasks, wait for all, and return the exit status srun gives:
    the highest among the tasks (a signal's death counts as 128 + its number)."""
    lock = threading.Lock()
    pipe = subprocess.PIPE if step.label else None
    tasks: list[subprocess.Popen[bytes]] = []
    ranks: dict[int, str] = {}
    copiers: list[threading.Thread] = []
    try:
        for local in range(step.per_node):
            mine = task_env(step, env, local)
            try:
                task = subprocess.Popen(step.command, env=mine, stdout=pipe, stderr=pipe)
            except OSError as exc:
                print(f"srun: error: {step.command[0]}: {exc.strerror}", file=sys.stderr)
                for started in tasks:  # (none outlives the line that started it)
                    _terminate_tree(started.pid)
                for started in tasks:
                    started.wait()
                return 2 if isinstance(exc, FileNotFoundError) else 1
            ranks[task.pid] = mine["SLURM_PROCID"]
            tasks.append(task)
            if step.label:
                prefix = f"{mine['SLURM_PROCID']}: ".encode()
                for source, sink in ((task.stdout, sys.stdout), (task.stderr, sys.stderr)):
                    assert source is not None
                    copier = threading.Thread(
                        target=_copy, args=(source, sink.buffer, prefix, lock), daemon=True
                    )
                    copier.start()
                    copiers.append(copier)
        return _wait(tasks, step.kill, ranks)
    finally:
        for copier in copiers:
            copier.join(5)


def _wait(tasks: list[subprocess.Popen[bytes]], kill: bool, ranks: dict[int, str]) -> int:
    """Wait for every task: the highest status among those that ended by themselves
    (tasks stopped because another failed, under ``kill``, do not count)."""
    worst = 0
    left = list(tasks)
    stopped: set[int] = set()
    while left:
        pid, status = os.wait()
        task = next((t for t in left if t.pid == pid), None)
        if task is None:
            continue
        left.remove(task)
        code = os.waitstatus_to_exitcode(status)
        task.returncode = code
        if pid not in stopped:
            _say_failed(ranks.get(pid, "?"), code)
            worst = max(worst, 128 - code if code < 0 else code)
        code = 128 - code if code < 0 else code
        if code and kill and pid not in stopped:
            for other in left:
                stopped.add(other.pid)
                _terminate_tree(other.pid)
    return worst


def _say_failed(rank: str, code: int) -> None:
    """A task that failed, on stderr in Slurm's words ("srun: error: NODE: task 3:
    Exited with exit code 2"), so a log reads as it would under Slurm."""
    if code == 0:
        return
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    how = f"Exited with exit code {code}" if code > 0 else (signal.strsignal(-code) or "Killed")
    print(f"srun: error: {node}: task {rank}: {how}", file=sys.stderr, flush=True)


def _terminate_tree(pid: int) -> None:
    """SIGTERM to a task and every process it started (its shell's children too): a
    task stopped for another's failure is stopped whole. The tasks share the job's
    process group (the service's own stops reach them through it), so the tree is
    read from /proc, each process frozen (SIGSTOP) before its children are read so
    that none is forked unseen, then all are sent SIGTERM and let go on."""
    frozen: list[int] = []
    frontier = [pid]
    while frontier:
        for each in frontier:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, signal.SIGSTOP)
                frozen.append(each)
        frontier = [child for child, parent in _parents().items() if parent in frontier]
    for each in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGTERM)
            os.kill(each, signal.SIGCONT)


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return parents


def main(argv: Sequence[str] | None = None) -> int:
    env = dict(os.environ)
    try:
        step = read_line(sys.argv[1:] if argv is None else argv, env)
    except Refused as exc:
        print(f"srun: error: {exc}", file=sys.stderr)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        # (the job's process group gets them, tasks included: wait for the tasks' ends)
        signal.signal(sig, lambda *_: None)
    return run(step, env)


if __name__ == "__main__":
    sys.exit(main())
