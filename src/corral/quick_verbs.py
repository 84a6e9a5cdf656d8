"""The ``corral`` command's entry point: ``corral submit`` in its everyday form
answered without the full command line.

Slurm's users submit in loops (``for i in ...; do sbatch ...; done``). Through
the full command line (:mod:`corral.cli`) every submission paid for Typer, Rich
and the reading of every option before a 5 ms request: about 0.12 s a command
on the development machine, 8 jobs a second in a loop. Here a submission whose
words are all understood here (the flags in :data:`VALUES` and :data:`FLAGS`,
then ``--`` and the command) is sent with the standard library and the HTTP
client alone. Any other word (a spec file, a script, ``--array``, ``--wait``,
``--help``, a value that is not a number where one is wanted, no ``--``) hands
the whole command to :mod:`corral.cli`, which answers it as before, or gives
its error. So the quick path sends exactly what the full one would (a test
compares the two) for what it takes, and never answers what it does not take.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--gpus": ("gpus", int),
    "--name": ("name", str),
    "-J": ("name", str),
    "--gpu-type": ("gpu_type", str),
    "--job-type": ("job_type", str),
    "--priority": ("priority", int),
    "--max-retries": ("max_retries", int),
    "--wall-time": ("wall_time", str),
    "--time": ("wall_time", str),
    "-t": ("wall_time", str),
    "--duration": ("duration", str),
    "--total-steps": ("total_steps", int),
    "--cpus": ("cpus", int),
    "--cpus-per-task": ("cpus", int),
    "-c": ("cpus", int),
    "--mem": ("memory", str),
    "--memory": ("memory", str),
    "--vc": ("vc", str),
    "--account": ("vc", str),
    "-A": ("vc", str),
    "--url": ("url", str),
    "--token": ("token", str),
}
"""Options with a value that the quick path reads, as the full command line names
them, and the field each sets (``url`` and ``token`` say where to send it)."""

FLAGS: dict[str, tuple[str, bool]] = {
    "--hold": ("hold", True),
    "-H": ("hold", True),
    "--exclusive": ("exclusive", True),
    "--requeue": ("requeue", True),
    "--no-requeue": ("requeue", False),
    "--json": ("json", True),
}
"""Options without a value that the quick path reads."""


SPECS = (".yaml", ".yml", ".json")
"""Endings of a job spec's file name, which the full command line reads."""


def parse_submit(words: list[str]) -> dict[str, Any] | None:
    """The fields of ``corral submit WORDS`` (with ``url``, ``token`` and ``json``
    among them), or None when a word is not one the quick path takes."""
    if "--" not in words:
        return None
    split = words.index("--")
    options, command = words[:split], words[split + 1 :]
    if not command or os.path.isfile(command[0]) or command[0].lower().endswith(SPECS):
        return None  # (a spec file or a batch script, read by the full command line)
    fields: dict[str, Any] = {}
    k = 0
    while k < len(options):
        word = options[k]
        name, eq, given = word.partition("=")
        if word in FLAGS:
            key, value = FLAGS[word]
            fields[key] = value
            k += 1
            continue
        if eq and name.startswith("--") and name in VALUES:
            text = given
            k += 1
        elif word in VALUES and k + 1 < len(options):
            name, text = word, options[k + 1]
            k += 2
        else:
            return None
        key, kind = VALUES[name]
        try:
            fields[key] = kind(text)
        except ValueError:  # (the full command line says what is wrong with it)
            return None
    fields["command"] = command
    fields.setdefault("workdir", os.getcwd())
    return fields


def quick_submit(words: list[str]) -> int | None:
    """Submit as ``corral submit WORDS`` does, and the exit code; None when the
    words are not the quick path's (nothing was sent)."""
    fields = parse_submit(words)
    if fields is None:
        return None
    from corral.api.client import Client
    from corral.errors import CorralError

    url, token, as_json = (
        fields.pop("url", None),
        fields.pop("token", None),
        fields.pop("json", False),
    )
    try:
        with Client(url, token) as client:
            job = client.submit(fields)
    except CorralError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"error: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if as_json:
        sys.stdout.write(json.dumps(job, indent=2) + "\n")
    else:
        sys.stdout.write(f"submitted job {job['id']} ({job['name']})\n")
    return 0


def main() -> None:
    """``corral``: the quick path where it applies, else the full command line."""
    words = sys.argv[1:]
    if words[:1] == ["submit"]:
        code = quick_submit(words[1:])
        if code is not None:
            sys.stdout.flush()
            sys.exit(code)
    from corral.cli import main as full

    full()
