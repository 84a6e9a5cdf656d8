"""What ``corral queue`` shows of each job, and how a table is drawn: the plain
aligned columns of a long listing with the standard library only, a screenful
in Rich's box (Rich imported then, Typer never), so that both the full command
line (:mod:`corral.cli`) and the quick verbs (:mod:`corral.quick_verbs`) print
the queue from the same code."""

from __future__ import annotations

import os
import sys
import time

from corral.errors import CorralError
from corral.timespan import span

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from rich.console import Console

    Table = dict[str, list[Any]]
    """Jobs a list per field, the jobs in the same order in each (the API's columns)."""

_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]}
_CONTROL.update({ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r"})

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
    """``text`` with terminal control characters shown as escapes (``\\x1b``, ``\\n``):
    what one user wrote (a command, a name) never drives another user's terminal,
    nor forges a line of its own in what an admin reads."""
    return text.translate(_CONTROL)


def plain_table(title: str, columns: list[str], rows: Sequence[Sequence[str]]) -> None:
    """``rows`` under ``columns`` as plain aligned columns on standard output, cells
    with control characters escaped (they may come from other users)."""
    cells = rows
    if not "".join(map("".join, rows)).isprintable():  # rare: escape them
        cells = [[printable(c) for c in row] for row in rows]
    by_column = list(zip(columns, *cells, strict=True))  # (each with its name first)
    widths = [max(map(len, column)) for column in by_column]
    padded = [list(map(str.ljust, c, [w] * len(c))) for c, w in zip(by_column, widths, strict=True)]
    out = [title, *map(str.rstrip, map("  ".join, zip(*padded, strict=True)))]
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


def output_console() -> Console:
    """The output console; piped into another program it never cuts a field to fit 80
    columns (a table then reads as wide as its content, or $COLUMNS when set)."""
    from rich.console import Console

    made = Console()
    if not made.is_terminal and "COLUMNS" not in os.environ:
        made = Console(width=250)
    return made


def output_width() -> int:
    """The width :func:`output_console` would have, without importing Rich."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return int(columns)
    if not sys.stdout.isatty():
        return 250
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except OSError:
        return 80


def box_text(
    title: str,
    columns: list[str],
    rows: Sequence[Sequence[str]],
    width: int,
    right: Sequence[str] = (),
) -> str | None:
    """``rows`` under ``columns`` in Rich's default box (a heavy head), character for
    character as Rich draws it uncoloured (a test holds the two equal), or None
    where Rich would do more than draw: a table or title wider than ``width`` (Rich
    wraps cells and titles, and strips a title's spaces), and cells of several lines
    or of characters other than ASCII (Rich measures them by terminal cells). The
    columns named in ``right`` are justified right, head and cells, as Rich's
    ``justify="right"``. Rich itself takes 0.1 s to lay out a screenful of the
    queue, most of a quick ``corral queue``."""
    cells = [list(columns), *([printable(c) for c in row] for row in rows)]
    if not all(c.isascii() and c.isprintable() for row in cells for c in row):
        return None
    widths = [max(map(len, column)) for column in zip(*cells, strict=True)]
    inner = sum(widths) + 3 * len(widths) - 1
    if inner + 2 > width or len(title) > inner + 2 or title != title.strip():
        return None
    left = (inner + 2 - len(title)) // 2
    lines = [" " * left + title + " " * (inner + 2 - len(title) - left)] if title else []

    def rule(ends: str, middle: str, line: str) -> str:
        return ends[0] + middle.join(line * (w + 2) for w in widths) + ends[1]

    aligns = [">" if column in right else "<" for column in columns]

    def row(edge: str, values: Sequence[str]) -> str:
        # (Rich drops a right-justified cell's trailing spaces, then pads it on the left)
        padded = (
            f" {v.rstrip() if a == '>' else v:{a}{w}} "
            for v, a, w in zip(values, aligns, widths, strict=True)
        )
        return edge + edge.join(padded) + edge

    lines += [rule("┏┓", "┳", "━"), row("┃", cells[0]), rule("┡┩", "╇", "━")]
    lines += [row("│", values) for values in cells[1:]]
    lines.append(rule("└┘", "┴", "─"))
    return "\n".join(lines) + "\n"


def box_table(
    title: str,
    columns: list[str],
    rows: Sequence[Sequence[str]],
    console: Console | None = None,
    right: Sequence[str] = (),
) -> None:
    """``rows`` under ``columns`` in Rich's box on ``console`` (by default
    :func:`output_console`'s), cells with control characters escaped (and never
    read as Rich's markup). Drawn here where :func:`box_text` can; by Rich, imported
    then, where it cannot."""
    width = output_width() if console is None else console.width
    text = box_text(title, columns, rows, width, right)
    if text is not None:
        stream = sys.stdout if console is None else console.file
        stream.write(text)
        stream.flush()
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    for values in rows:
        table.add_row(*(Text(printable(cell)) for cell in values))
    (console or output_console()).print(table)


def when(t: float | None) -> str:
    """A moment as a time of day, '-' for none."""
    return "-" if t is None else _clock(int(t))


def _clock(second: int) -> str:
    """A time of day (jobs submitted in one second share it: a batch of thousands)."""
    return _remembered(_CLOCKS, second, lambda: time.strftime("%H:%M:%S", time.localtime(second)))


def work_left(remaining: dict[str, Any] | None) -> str:
    """Work left as the policy sees it (squeue's TIME_LEFT); '~' marks a stand-in or a
    prediction (a loss curve's) rather than a measurement."""
    if not remaining:
        return "-"
    return _left(remaining["seconds"], remaining["source"])


def _left(seconds: float, source: str) -> str:
    """(Queued jobs share a few values: ten thousand held jobs, the default's one.)"""
    guess = "~" if source in ("history", "default", "convergence") else ""
    return _remembered(_LEFT, (seconds, source), lambda: guess + span(seconds))


_CLOCKS: dict[int, str] = {}
_LEFT: dict[tuple[float, str], str] = {}
REMEMBERED = 4096
"""Cells kept by each of :func:`_clock` and :func:`_left` (then forgotten at once)."""


def _remembered(kept: dict[Any, str], key: Any, make: Callable[[], str]) -> str:
    """``kept[key]``, made the first time (``functools.lru_cache`` without importing
    ``functools``, ``collections`` and ``enum``: a quick command's tenth)."""
    text = kept.get(key)
    if text is None:
        if len(kept) >= REMEMBERED:
            kept.clear()
        text = kept[key] = make()
    return text


def steps(done: float, total: int | None) -> str:
    """Steps done, of the total where the job gave one."""
    return f"{int(done)}/{total}" if total else str(int(done))


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


def _gpus(count: int, kind: str | None) -> str:
    return f"{count} {kind}" if kind else str(count)


CELLS: dict[str, Callable[[Table], list[str]]] = {
    "id": lambda t: list(map(str, t["id"])),
    "name": lambda t: t["name"],
    "user": lambda t: t["user"],
    "state": lambda t: t["status"],
    "gpus": lambda t: list(map(_gpus, t["gpus"], t["gpu_type"])),
    "pos": lambda t: [str(p or "-") for p in t["position"]],
    "reason": lambda t: [r or "" for r in t["reason"]],
    "steps": lambda t: list(map(steps, t["steps"], t["total_steps"])),
    "left": lambda t: list(map(work_left, t["remaining"])),
    "submit": lambda t: list(map(when, t["submit_time"])),
}
"""Each column's cells from the jobs' fields, a column at a time (a call per column,
not per cell: a listing of ten thousand jobs is a hundred thousand cells)."""


def queue_rows(table: Table, chosen: list[str]) -> list[tuple[str, ...]]:
    """Each job's cells in the ``chosen`` columns."""
    return list(zip(*(CELLS[c](table) for c in chosen), strict=True)) if table["id"] else []


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
