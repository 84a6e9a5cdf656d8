"""The ``corral`` command.

Errors caused by input (a bad trace row, an unknown preset, a wrong flag) are
printed as one message and exit with status 2; they never show a traceback.

The command must start fast (``corral --help``, ``corral queue``): the
simulator's modules (numpy, pandas, scipy) are imported inside the
commands that use them, and the help texts read light modules only.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console

from corral.errors import CorralError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="corral: GPU cluster scheduling for deep-learning training (simulator and service).",
)


def _console() -> Console:
    """The output console; piped into another program it never cuts a field to fit 80
    columns (a table then reads as wide as its content, or $COLUMNS when set)."""
    made = Console()
    if not made.is_terminal and "COLUMNS" not in os.environ:
        made = Console(width=250)
    return made


console = _console()

_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]}
del _CONTROL[ord("\n")], _CONTROL[ord("\t")]


def printable(text: str) -> str:
    """``text`` with terminal control characters shown as escapes (``\\x1b``): what
    one user wrote (a command, a name) never drives another user's terminal."""
    return text.translate(_CONTROL)


err_console = Console(stderr=True)


@app.callback()
def _each_command() -> None:
    """Size the output for this invocation: the environment of the process may differ
    from the one the module was imported in (a test runner, an embedding program)."""
    fresh = _console()
    console.size = (fresh.width, fresh.height)


def main() -> None:
    try:
        app()
    except CorralError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except OSError as exc:  # a file or socket the user named: a message, not a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(
            f"[bold red]error:[/] {where}{exc.strerror or exc}", highlight=False, soft_wrap=True
        )
        sys.exit(2)
