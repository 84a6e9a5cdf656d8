"""The small parent of every job process: records how the job ended.

The service starts ``python -m corral.runtime.launcher DIR -- argv...`` in a
new session (its own process group) instead of the job itself. The launcher
runs the argv (directly, no shell), waits for it and writes ``DIR/exit.json``
atomically. The exit status therefore survives the service: a service killed
with ``kill -9`` and restarted reads it from the file, which a process that is
not the job's parent could not otherwise learn. SIGTERM and SIGINT sent to
the group reach the job; the launcher ignores them and keeps waiting.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

EXIT_FILE = "exit.json"
PID_FILE = "launcher.pid"
NOT_STARTED = 127
"""Exit code when the program could not be started (as a shell reports it)."""


def write_atomic(path: Path, text: str) -> None:
    """Write a file so readers see the old content or the new, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m corral.runtime.launcher DIR -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    folder = Path(args[0])
    argv = args[2:]
    write_atomic(folder / PID_FILE, str(os.getpid()))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    record: dict[str, object] = {"exit_code": None, "signal": None, "detail": None}
    try:
        # The job gets the default handlers back, so a plain script dies on SIGTERM.
        child = subprocess.Popen(argv, restore_signals=True, preexec_fn=_default_signals)
    except OSError as exc:
        print(f"corral: cannot start {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        record.update(exit_code=NOT_STARTED, detail=f"cannot start {argv[0]!r}: {exc}")
    else:
        code = child.wait()
        if code < 0:
            record["signal"] = -code
        else:
            record["exit_code"] = code
    record["end_time"] = time.time()
    write_atomic(folder / EXIT_FILE, json.dumps(record))
    code = record["exit_code"]
    return int(code) if isinstance(code, int) else 128 + int(record["signal"] or 0)


def _default_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
