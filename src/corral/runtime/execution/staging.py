"""Staging a job's inputs before it runs, once, possibly ahead of time (Liquid).

A job may give a ``stage`` command (copy its dataset to local disk, say).
Its attempts then run ``python -m corral.runtime.execution.staging MARK STAGE_JSON --
COMMAND...``: unless the job's folder already holds the mark of a finished
staging, the stage command runs first (its output goes to the attempt's log),
the mark is written, and the job's command replaces this process. Liquid's
pre-scheduling starts the same program without a command while the job still
waits for GPUs that are about to free up, so by the time it starts its inputs
are there. A lock beside the mark makes an attempt that starts while the
early staging still runs wait for it rather than stage twice.

The mark records the stage command it was written for: a job whose stage
command differs (resubmitted with another one) stages again.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from corral.runtime.execution.job_files import read_small

MARK = "staged.json"
"""In the job's own folder: the stage command that completed."""
MARK_LIMIT = 256 * 1024
"""The most bytes of a mark read (a stage command is at most 16 KiB)."""


def stage_argv(python: str, mark: Path, stage: list[str], command: list[str] | None) -> list[str]:
    """How an attempt (with ``command``) or an early staging (without) is run."""
    argv = [python, "-m", "corral.runtime.execution.staging", str(mark), json.dumps(stage)]
    return [*argv, "--", *command] if command else argv


def staged(mark: Path, stage: list[str]) -> bool:
    """Whether ``stage`` already completed for this job. The mark lies in the job's
    own folder, which its user controls: it is read as a small regular file only
    (the service reads it as root, on its loop's thread)."""
    data = read_small(mark, MARK_LIMIT)
    try:
        return data is not None and json.loads(data).get("stage") == stage
    except (ValueError, AttributeError, RecursionError):
        return False


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m corral.runtime.execution.staging MARK STAGE_JSON [-- COMMAND...]")
        return 2
    mark, stage = Path(argv[0]), json.loads(argv[1])
    command = argv[3:] if len(argv) > 3 and argv[2] == "--" else []
    with open(mark.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # an early staging still running: wait for it
        if staged(mark, stage):
            print("corral: inputs already staged", flush=True)
        else:
            print(f"corral: staging inputs: {' '.join(stage)}", flush=True)
            try:
                code = subprocess.run(stage, check=False).returncode
            except OSError as exc:
                print(f"corral: cannot run the stage command: {exc}", file=sys.stderr)
                return 127
            if code != 0:
                print(f"corral: the stage command failed (exit {code})", file=sys.stderr)
                return code
            tmp = mark.with_suffix(".tmp")
            tmp.write_text(json.dumps({"stage": stage}))
            os.replace(tmp, mark)
    if not command:
        return 0
    sys.stdout.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"corral: cannot run {command[0]}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
