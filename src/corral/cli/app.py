"""The ``corral`` command.

Errors caused by input (a bad trace row, an unknown preset, a wrong flag) are
printed as one message and exit with status 2; they never show a traceback.

The command must start fast (``corral --help``, ``corral queue``): the
simulator's modules (numpy, pandas, scipy) are imported inside the
commands that use them, and the help texts read light modules only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from typer.main import get_command_name

from corral.errors import CorralError
from corral.queue_listing import PLAIN_ROWS, box_table, output_console, plain_table

app = typer.Typer(
    add_completion=True,
    rich_markup_mode=None,  # plain help, as sbatch prints it: Rich's took 0.3 s a --help
    no_args_is_help=True,
    help="corral: GPU cluster scheduling for deep-learning training (simulator and service).",
)


console = output_console()


def print_json(data: object) -> None:
    """Data as JSON on standard output, indented, with no colouring: for programs (and
    fast: rich's highlighter takes seconds over ten thousand jobs)."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def print_table(title: str, columns: list[str], rows: Sequence[Sequence[str]]) -> None:
    """A table: rich's box for a screenful, plain aligned columns for a long listing.
    Cells are shown with control characters escaped (they may come from other users)."""
    if len(rows) > PLAIN_ROWS:
        plain_table(title, columns, rows)
        return
    box_table(title, columns, rows, console)


err_console = Console(stderr=True)

JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="print the result as JSON (alone on stdout) instead of a table"),
]


@contextmanager
def json_on_stdout(on: bool) -> Iterator[None]:
    """With ``--json`` stdout carries the JSON alone: what the command says on the
    way (progress, notes, tables) goes to stderr, so ``| jq`` always parses."""
    before = console.stderr
    console.stderr = before or on
    try:
        yield
    finally:
        console.stderr = before


def _version(asked: bool) -> None:
    if asked:
        from corral import __version__

        print(f"corral {__version__}")
        raise typer.Exit()


@app.callback()
def _each_command(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version, help="print corral's version"
    ),
) -> None:
    """Size the output for this invocation: the environment of the process may differ
    from the one the module was imported in (a test runner, an embedding program)."""
    fresh = output_console()
    console.size = (fresh.width, fresh.height)


def only_the_command_asked(argv: list[str]) -> None:
    """Keep in :data:`app` only the command ``argv`` names (``corral submit ...``:
    submit alone), so that Typer turns one function's signature into a command
    rather than all of them, which was most of a short command's time (Slurm's
    users run ``sbatch`` in loops). Anything else (an option first, ``--help``,
    a group, a word that names no command) leaves the whole app, so help lists
    every command and a mistyped one is answered with its suggestions."""
    if len(argv) < 2 or argv[1].startswith("-"):
        return
    asked = argv[1]
    named = [
        info
        for info in app.registered_commands
        if (info.name or get_command_name(info.callback.__name__ if info.callback else "")) == asked
    ]
    if named:
        app.registered_commands = named
        app.registered_groups = []


def main() -> None:
    only_the_command_asked(sys.argv)
    try:
        app()
    except CorralError as exc:
        # (a message may hold brackets, as a variant's label or an array's ids: not markup)
        err_console.print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        sys.exit(exc.exit_code)
    except OSError as exc:  # a file or socket the user named: a message, not a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(
            f"[bold red]error:[/] {escape(f'{where}{exc.strerror or exc}')}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(2)
