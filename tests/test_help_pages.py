"""The help pages kept in the package are what Typer prints now (a command's
options or help changed without writing them again fails here, saying how), and
the quick path prints them where Typer would print the same, and only there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from corral.cli.help_pages import HELP_DIR, pages, verbs


def test_every_kept_page_is_what_typer_prints_now() -> None:
    wanted = pages()
    kept = {path.name: path.read_text() for path in HELP_DIR.glob("*.txt")}
    stale = sorted(
        name for name in wanted.keys() | kept.keys() if wanted.get(name) != kept.get(name)
    )
    assert not stale, (
        f"help pages out of date: {', '.join(stale)}; write them again with "
        "'python -m corral.cli.help_pages'"
    )
    assert {"corral.txt", "submit.txt", "store.txt"} <= kept.keys() and len(kept) > 20


def corral(words: list[str], columns: str | None, quick: bool) -> tuple[str, list[str]]:
    """What ``corral WORDS`` prints (the quick path's entry, or the full command line),
    and the heavy modules it imported."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    entry = "corral.quick_verbs" if quick else "corral.cli"
    probe = (
        "import sys\n"
        "sys.argv = ['corral', *sys.argv[1:]]\n"
        f"from {entry} import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'typer', 'rich', 'click'}\n"
        "print(sorted(m for m in sys.modules if m in heavy), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *words], capture_output=True, text=True, env=env, timeout=60
    )
    return done.stdout, done.stderr.split()


@pytest.mark.parametrize("words", [["--help"], ["submit", "--help"], ["store", "--help"]])
@pytest.mark.parametrize("columns", [None, "80", "200"])
def test_the_quick_path_prints_typers_page_without_typer(
    words: list[str], columns: str | None
) -> None:
    quick, imported = corral(words, columns, quick=True)
    full, _ = corral(words, columns, quick=False)
    assert quick == full and quick.startswith("Usage: corral")
    assert imported == ["[]"]


def test_a_narrow_terminal_and_an_unknown_verb_are_typers_to_answer() -> None:
    quick, imported = corral(["submit", "--help"], "60", quick=True)
    assert quick == corral(["submit", "--help"], "60", quick=False)[0]
    assert "typer" in " ".join(imported)  # (wrapped narrower than the kept page)
    _, imported = corral(["../corral", "--help"], None, quick=True)
    assert "typer" in " ".join(imported)
    assert "trace-stats" in verbs()
