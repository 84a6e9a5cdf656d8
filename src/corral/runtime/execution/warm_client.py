"""The attempt's own process when its job runs in a warm worker (see
:mod:`corral.runtime.execution.warm_worker`).

    python -m corral.runtime.execution.warm_client SOCKET -- MODULE ARGS...

Started by the root launcher as the job's user, with the job's environment,
like any job process: it hands the job (module, arguments, environment,
working folder, and its own output as passed descriptors) to the worker on
SOCKET, passes the scheduler's signals on to it, and exits with the job's
exit code, which the launcher records. Parked (SIGTSTP), it waits until the
worker has paused, then stops itself, so the attempt's process group reads as
paused; resumed (SIGCONT), it resumes the worker. Where the worker cannot be
reached or refuses, it runs the job itself, cold (``python -m MODULE``), and
says so in the log. Standard library only: it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from corral.runtime.execution.launcher import STOP_SIGNALS


def run_cold(argv: list[str], why: str) -> None:
    print(f"corral: {why}: started cold", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", *argv])


def worker_paused(pid: int, timeout: float = 60.0) -> bool:
    """Wait until process ``pid`` is stopped (state T); False if it never is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                text = fh.read()
        except OSError:
            return False
        if text[text.rfind(")") + 2 :].split()[0] in ("T", "t"):
            return True
        time.sleep(0.005)
    return False


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print(
            "usage: python -m corral.runtime.execution.warm_client SOCKET -- MODULE ARGS",
            file=sys.stderr,
        )
        return 2
    path, argv = args[0], args[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(5.0)
        conn.connect(path)
        job = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
        socket.send_fds(conn, [json.dumps(job).encode()], [1, 2])
        reader = conn.makefile("rb")
        first = json.loads(reader.readline() or b"{}")
    except (OSError, ValueError) as exc:
        run_cold(argv, f"the warm worker at {path} cannot be reached ({exc})")
        return 127
    if "pid" not in first:
        run_cold(argv, f"the warm worker refused the job ({first.get('refused', 'no answer')})")
        return 127
    worker = int(first["pid"])

    def relay(signum: int, _frame: object) -> None:
        try:
            os.kill(worker, signum)
        except ProcessLookupError:
            return
        if signum == signal.SIGTSTP and worker_paused(worker):
            os.kill(os.getpid(), signal.SIGSTOP)  # the attempt reads as paused

    for sig in (*STOP_SIGNALS, signal.SIGTSTP, signal.SIGCONT):
        signal.signal(sig, relay)
    conn.settimeout(None)
    while True:
        try:
            line = reader.readline()
        except InterruptedError:
            continue
        if not line:
            print("corral: the warm worker ended without the job's exit code", file=sys.stderr)
            return 1
        answer = json.loads(line)
        if "exit" in answer:
            return int(answer["exit"])


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
