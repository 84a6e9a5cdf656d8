"""Batch scripts with ``#CORRAL`` directives, as ``sbatch`` reads ``#SBATCH`` lines.

``corral submit train.sh`` reads the options from lines such as::

    #!/bin/bash
    #CORRAL --gpus 2 --gpu-type V100
    #CORRAL --name bert --time 2:00:00 --array 0-9 --output /home/me/logs/%x-%A_%a.out

at the top of the script (directives after the first command are ignored, as
sbatch does), and runs the script with the interpreter its ``#!`` line names.
Options given on the command line win over the script's.

``#SBATCH`` lines are read too, with sbatch's meaning: the options corral
has (``--gpus``, ``-J``, ``-t``, ``-c``, ``--mem``, ``-o``, ``-D``, ``-A``,
``-p`` (a partition the service's config maps to a virtual cluster or GPU
type), ``-N`` with ``--gpus-per-node`` (a gang on exactly that many nodes),
``--array``, ``-d``, ``--gres=gpu[:type]:N``, ...) are taken as corral
takes them (``--time`` in Slurm's formats: a bare number is minutes,
``1-12:00:00`` a day and a half, ``UNLIMITED`` no limit), and any other is
refused by name with the line it is on, never ignored: a script written for
Slurm must not run on another number of GPUs, or without the limit it asked
for, without its author knowing. Where sbatch
and corral spell an option alike but mean different things (``-e`` is
sbatch's error file and corral's environment), the ``#SBATCH`` line means
what sbatch means.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from corral.amounts import parse_memory
from corral.errors import InputError
from corral.runtime.jobspec.mail_types import mail_types
from corral.runtime.jobspec.warning import warning_signal
from corral.submit_env import exported
from corral.textfiles import read_text
from corral.timespan import parse_begin, parse_seconds, slurm_seconds

DIRECTIVE = "#CORRAL"
SBATCH = "#SBATCH"

PER_NODE = "gpus_per_node"
"""Where ``--gpus-per-node`` waits, with its line, until the script's ``--nodes`` is
known (see :func:`per_node_gpus`): not a spec field."""
TASKS_PER_NODE = "ntasks_per_node"
TASKS = "ntasks"
"""Where ``--ntasks-per-node`` and ``--ntasks`` wait, with their lines, until the
script's ``--nodes`` is known (see :func:`per_node_tasks`): not spec fields."""

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
    "--begin": "begin",
    "-b": "begin",
    "--dependency": "dependency",
    "-d": "dependency",
    "--output": "output",
    "-o": "output",
    "--error": "error",
    "--cpus": "cpus",
    "--cpus-per-task": "cpus",
    "-c": "cpus",
    "--mem": "memory",
    "--memory": "memory",
    "--vc": "vc",
    "--account": "vc",
    "-A": "vc",
    "--partition": "partition",
    "-p": "partition",
    "--nodes": "nodes",
    "-N": "nodes",
    "--gpus-per-node": PER_NODE,
    "--ntasks-per-node": TASKS_PER_NODE,
    "--ntasks": TASKS,
    "-n": TASKS,
    "--signal": "signal",
    "--mail-type": "mail_type",
    "--mail-user": "mail_user",
}
"""Options a directive may give -> the job spec's field (sbatch's spellings too)."""
_FLAGS: dict[str, tuple[str, bool]] = {
    "--requeue": ("requeue", True),
    "--no-requeue": ("requeue", False),
    "--hold": ("hold", True),
    "-H": ("hold", True),
    "--exclusive": ("exclusive", True),
}
"""Options that take no value -> the field they set and to what."""
_OTHERS = ("--export", "--mem-per-gpu", "--mem-per-cpu")
"""sbatch's options read apart from :data:`_FIELDS` (see :func:`parse_options`)."""
PER_UNIT_MEMORY = "mem_per_unit"
"""Where ``--mem-per-gpu`` or ``--mem-per-cpu`` waits, with its line, until the job's
GPUs and CPUs are known (see :func:`per_unit_memory`): not a spec field."""
_INTEGERS = {"gpus", "priority", "max_retries", "total_steps", "cpus", "nodes"}
"""Fields given as whole numbers (the API takes only JSON integers for them)."""
_DEPENDS = {f"--{kind}": kind for kind in ("after", "afterok", "afterany", "afternotok")}


