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
        if path.name in REPORTS or path.suffix == ".parquet":
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
