"""Interactive allocations: ``corral alloc`` (Slurm's ``salloc``) and ``corral run
--pty CMD`` (``srun --pty CMD``).

The request waits in the queue under the policy like any job; once it runs,
this terminal is joined to a shell (or the command) on the allocated GPUs, with
the job's environment (this shell's, as ``--export=ALL``) and limits. The
allocation ends when the shell exits, at its time limit, or on cancel; Ctrl-C
while it waits gives the request up. The command exits with the shell's status.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli.app import app
from corral.cli.service import TokenOpt, UrlOpt
from corral.errors import CorralError

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}
POLL = 0.5
OPEN_WAIT = 30.0
"""Seconds a running allocation's terminal may take to open before giving up."""

GpusOpt = Annotated[int, typer.Option("--gpus", "-G", help="GPUs of the allocation")]
TimeOpt = Annotated[
    str | None, typer.Option("--time", "-t", help="its time limit: 1h, 30m, 2:00:00")
]
NameOpt = Annotated[str, typer.Option("--name", "-J", help="the allocation's job name")]
TypeOpt = Annotated[str | None, typer.Option("--gpu-type", help="run only on this GPU type")]
CpusOpt = Annotated[int | None, typer.Option("--cpus", "-c", help="CPUs")]
MemOpt = Annotated[str | None, typer.Option("--mem", help="memory: 16G, 512M")]
VcOpt = Annotated[str | None, typer.Option("--account", "-A", "--vc", help="virtual cluster")]
PartOpt = Annotated[str | None, typer.Option("--partition", "-p", help="partition")]
ExportOpt = Annotated[
    str | None, typer.Option("--export", help="ALL (default), NONE, or variables: A=1,B")
]


def say(text: str) -> None:
    print(f"corral: {text}", file=sys.stderr, flush=True)


def allocate(fields: dict[str, Any], url: str | None, token: str | None) -> int:
    """Queue the allocation, wait for it, join this terminal to it; its exit status."""
    from corral.api.client import Client
    from corral.api.terminal_client import NOT_OPEN, Refused, session
    from corral.submit_env import batch_fields

    try:
        batch_fields(fields, dict(os.environ), str(Path.cwd()))
    except ValueError as exc:
        raise CorralError(f"--export: {exc}") from None
    with Client(url, token) as client:
        job_id = int(client.submit(fields)["id"])
        say(f"pending job allocation {job_id}")
        job = wait_running(client, job_id)
        if job["status"] != "RUNNING":
            say(f"job allocation {job_id} ended before it started: {job['status']}")
            return 1
        say(f"granted job allocation {job_id}")
        given_up = time.monotonic() + OPEN_WAIT
        while True:
            code, reason = session(client, job_id)
            if code < 4000:
                break
            if code == NOT_OPEN and "not open" in reason and time.monotonic() < given_up:
                time.sleep(POLL)  # (the job's terminal is opening)
                continue
            raise Refused(code, reason)
        ended = wait_ended(client, job_id)
    status, exit_code = ended["status"], ended.get("exit_code")
    say(f"relinquishing job allocation {job_id} ({status}, exit code {exit_code})")
    return int(exit_code) if isinstance(exit_code, int) else (0 if status == "SUCCEEDED" else 1)


def wait_running(client: Any, job_id: int) -> dict[str, Any]:
    """The job once it runs (or has ended); Ctrl-C cancels it, as salloc does."""
    said = False
    try:
        while True:
            job: dict[str, Any] = client.job(job_id)
            if job["status"] == "RUNNING" or job["status"] in TERMINAL:
                return job
            if not said:
                reason = f" ({job['reason']})" if job.get("reason") else ""
                say(f"job {job_id} queued and waiting for resources{reason}")
                said = True
            time.sleep(POLL)
    except KeyboardInterrupt:
        client.action(job_id, "cancel")
        say(f"job allocation {job_id} has been revoked")
        raise typer.Exit(1) from None


def wait_ended(client: Any, job_id: int, within: float = 30.0) -> dict[str, Any]:
    """The job once its end is recorded (its terminal has closed: moments later)."""
    deadline = time.monotonic() + within
    while True:
        job: dict[str, Any] = client.job(job_id)
        if job["status"] in TERMINAL or time.monotonic() > deadline:
            return job
        time.sleep(0.2)


def _fields(
    command: list[str],
    gpus: int,
    name: str,
    wall_time: str | None,
    gpu_type: str | None,
    cpus: int | None,
    memory: str | None,
    vc: str | None,
    partition: str | None,
    export: str | None,
) -> dict[str, Any]:
    given = {
        "gpu_type": gpu_type,
        "wall_time": wall_time,
        "cpus": cpus,
        "memory": memory,
        "vc": vc,
        "partition": partition,
        "export": export,
    }
    fields = {"name": name, "gpus": gpus, "command": command, "interactive": True}
    fields["workdir"] = str(Path.cwd())
    fields.update({k: v for k, v in given.items() if v is not None})
    return fields


def _shell() -> list[str]:
    return [os.environ.get("SHELL") or "/bin/bash"]


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="An interactive allocation (salloc): wait in the queue, then a shell (or the "
    "command after '--') on the GPUs given, ending when it exits.",
)
def alloc(
    ctx: typer.Context,
    gpus: GpusOpt = 1,
    name: NameOpt = "interactive",
    wall_time: TimeOpt = None,
    gpu_type: TypeOpt = None,
    cpus: CpusOpt = None,
    memory: MemOpt = None,
    vc: VcOpt = None,
    partition: PartOpt = None,
    export: ExportOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    command = list(ctx.args) or _shell()
    fields = _fields(command, gpus, name, wall_time, gpu_type, cpus, memory, vc, partition, export)
    raise typer.Exit(allocate(fields, url, token))


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="Run a command on a terminal of its own on the GPUs given (srun --pty): "
    "'corral run --pty bash', 'corral run --pty -G 2 -- python'.",
)
def run(
    ctx: typer.Context,
    pty: Annotated[bool, typer.Option("--pty", help="on a pseudo-terminal (required)")] = False,
    gpus: GpusOpt = 1,
    name: NameOpt = "interactive",
    wall_time: TimeOpt = None,
    gpu_type: TypeOpt = None,
    cpus: CpusOpt = None,
    memory: MemOpt = None,
    vc: VcOpt = None,
    partition: PartOpt = None,
    export: ExportOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    if not pty:
        raise CorralError(
            "corral run takes --pty (a terminal of its own); for a batch job use "
            "'corral submit --wait -- CMD'"
        )
    command = list(ctx.args) or _shell()
    fields = _fields(command, gpus, name, wall_time, gpu_type, cpus, memory, vc, partition, export)
    raise typer.Exit(allocate(fields, url, token))