def add_dependency(fields: dict[str, Any], text: str) -> None:
    """Add dependencies in Slurm's form (``afterok:12:13,after:9``) to the spec's."""
    have = fields.get("dependency")
    if isinstance(have, dict):  # from a YAML spec: {afterok: [12]}
        have = ",".join(f"{k}:{':'.join(map(str, v))}" for k, v in have.items() if v)
    fields["dependency"] = f"{have},{text}" if have else text


def _options(
    words: list[str], source: str, line: int | None, known: Callable[[str], None] | None = None
) -> Iterator[tuple[str, str | None]]:
    """``(option, value)`` pairs from sbatch-like words (``--gpus 2``, ``--gpus=2``,
    ``-J x``); value None for the flags of :data:`_FLAGS`. ``known`` may refuse an
    option before its value is read."""
    k = 0
    while k < len(words):
        word = words[k]
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if known is not None:
            known(name)
        k += 1
        if name in _FLAGS:
            if eq:
                raise InputError(source, line, name, f"takes no value, got '{value}'")
            yield name, None
            continue
        if not eq:
            if k >= len(words):
                raise InputError(source, line, name, "needs a value")
            value = words[k]
            k += 1
        yield name, value


def parse_options(
    words: list[str], source: str, line: int | None, fields: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Spec fields from sbatch-like options (``--gpus 2``, ``--gpus=2``, ``-e K=V``),
    added to ``fields`` (env and dependencies accumulate; other options replace)."""
    fields = {} if fields is None else fields
    for name, value in _options(words, source, line):
        if value is None:
            field, value_of = _FLAGS[name]
            fields[field] = value_of
            continue
        if name == "--export":  # sbatch's: ALL, NONE, or variables (resolved at submission)
            try:
                exported(value, {})
            except ValueError as exc:
                raise InputError(source, line, name, str(exc)) from None
            fields["export"] = value
        elif name == "--mail-type":
            try:
                fields["mail_type"] = mail_types(value)
            except ValueError as exc:
                raise InputError(source, line, name, str(exc)) from None
        elif name == "--signal":
            try:
                warning_signal(value)
            except ValueError as exc:
                raise InputError(source, line, name, str(exc)) from None
            fields["signal"] = value
        elif name in ("--mem-per-gpu", "--mem-per-cpu"):
            try:
                parse_memory(value)
            except ValueError as exc:
                raise InputError(source, line, name, str(exc)) from None
            fields[PER_UNIT_MEMORY] = (name, value, line)
        elif name in ("--env", "-e"):
            key, sep, val = value.partition("=")
            if not sep:
                raise InputError(source, line, name, f"'{value}': give KEY=VALUE")
            fields.setdefault("env", {})[key] = val
        elif name in _DEPENDS:
            add_dependency(fields, f"{_DEPENDS[name]}:{value}")
        elif _FIELDS.get(name) == "dependency":
            add_dependency(fields, value)
        elif _FIELDS.get(name) == PER_NODE:
            fields[PER_NODE] = (typed_count(value, source, line, name), line)
        elif _FIELDS.get(name) in (TASKS_PER_NODE, TASKS):
            fields[_FIELDS[name]] = (task_count(value, source, line, name), line)
        elif _FIELDS.get(name) == "nodes" and "-" in value:
            raise InputError(
                source, line, name, f"'{value}': corral takes an exact node count, not a range"
            )
        elif _FIELDS.get(name) in _INTEGERS:
            try:
                fields[_FIELDS[name]] = int(value)
            except ValueError:
                raise InputError(source, line, name, f"'{value}' is not a whole number") from None
        elif _FIELDS.get(name) in ("wall_time", "duration", "memory", "begin"):
            field = _FIELDS[name]
            try:  # refused here, with its line, not at submission
                if field == "memory":
                    parse_memory(value)
                elif field == "begin":
                    parse_begin(value)
                else:
                    parse_seconds(value)
            except ValueError as exc:
                raise InputError(source, line, name, str(exc)) from None
            fields[_FIELDS[name]] = value
        elif _FIELDS.get(name) == "partition" and "," in value:
            raise InputError(
                source,
                line,
                name,
                f"'{value}': corral takes one partition (Slurm's list runs the job in the "
                "first that can start it); name one",
            )
        elif name in _FIELDS:
            fields[_FIELDS[name]] = value
        else:
            raise InputError(source, line, name, "not an option corral knows")
    return fields


_SBATCH_UNLIKE: dict[str, str] = {}
"""sbatch options corral spells alike but reads otherwise: refused in #SBATCH lines."""


def parse_sbatch(
    words: list[str], source: str, line: int, fields: dict[str, Any]
) -> dict[str, Any]:
    """Spec fields from an ``#SBATCH`` line: sbatch's options that corral has, in
    their sbatch meaning; ``--gres=gpu[:type]:N``; any other option refused by name."""

    def known(name: str) -> None:
        if name in _SBATCH_UNLIKE:
            raise InputError(source, line, name, f"#SBATCH {name}: {_SBATCH_UNLIKE[name]}")
        if name in _FIELDS or name in _DEPENDS or name in _FLAGS or name in _OTHERS:
            return
        if name not in ("--gres", "-e", "--error"):
            have = ", ".join(sorted({*_FIELDS, *_OTHERS, "--gres"} - {"--name", "--duration"}))
            raise InputError(
                source,
                line,
                name,
                f"#SBATCH {name}: corral has no such option and will not ignore it "
                f"(remove the line, or use one corral has: {have})",
            )

    for name, value in _options(words, source, line, known):
        if value is None:
            field, value_of = _FLAGS[name]
            fields[field] = value_of
            continue
        if name == "--gres":
            _gres(value, source, line, fields)
        elif name in ("--time", "-t"):  # sbatch's formats: a bare number is minutes
            try:
                seconds = slurm_seconds(value)
            except ValueError as exc:
                raise InputError(source, line, name, str(exc)) from None
            if seconds is None:  # UNLIMITED
                fields.pop("wall_time", None)
            else:
                fields["wall_time"] = seconds
        elif name in ("-e", "--error"):  # sbatch's error file (corral's -e is --env)
            fields["error"] = value
        else:
            parse_options([name, value], source, line, fields)
    return fields


def _gres(value: str, source: str, line: int, fields: dict[str, Any]) -> None:
    """``gpu:N`` or ``gpu:TYPE:N`` (Slurm's generic resources): the GPUs asked for."""
    parts = value.split(":")
    if parts[0] != "gpu" or len(parts) not in (2, 3):
        raise InputError(
            source, line, "--gres", f"'{value}': corral reads gpu:N or gpu:TYPE:N only"
        )
    # Slurm's --gres counts per node, as --gpus-per-node does
    fields[PER_NODE] = (typed_count(":".join(parts[1:]), source, line, "--gres"), line)


def typed_count(value: str, source: str, line: int | None, name: str) -> tuple[str | None, int]:
    """``N`` or ``TYPE:N`` (Slurm's GPU counts): the type (None: any) and the count."""
    gpu_type, _, count = value.rpartition(":")
    try:
        number = int(count)
    except ValueError:
        raise InputError(source, line, name, f"'{count}' is not a whole number") from None
    if number < 0:
        raise InputError(source, line, name, f"'{count}': give 0 GPUs (a CPU-only job) or more")
    return gpu_type or None, number


def task_count(value: str, source: str, line: int | None, name: str) -> int:
    """A count of tasks (``--ntasks``, ``--ntasks-per-node``): a whole number, 1 to 1024."""
    try:
        number = int(value)
    except ValueError:
        raise InputError(source, line, name, f"'{value}' is not a whole number") from None
    if not 1 <= number <= 1024:
        raise InputError(source, line, name, f"'{value}': give 1 to 1024 tasks")
    return number


def per_node_gpus(fields: dict[str, Any], source: str) -> dict[str, Any]:
    """Resolve ``--gpus-per-node`` (or ``--gres=gpu:N``, also per node) once every
    option is read: the gang is ``nodes`` (1 unless given) times that many GPUs,
    on exactly those nodes when ``--nodes`` was given (without it, anywhere the
    policy places it, as corral's own ``--gpus``). A ``--gpus`` that says
    otherwise is refused at the line of the per-node count."""
    given = fields.pop(PER_NODE, None)
    if given is None:
        return fields
    (gpu_type, per_node), line = given
    nodes = int(fields.get("nodes") or 1)
    total = nodes * per_node
    if "gpus" in fields and fields["gpus"] != total:
        raise InputError(
            source,
            line,
            "GPUs per node",
            f"{per_node} GPUs on each of {nodes} node{'s' if nodes > 1 else ''} is {total}, "
            f"but the job also asks for {fields['gpus']} GPUs; give one or the other",
        )
    if gpu_type is not None and fields.get("gpu_type") not in (None, gpu_type):
        raise InputError(
            source,
            line,
            "GPUs per node",
            f"GPU type {gpu_type}, but the job also asks for {fields['gpu_type']}",
        )
    fields["gpus"] = total
    if gpu_type is not None:
        fields["gpu_type"] = gpu_type
    return fields


def per_node_tasks(fields: dict[str, Any], source: str) -> dict[str, Any]:
    """Resolve ``--ntasks-per-node`` and ``--ntasks`` once every option is read: the
    job's ``tasks_per_node``, what an ``srun`` line in its script starts on each of
    its nodes (corral runs the script once per node). ``--ntasks`` must split
    evenly over the nodes, and agree with ``--ntasks-per-node`` when both are given."""
    per_node = fields.pop(TASKS_PER_NODE, None)
    total = fields.pop(TASKS, None)
    nodes = int(fields.get("nodes") or 1)
    if total is not None:
        count, line = total
        if count % nodes:
            raise InputError(
                source,
                line,
                "--ntasks",
                f"{count} tasks do not split evenly over {nodes} nodes (corral starts the "
                "same number on each); give --ntasks-per-node",
            )
        if per_node is not None and per_node[0] * nodes != count:
            raise InputError(
                source,
                line,
                "--ntasks",
                f"{count} tasks, but --ntasks-per-node {per_node[0]} on {nodes} node"
                f"{'s' if nodes > 1 else ''} is {per_node[0] * nodes}; give one or the other",
            )
        per_node = (count // nodes, line)
    if per_node is not None:
        fields["tasks_per_node"] = per_node[0]
    return fields


def per_unit_memory(fields: dict[str, Any], source: str) -> dict[str, Any]:
    """Resolve ``--mem-per-gpu`` (per GPU of the gang) or ``--mem-per-cpu`` (per CPU;
    1 unless ``--cpus-per-task`` says) once the counts are known: the job's memory,
    as Slurm totals it. Slurm takes one of ``--mem``, ``--mem-per-gpu`` and
    ``--mem-per-cpu``; so does corral, refusing the second at its line."""
    given = fields.pop(PER_UNIT_MEMORY, None)
    if given is None:
        return fields
    name, value, line = given
    if "memory" in fields:
        raise InputError(source, line, name, "give one of --mem, --mem-per-gpu and --mem-per-cpu")
    unit = "gpus" if name == "--mem-per-gpu" else "cpus"
    if unit == "gpus" and fields.get("gpus") == 0:
        raise InputError(source, line, name, "a job of no GPUs: give --mem or --mem-per-cpu")
    count = int(fields.get(unit) or 1)
    fields["memory"] = parse_memory(value) * count
    return fields


def is_script(path: str) -> bool:
    """A text file (a batch script, whose directives are read), not a program binary."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(1024)
    except OSError:  # (a folder, a file not there or not readable)
        return False
    return b"\0" not in head


def script_fields(path: Path) -> dict[str, Any]:
    """The spec a batch script gives: its directives, a command that runs it, and
    its text, which the service stores: the job runs the script as submitted, as
    sbatch's does, whatever happens to the file afterwards."""
    text = read_text(path)
    fields: dict[str, Any] = {}
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if number == 1 and line.startswith("#!"):
            continue
        prefix = next((p for p in (DIRECTIVE, SBATCH) if line.startswith(p)), None)
        if prefix is not None:
            try:
                words = shlex.split(line[len(prefix) :], comments=True)
            except ValueError as exc:
                raise InputError(
                    str(path), number, None, f"cannot read the directive: {exc}"
                ) from None
            if prefix == SBATCH:
                parse_sbatch(words, str(path), number, fields)
            else:
                parse_options(words, str(path), number, fields)
        elif line and not line.startswith("#"):
            break  # the first command ends the directives
    per_node_gpus(fields, str(path))
    per_node_tasks(fields, str(path))
    interpreter = ["sh"]
    if lines and lines[0].startswith("#!"):
        interpreter = shlex.split(lines[0][2:].strip()) or ["sh"]
    where = str(path.resolve())
    fields["command"] = [*interpreter, where]
    fields["script"], fields["script_path"] = text, where
    return fields
