"""Batch scripts with ``#CORRAL`` directives, as ``sbatch`` reads ``#SBATCH`` lines.

``corral submit train.sh`` reads the options from lines such as::

    #!/bin/bash
    #CORRAL --gpus 2 --gpu-type V100
    #CORRAL --name bert --time 2:00:00 --array 0-9 --output /home/me/logs/%x-%A_%a.out

at the top of the script (directives after the first command are ignored, as
sbatch does), and runs the script with the interpreter its ``#!`` line names.
Options given on the command line win over the script's.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from corral.errors import InputError
from corral.yamlio import read_text

DIRECTIVE = "#CORRAL"

_FIELDS: dict[str, str] = {
    "--name": "name",
    "-J": "name",
    "--job-name": "name",
    "--gpus": "gpus",
    "-G": "gpus",
    "--gpu-type": "gpu_type",
    "--job-type": "job_type",
    "--priority": "priority",
    "--max-retries": "max_retries",
    "--wall-time": "wall_time",
    "--time": "wall_time",
    "-t": "wall_time",
    "--duration": "duration",
    "--total-steps": "total_steps",
    "--target-loss": "target_loss",
    "--workdir": "workdir",
    "--chdir": "workdir",
    "-D": "workdir",
    "--array": "array",
    "-a": "array",
    "--dependency": "dependency",
    "-d": "dependency",
    "--output": "output",
    "-o": "output",
    "--cpus": "cpus",
    "--cpus-per-task": "cpus",
    "-c": "cpus",
    "--mem": "memory",
    "--memory": "memory",
    "--vc": "vc",
    "--account": "vc",
    "-A": "vc",
}
"""Options a directive may give -> the job spec's field (sbatch's spellings too)."""
_INTEGERS = {"gpus", "priority", "max_retries", "total_steps", "cpus"}
"""Fields given as whole numbers (the API takes only JSON integers for them)."""
_DEPENDS = {f"--{kind}": kind for kind in ("after", "afterok", "afterany", "afternotok")}


def add_dependency(fields: dict[str, Any], text: str) -> None:
    """Add dependencies in Slurm's form (``afterok:12:13,after:9``) to the spec's."""
    have = fields.get("dependency")
    if isinstance(have, dict):  # from a YAML spec: {afterok: [12]}
        have = ",".join(f"{k}:{':'.join(map(str, v))}" for k, v in have.items() if v)
    fields["dependency"] = f"{have},{text}" if have else text


def parse_options(
    words: list[str], source: str, line: int | None, fields: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Spec fields from sbatch-like options (``--gpus 2``, ``--gpus=2``, ``-e K=V``),
    added to ``fields`` (env and dependencies accumulate; other options replace)."""
    fields = {} if fields is None else fields
    k = 0
    while k < len(words):
        word = words[k]
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if not eq:
            if k + 1 >= len(words):
                raise InputError(source, line, name, "needs a value")
            value = words[k + 1]
            k += 1
        k += 1
        if name in ("--env", "-e", "--export"):
            key, sep, val = value.partition("=")
            if not sep:
                raise InputError(source, line, name, f"'{value}': give KEY=VALUE")
            fields.setdefault("env", {})[key] = val
        elif name in _DEPENDS:
            add_dependency(fields, f"{_DEPENDS[name]}:{value}")
        elif _FIELDS.get(name) == "dependency":
            add_dependency(fields, value)
        elif _FIELDS.get(name) in _INTEGERS:
            try:
                fields[_FIELDS[name]] = int(value)
            except ValueError:
                raise InputError(source, line, name, f"'{value}' is not a whole number") from None
        elif name in _FIELDS:
            fields[_FIELDS[name]] = value
        else:
            raise InputError(source, line, name, "not an option corral knows")
    return fields


def script_fields(path: Path) -> dict[str, Any]:
    """The spec a batch script gives: its directives, and a command that runs it."""
    text = read_text(path)
    fields: dict[str, Any] = {}
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if number == 1 and line.startswith("#!"):
            continue
        if line.startswith(DIRECTIVE):
            try:
                words = shlex.split(line[len(DIRECTIVE) :], comments=True)
            except ValueError as exc:
                raise InputError(
                    str(path), number, None, f"cannot read the directive: {exc}"
                ) from None
            parse_options(words, str(path), number, fields)
        elif line and not line.startswith("#"):
            break  # the first command ends the directives
    interpreter = ["sh"]
    if lines and lines[0].startswith("#!"):
        interpreter = shlex.split(lines[0][2:].strip()) or ["sh"]
    fields["command"] = [*interpreter, str(path.resolve())]
    return fields
