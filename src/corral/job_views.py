"""What ``corral show`` and ``corral nodes`` print, with the standard library only
(tables in Rich's box by :func:`corral.queue_listing.box_table`, Rich imported
only where it must draw), so that the full command line (:mod:`corral.cli`) and
the quick verbs (:mod:`corral.quick_verbs`) print them from the same code."""

from __future__ import annotations

import sys

from corral.errors import CorralError
from corral.queue_listing import PLAIN_ROWS, box_table, plain_table, printable, steps, when

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_TERMINAL_CONTROLS = rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]"


def terminal_safe(data: bytes) -> bytes:
    """``data`` with terminal controls shown as escapes (``\\x1b``): a job's output or
    script, shown on an admin's terminal, cannot drive it."""
    import re

    return re.sub(
        _TERMINAL_CONTROLS, lambda m: "".join(f"\\x{b:02x}" for b in m.group()).encode(), data
    )


NODE_COLUMNS = ["node", "type", "gpus", "in use", "state", "jobs", "reason"]
ATTEMPT_COLUMNS = ["#", "phase", "gpus", "start", "end", "cause", "detail"]


def job_lines(job: dict[str, Any]) -> list[str]:
    """A job's state, command, GPUs, progress and times, a line each (escaped: no value
    forges a line of its own or drives the terminal)."""
    from corral.timespan import span

    spec = job.get("spec") or {}
    progress = [f"{steps(job['steps'], job['total_steps'])} steps"]
    if job["throughput"]:
        progress.append(f"{job['throughput']:.2f} steps/s")
    if job["loss"] is not None:
        progress.append(f"loss {job['loss']:.4f}")
    if job.get("gpu_utilization") is not None:
        progress.append(f"GPU {job['gpu_utilization']:.0f}% busy")
    if job.get("gpu_memory_gb") is not None:
        progress.append(f"{job['gpu_memory_gb']:.1f} GB of GPU memory")
    if job.get("batch_size"):
        progress.append(f"batch {job['batch_size']}")
    if job.get("grad_noise_scale") is not None:
        progress.append(f"noise scale {job['grad_noise_scale']:.0f}")
    gpus = f"{job['gpus']} {job['gpu_type'] or 'any type'}"
    if spec.get("nodes"):
        gpus += f", exactly {spec['nodes']} nodes"
    if job["assigned_gpus"]:
        gpus += f" on {job['assigned_gpus']}"
    if not job["gpus"]:  # a CPU-only job: the CPUs it holds
        cpus = spec.get("cpus") or 1
        gpus = f"0 (CPU-only, {cpus} CPU{'s' if cpus > 1 else ''})"
    lines = [
        f"job {job['id']} '{job['name']}' of {job['user']}: {job['status']}"
        + (f" ({job['reason']})" if job["reason"] else ""),
        f"  command   {' '.join(job['command'])}",
        f"  gpus      {gpus}",
        f"  priority  {job['priority']}   retries {job['failures']}/{job['max_retries']}"
        f"   preemptions {job['preemptions']}",
        f"  progress  {', '.join(progress)}",
        f"  submitted {when(job['submit_time'])}  started {when(job['first_start'])}"
        f"  ended {when(job['end_time'])}",
    ]
    if spec.get("output"):
        lines.append(
            f"  output    {spec['output']} (the job's output goes there, not to 'corral logs')"
        )
    if job.get("remaining"):
        left = job["remaining"]
        lines.append(f"  remaining {span(left['seconds'])} (from {left['source']})")
    for key, value in (job.get("policy_view") or {}).items():
        lines.append(f"  policy    {key}: {value}")
    return [printable(line) for line in lines]


def print_job(job: dict[str, Any]) -> None:
    """``corral show``: the job's lines, then its attempts in a table."""
    sys.stdout.write("\n".join(job_lines(job)) + "\n")
    sys.stdout.flush()
    if job["attempts"]:
        rows = [
            (
                str(a["number"]),
                a["phase"],
                ",".join(map(str, a["gpus"])),
                when(a["start_time"]),
                when(a["end_time"]),
                a["cause"] or "running",
                a["detail"] or "",
            )
            for a in job["attempts"]
        ]
        box_table("attempts", ATTEMPT_COLUMNS, rows)


LOG_POLL = 0.5
"""Seconds between looks at a log that ``--follow`` watches."""


