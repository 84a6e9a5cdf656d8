"""``corral --help`` and ``corral VERB --help`` as Typer prints them, kept as text in
the package (``corral/data/help``) so that the quick path prints them without
building the command line (Typer turning thirty signatures into commands took
a quarter of a second; ``sbatch --help`` answers at once).

Typer's help here is plain text, wrapped as click wraps it: at the terminal's
width, but never wider than 80 columns. The pages are that text at 80 columns,
printed by the quick path only on a terminal (or ``COLUMNS``) at least that wide,
where Typer would print them the same; a narrower one is answered by Typer.
``tests/test_help_pages.py`` holds every page equal to what Typer prints now;
after changing a command's options or help, write them again:

    python -m corral.cli.help_pages
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.main import get_command_name

HELP_DIR = Path(__file__).resolve().parents[1] / "data" / "help"
"""Where the pages are kept: ``corral.txt`` (the top level), ``VERB.txt`` each."""


def verbs() -> list[str]:
    """Every command and group of the command line, as typed."""
    from corral.cli import app

    named = [
        info.name or get_command_name(info.callback.__name__ if info.callback else "")
        for info in app.registered_commands
    ]
    return [*named, *(group.name for group in app.registered_groups if group.name)]


AS_CORRAL = "import sys; sys.argv[0] = 'corral'; from corral.cli import main; main()"
"""The full command line, run under the name users type."""


def rendered(verb: str | None) -> str:
    """What ``corral [VERB] --help`` prints on a terminal 80 columns wide (or wider:
    click wraps help at 80 at most), as a user's command prints it."""
    words = [verb, "--help"] if verb else ["--help"]
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-c", AS_CORRAL, *words],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"corral {' '.join(words)} failed: {done.stderr}")
    return done.stdout


def pages() -> dict[str, str]:
    """File name -> the page it should hold (rendered a few at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    names: list[str | None] = [None, *verbs()]
    with ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(rendered, names))
    return {f"{name or 'corral'}.txt": text for name, text in zip(names, texts, strict=True)}


def write() -> int:
    HELP_DIR.mkdir(parents=True, exist_ok=True)
    wanted = pages()
    for old in HELP_DIR.glob("*.txt"):
        if old.name not in wanted:
            old.unlink()
    for name, text in wanted.items():
        (HELP_DIR / name).write_text(text)
    print(f"wrote {len(wanted)} help pages to {HELP_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(write())
