"""How a result was made: version, command line, every option, the trace's identity.

A result people cite must say how to make it again. Every ``summary.json``,
every report and a ``provenance.json`` beside each output folder's CSVs
carry the record :func:`provenance` builds: the corral version, the full
command line, every option with its value (defaults too), the trace by name,
job and row counts and SHA-256 (never a local path), and the seed.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.model.jobs import JobTable
    from corral.traces.rows import LoadReport

FIGURES = "figures"
"""The folder of a result that ``corral plot`` draws into unless told another (not
an output of the run: ``corral rerun`` compares without it)."""
PROVENANCE_FILE = "provenance.json"
GENERATORS = ("synthetic", "gavel-synthetic")


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed, the program by its name (not where it is installed)."""
    args = list(sys.argv if argv is None else argv)
    if not args:
        return ""
    program = Path(args[0]).name
    if program in ("__main__.py", "-m"):
        program = "corral"
    return shlex.join([program, *args[1:]])


def file_digest(paths: list[Path]) -> str:
    """SHA-256 over the files' bytes, in the order given (a trace of two tables hashes both)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def trace_identity(spec: str, jobs: JobTable, report: LoadReport | None = None) -> dict[str, Any]:
    """A trace named as the user named it (a file by its file name), with its job and
    row counts and, for a file, its checksum; a generated trace by its generator's
    settings, which with the seed make it again."""
    text = spec.strip()
    if text.lower().startswith(GENERATORS):
        return {"name": text, "generated": True, "jobs": len(jobs)}
    files = _trace_files(text, jobs.source)
    name = text if not Path(text).exists() else Path(text).name
    out: dict[str, Any] = {"name": name, "jobs": len(jobs)}
    if report is not None and report.rows:
        out["rows"] = report.rows
        if report.skipped:
            out["rows_skipped"] = report.skipped
    if files:
        out["sha256"] = file_digest(files)
    return out


def _trace_files(spec: str, source: str) -> list[Path]:
    where = Path(spec)
    if where.is_dir():  # PAI's two tables
        return sorted(p for p in where.iterdir() if p.name.startswith("pai_") and p.is_file())
    if where.is_file():
        if where.name in ("pai_job_table.csv", "pai_task_table.csv"):
            return [where.parent / "pai_job_table.csv", where.parent / "pai_task_table.csv"]
        return [where]
    bundled = Path(source)
    return [bundled] if bundled.is_file() else []


def provenance(options: dict[str, Any], trace: dict[str, Any], seed: int) -> dict[str, Any]:
    """The record itself (JSON-ready)."""
    from corral import __version__

    return {
        "corral_version": __version__,
        "code": code_identity(),
        "python": platform.python_version(),
        "libraries": library_versions(),
        "command": command_line(),
        "trace": trace,
        "seed": seed,
        "options": {k: _plain(v) for k, v in sorted(options.items())},
    }


LIBRARIES = ("numpy", "pandas", "scipy", "scikit-learn")
"""The libraries a simulation's figures can depend on (LPs, estimators, arrays)."""


def code_identity() -> dict[str, Any]:
    """The git commit corral runs from, and whether its tracked files differ from it
    (an editable install of a checkout: its version alone says nothing); empty for
    an installed package."""
    import subprocess

    import corral

    root = Path(corral.__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return {}
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        changed = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}  # (no git here: the version is what there is)
    return {"git_commit": commit, "dirty": bool(changed)}


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def file_identity(path: Path) -> dict[str, str]:
    """A file by its name and SHA-256, never its path (a result names no local path)."""
    return {"file": path.name, "sha256": file_digest([path])}


def policy_source(name: str) -> dict[str, str] | None:
    """For a policy from outside corral (``file.py:Class`` or ``module:Class``): the
    SHA-256 of its source file, so a result says which version of it ran (by file
    name, never a local path). None for corral's own (the commit covers them)."""
    from corral.policies import policy_key, source_file

    path = source_file(name) if ":" in policy_key(name) else None
    if path is None:
        return None
    return file_identity(Path(path))


def context_lines(record: dict[str, Any]) -> dict[str, str]:
    """The record as a report's settings list: one line each."""
    trace = record["trace"]
    what = f"{trace['name']}: {trace['jobs']:,} jobs"
    if "rows" in trace:
        what += f" from {trace['rows']:,} rows"
    if "sha256" in trace:
        what += f", sha256 {trace['sha256']}"
    if trace.get("generated"):
        what += " (generated from these settings and the seed)"
    options = "; ".join(f"{k}={_shown(v)}" for k, v in record["options"].items())
    per_policy = record.get("policy_options", {})
    chosen = "; ".join(
        f"{name}: " + (", ".join(f"{k}={_shown(v)}" for k, v in values.items()) or "none")
        for name, values in per_policy.items()
    )
    code = record.get("code") or {}
    version = record["corral_version"]
    if code.get("git_commit"):
        version += f", commit {code['git_commit'][:12]}" + (" (modified)" if code["dirty"] else "")
    sources = "; ".join(
        f"{name}: {src['file']} sha256 {src['sha256'][:16]}"
        for name, src in record.get("policy_sources", {}).items()
    )
    lines = {
        "corral version": f"{version} (Python {record['python']})",
        "command": record["command"],
        "trace": what,
        "seed": str(record["seed"]),
        "every option": options,
        "policy options as run": chosen or "-",
    }
    if sources:
        lines["policy sources"] = sources
    return lines


def write_provenance(out: Path, record: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / PROVENANCE_FILE
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value)