def print_log(client: Any, job_id: int, follow: bool, attempt: int | None, as_json: bool) -> None:
    """``corral logs``: the job's log (its latest attempt's, or ``attempt``'s), raw or as
    JSON lines; with ``follow``, what is written next and the attempts after, until the
    job ends."""
    import time

    from corral.api.limits import LOG_CHUNK
    from corral.model.status import JobStatus

    offset, current = 0, attempt
    write = log_writer(job_id, as_json)
    output = (client.job(job_id).get("spec") or {}).get("output")
    if output:  # Slurm's --output: the job writes there; the log holds corral's lines
        sys.stderr.write(
            printable(
                f"job {job_id} writes its output to {output} (its --output); "
                "below is what corral logged for it"
            )
            + "\n"
        )
        sys.stderr.flush()
    while True:
        response = client.logs(job_id, offset, current)
        shown = int(response.headers.get("X-Attempt", "0"))
        if current is None and shown:
            current = shown  # stay on this attempt's file; newer ones are announced
        write(shown, response.content)
        offset = int(response.headers.get("X-Next-Offset", offset))
        finished = response.headers.get("X-Finished") == "1"
        if len(response.content) >= LOG_CHUNK:  # more of this file is waiting
            continue
        if not follow:
            return
        if finished:
            job = client.job(job_id)
            if JobStatus(job["status"]).terminal:
                return
            if attempt is None:
                latest = client.logs(job_id, 0, None)
                number = int(latest.headers.get("X-Attempt", "0"))
                if number != shown and number:
                    if not as_json:
                        write(number, f"--- attempt {number} ---\n".encode())
                    offset, current = 0, number
                    continue
        time.sleep(LOG_POLL)


def log_writer(job_id: int, as_json: bool) -> Callable[[int, bytes], None]:
    """Where a log's pieces go: the bytes to stdout (a terminal's controls escaped when
    it is one), or a JSON line each."""
    out = sys.stdout.buffer
    tty = sys.stdout.isatty()

    def raw(attempt: int, data: bytes) -> None:
        out.write(terminal_safe(data) if tty else data)
        out.flush()

    def lines(attempt: int, data: bytes) -> None:
        if data:
            import json

            text = data.decode("utf-8", errors="replace")
            piece = {"job": job_id, "attempt": attempt, "text": text}
            out.write((json.dumps(piece) + "\n").encode())
            out.flush()

    return lines if as_json else raw


def print_nodes(nodes: list[dict[str, Any]]) -> None:
    """``corral nodes``: each node, its GPUs, what runs there and its state."""
    rows = [
        (
            n["name"],
            f"{n['gpu_type']} (virtual)" if n["virtual"] else n["gpu_type"],
            str(n["gpus"]),
            str(n["gpus_in_use"]),
            n["state"],
            ",".join(map(str, n["jobs"])),
            n.get("reason") or "",
        )
        for n in nodes
    ]
    box_table("nodes", NODE_COLUMNS, rows)


HISTORY_COLUMNS = ["id", "name", "user", "state", "gpus", "submit", "wait", "elapsed"]
HISTORY_COLUMNS += ["GPU-h", "tries", "exit"]


def history_span(
    since: str | None, starttime: str | None, endtime: str | None
) -> tuple[float, float | None]:
    """``corral history``'s window of submission times: ``--since`` (a duration back
    from now), ``-S`` and ``-E`` (dates, local time, as sacct reads them)."""
    import time

    start = 0.0
    if since:
        from corral.timespan import parse_seconds

        try:
            start = time.time() - parse_seconds(since)
        except ValueError as exc:
            raise CorralError(f"--since {since}: {exc}") from None
    if starttime:
        start = max(start, moment(starttime, "--starttime"))
    return start, moment(endtime, "--endtime") if endtime else None


def moment(text: str, option: str) -> float:
    """A date or date and time (local time, as sacct reads them) as Unix time."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise CorralError(
            f"{option} {text}: give a date or date and time, e.g. 2026-11-01 or 2026-11-01T08:00"
        ) from None


def print_history(rows: list[dict[str, Any]]) -> None:
    """``corral history``: a row a job (plain columns past a screenful, as ``corral
    queue``), then the totals per user."""
    from corral.timespan import span

    cells = [
        (
            str(r["id"]),
            r["name"],
            r["user"],
            r["status"],
            str(r["gpus"]),
            when(r["submit_time"]),
            span(r["wait"]),
            span(r["elapsed"]),
            f"{r['gpu_hours']:.2f}",
            str(r["attempts"]),
            "-" if r["exit_code"] is None else str(r["exit_code"]),
        )
        for r in rows
    ]
    title = f"{len(rows)} job{'' if len(rows) == 1 else 's'}"
    if len(cells) > PLAIN_ROWS:
        plain_table(title, HISTORY_COLUMNS, cells)
    else:
        box_table(title, HISTORY_COLUMNS, cells, right=("GPU-h", "tries"))
    totals: dict[str, list[float]] = {}
    for r in rows:
        total = totals.setdefault(r["user"], [0, 0.0, 0.0])
        total[0] += 1
        total[1] += r["elapsed"]
        total[2] += r["gpu_hours"]
    if totals:
        per_user = [
            (name, str(int(jobs)), span(elapsed), f"{gpu_hours:.2f}")
            for name, (jobs, elapsed, gpu_hours) in sorted(totals.items())
        ]
        box_table("per user", ["user", "jobs", "elapsed", "GPU-h"], per_user)
