"""Making a result again from its provenance, and saying whether it came out the same.

Every result folder holds ``provenance.json`` with the command that made it
(see :mod:`corral.sim.provenance`). :func:`rerun_args` turns that command into
the same command writing elsewhere; :func:`differences` compares the two
folders file by file. What may differ between two runs of the same thing is
left out of the comparison: wall-clock seconds (``wall_s``) and the
provenance itself (its command names the other folder). The reports are not
compared (they print both); their tables come from the CSVs, which are.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.errors import CorralError
from corral.sim.provenance import FIGURES, PROVENANCE_FILE

COMMANDS = ("sim", "compare", "sweep")
"""The commands whose results can be made again."""
VOLATILE = ("wall_s", "provenance")
"""Summary keys and CSV columns that differ between runs of the same thing."""
REPORTS = ("report.html", "report.md", PROVENANCE_FILE, "error.log")


def recorded(result: Path) -> dict[str, Any]:
    """The provenance record of a result folder; a clear error if it has none."""
    path = result / PROVENANCE_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorralError(f"{result}: no {PROVENANCE_FILE} (not a corral result folder)") from None
    except (OSError, ValueError) as exc:
        raise CorralError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(record, dict) or not isinstance(record.get("command"), str):
        raise CorralError(f"{path}: it records no command")
    return record


SOURCES = "sources"
"""The folder of a result that keeps a copy of each rule file of one's own it ran
(policies, placements, admissions given as ``file.py:Class``)."""


def _digests(record: dict[str, Any]) -> dict[str, str]:
    """File name -> SHA-256 of each rule file of one's own the record names."""
    sources = [
        *(record.get("policy_sources") or {}).values(),
        record.get("placement_source"),
        record.get("admission_source"),
    ]
    return {s["file"]: s["sha256"] for s in sources if isinstance(s, dict) and "file" in s}


def _named_files(record: dict[str, Any]) -> list[str]:
    """The ``file.py`` paths the recorded command names, as it gives them."""
    try:
        words = shlex.split(record.get("command") or "")
    except ValueError:
        return []
    return sorted(
        {
            part.strip().split("[", 1)[0].rpartition(":")[0]
            for word in words
            for part in word.split(",")
            if ".py:" in part
        }
    )


def keep_sources(folder: Path, record: dict[str, Any]) -> list[Path]:
    """Copy into ``folder/sources`` each rule file the record names whose source here
    is the one that ran (by SHA-256): the result can then be made again after the
    file is edited or gone, or on another machine. The copies made."""
    from corral.sim.provenance import file_digest

    digests, kept = _digests(record), []
    for given in _named_files(record):
        path = Path(given).expanduser()
        if path.name in digests and path.is_file() and file_digest([path]) == digests[path.name]:
            target = folder / SOURCES / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            kept.append(target)
    return kept


def kept_sources_args(
    record: dict[str, Any], result: Path, args: list[str]
) -> tuple[list[str], list[str]]:
    """``args`` with each rule file that is gone or changed here replaced by the copy
    the result kept (when it is the one that ran), and a note for each."""
    from corral.sim.provenance import file_digest

    digests, notes = _digests(record), []
    for given in _named_files(record):
        path = Path(given).expanduser()
        if path.name not in digests:
            continue
        if path.is_file() and file_digest([path]) == digests[path.name]:
            continue
        copy = result / SOURCES / path.name
        if not copy.is_file() or file_digest([copy]) != digests[path.name]:
            continue
        args = [word.replace(f"{given}:", f"{copy}:") for word in args]
        why = "is not here" if not path.is_file() else "has changed"
        notes.append(f"the policy file {given} {why}: running the copy the result kept, {copy}")
    return args, notes


def changed_policy_files(record: dict[str, Any]) -> list[str]:
    """Policy files (``file.py:Class``) the recorded command names whose source here
    is not the one that ran, by SHA-256: a rerun of them is another experiment. The
    record keeps each plugin's file name and digest (never a local path); the path
    is the one the command gave. Read, never imported (a ``module:Class`` policy's
    file is found only by importing it: not checked)."""
    from corral.sim.provenance import file_digest

    sources = [
        *(record.get("policy_sources") or {}).values(),
        record.get("placement_source"),
        record.get("admission_source"),
    ]
    digests = {
        source.get("file"): source.get("sha256") for source in sources if isinstance(source, dict)
    }
    try:
        words = shlex.split(record.get("command") or "")
    except ValueError:
        return []
    named = {
        Path(part.strip().rpartition(":")[0])
        for word in words
        for part in word.split(",")
        if ".py:" in part
    }
    changed = []
    for path in sorted(named):
        if path.name not in digests:
            continue
        if not path.is_file():
            changed.append(f"the policy file {path} is not here")
        elif file_digest([path]) != digests[path.name]:
            changed.append(f"the policy file {path} has changed since the result was made")
    return changed


def rerun_args(record: dict[str, Any], out: Path) -> list[str]:
    """The recorded command's arguments (after ``corral``), writing to ``out``."""
    try:
        words = shlex.split(record["command"])
    except ValueError as exc:
        raise CorralError(f"the recorded command cannot be read: {exc}") from None
    if len(words) < 2 or words[1] not in COMMANDS:
        raise CorralError(
            f"the recorded command is not one of corral {', '.join(COMMANDS)}: "
            f"{record['command']!r}"
        )
    args: list[str] = []
    skip = False
    for word in words[1:]:
        if skip:
            skip = False
            continue
        if word == "--out":
            skip = True
            continue
        if word.startswith("--out="):
            continue
        args.append(word)
    return [*args, "--out", str(out)]


@dataclass
class Differences:
    same: list[str] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Files of the first result the second lacks."""

    @property
    def identical(self) -> bool:
        return not self.differ and not self.missing


def failed_runs(result: Path) -> set[str]:
    """The runs of a result that failed (their folders hold an ``error.log``), as
    paths relative to it ('.' for a single run's result)."""
    return {p.parent.relative_to(result).as_posix() for p in result.rglob("error.log")}


def differences(
    first: Path, second: Path, leave_out: set[str] | frozenset[str] = frozenset()
) -> Differences:
    """Every output file of ``first`` compared with the one of the same name in
    ``second``: CSVs by their rows (less the volatile columns), summaries by
    their keys (less the volatile ones), other files byte for byte; reports and
    the figures ``corral plot`` drew into it are not outputs of the run."""
    found = Differences()
    for path in sorted(p for p in first.rglob("*") if p.is_file()):
        name = path.relative_to(first).as_posix()
        if path.name in REPORTS or path.suffix == ".parquet" or name.startswith(f"{SOURCES}/"):
            continue
        if name.startswith(f"{FIGURES}/"):  # (what corral plot drew from it afterwards)
            continue
        if any(name.startswith(f"{run}/") or run == "." for run in leave_out):
            continue  # (a run that failed: its traceback and summary are not its outputs)
        other = second / name
        if not other.is_file():
            found.missing.append(name)
            continue
        (found.same if _same(path, other) else found.differ).append(name)
    return found


def _same(a: Path, b: Path) -> bool:
    if a.suffix == ".csv":
        return _csv_text(a) == _csv_text(b)
    if a.suffix == ".json":
        return _json_kept(a) == _json_kept(b)
    return a.read_bytes() == b.read_bytes()


def _csv_text(path: Path) -> str:
    import pandas as pd

    table = pd.read_csv(path)
    drop = [c for c in table.columns if c in VOLATILE or str(c).startswith("provenance.")]
    return table.drop(columns=drop).to_csv(index=False)


def _json_kept(path: Path) -> Any:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if k not in VOLATILE}
    return data
