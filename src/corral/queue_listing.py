"""What ``corral queue`` shows of each job, and the plain aligned columns of a long
listing: the standard library only, so that both the full command line
(:mod:`corral.cli`) and the quick verbs (:mod:`corral.quick_verbs`) print the
queue from the same code, the quick ones without importing Typer or Rich."""

from __future__ import annotations

import functools
import sys
import time

from corral.errors import CorralError
from corral.timespan import span

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]}
del _CONTROL[ord("\n")], _CONTROL[ord("\t")]

PLAIN_ROWS = 500
"""Tables longer than this are printed as plain aligned columns (rich's layout takes
seconds over ten thousand rows; squeue prints plain columns too)."""

QUEUE_FIELDS = [
    "id",
    "name",
    "user",
    "status",
    "gpus",
    "gpu_type",
    "position",
    "reason",
    "steps",
    "total_steps",
    "remaining",
    "submit_time",
]
"""What ``corral queue`` shows of each job (asked of the API, so a long listing is small)."""
QUEUE_COLUMNS = ("id", "name", "user", "state", "gpus", "pos", "reason", "steps", "left", "submit")
"""The columns ``corral queue`` can show (``--format``), in its default order."""


def printable(text: str) -> str:
    """``text`` with terminal control characters shown as escapes (``\\x1b``): what
    one user wrote (a command, a name) never drives another user's terminal."""
    return text.translate(_CONTROL)


def plain_table(title: str, columns: list[str], rows: Sequence[Sequence[str]]) -> None:
    """``rows`` under ``columns`` as plain aligned columns on standard output, cells
    with control characters escaped (they may come from other users)."""
    cells = rows
    if not "".join(map("".join, rows)).isprintable():  # rare: escape them
        cells = [[printable(c) for c in row] for row in rows]
    widths = [
        max(len(name), *map(len, column))
        for name, column in zip(columns, zip(*cells, strict=True), strict=True)
    ]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [title, line.format(*columns).rstrip()]
    out += [line.format(*r).rstrip() for r in cells]
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


def when(t: float | None) -> str:
    """A moment as a time of day, '-' for none."""
    return "-" if t is None else _clock(int(t))


@functools.lru_cache(maxsize=4096)
def _clock(second: int) -> str:
    """A time of day (jobs submitted in one second share it: a batch of thousands)."""
    return time.strftime("%H:%M:%S", time.localtime(second))


def work_left(remaining: dict[str, Any] | None) -> str:
    """Work left as the policy sees it (squeue's TIME_LEFT); '~' marks a stand-in or a
    prediction (a loss curve's) rather than a measurement."""
    if not remaining:
        return "-"
    return _left(remaining["seconds"], remaining["source"])


@functools.lru_cache(maxsize=4096)
def _left(seconds: float, source: str) -> str:
    """(Queued jobs share a few values: ten thousand held jobs, the default's one.)"""
    guess = "~" if source in ("history", "default", "convergence") else ""
    return guess + span(seconds)


def steps(job: dict[str, Any]) -> str:
    """Steps done, of the total where the job gave one."""
    done = int(job["steps"])
    return f"{done}/{job['total_steps']}" if job.get("total_steps") else str(done)


def queue_columns(text: str | None) -> list[str]:
    """The columns ``--format`` names (all, in order, when it names none)."""
    if not text:
        return list(QUEUE_COLUMNS)
    chosen = [c.strip().lower() for c in text.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in QUEUE_COLUMNS]
    if unknown or not chosen:
        raise CorralError(
            f"--format: no column '{unknown[0] if unknown else text}' "
            f"(columns: {', '.join(QUEUE_COLUMNS)})"
        )
    return chosen


def _gpus(job: dict[str, Any]) -> str:
    kind = job["gpu_type"]
    return f"{job['gpus']} {kind}" if kind else str(job["gpus"])


CELLS: dict[str, Callable[[list[dict[str, Any]]], list[str]]] = {
    "id": lambda jobs: [str(j["id"]) for j in jobs],
    "name": lambda jobs: [j["name"] for j in jobs],
    "user": lambda jobs: [j["user"] for j in jobs],
    "state": lambda jobs: [j["status"] for j in jobs],
    "gpus": lambda jobs: [_gpus(j) for j in jobs],
    "pos": lambda jobs: [str(j["position"] or "-") for j in jobs],
    "reason": lambda jobs: [j["reason"] or "" for j in jobs],
    "steps": lambda jobs: [steps(j) for j in jobs],
    "left": lambda jobs: [work_left(j.get("remaining")) for j in jobs],
    "submit": lambda jobs: [when(j["submit_time"]) for j in jobs],
}
"""Each column's cells for a list of jobs, a column at a time (a call per column, not
per cell: a listing of ten thousand jobs is a hundred thousand cells)."""


def queue_rows(jobs: list[dict[str, Any]], chosen: list[str]) -> list[tuple[str, ...]]:
    """Each job's cells in the ``chosen`` columns."""
    return list(zip(*(CELLS[c](jobs) for c in chosen), strict=True)) if jobs else []


def queue_title(shown: int, total: int) -> str:
    """The listing's title: how many jobs, and how many of them are shown."""
    title = f"{total} job{'' if total == 1 else 's'}"
    return f"first {shown} of {title}" if shown < total else title


def cut_note(shown: int, total: int, limit: int | None) -> str | None:
    """What to say on standard error when ``--limit`` cut the listing."""
    if shown >= total:
        return None
    return (
        f"showing the first {shown} of {total} jobs (--limit {limit}); "
        "leave --limit out to list them all"
    )
