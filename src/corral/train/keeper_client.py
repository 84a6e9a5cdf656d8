"""The task's side of a round keeper (:mod:`corral.train.round_keeper`): how a
task process finds its job's keeper and hands it the task.

It is apart from the keeper so that a task, the keeper and the executor that
names the socket share these pieces without importing each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KEEPER_ENV = "CORRAL_ROUND_KEEPER"
"""Names, in a task's environment, the socket of the keeper holding its job on its GPU."""
START_WAIT = 1.0
"""How long a task waits for a keeper's socket to appear (the keeper is starting)."""


@contextlib.contextmanager
def short_name(path: Path) -> Iterator[str]:
    """A short name for ``path`` (a Unix socket's name is limited to 107 bytes, and job
    folders are deep): through a descriptor of its folder."""
    fd = os.open(path.parent, os.O_PATH)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def ask(path: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """Run a task in the job's keeper at ``path``: its answer (``applied``, ``held``, or
    ``error``), or None when no keeper takes it (the task then runs itself)."""
    deadline = time.monotonic() + START_WAIT
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with short_name(path) as name:
                sock.connect(name)
            break
        except FileNotFoundError:  # not bound yet (the keeper is starting), or folder gone
            sock.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        except OSError:  # refused: its keeper is gone
            sock.close()
            return None
    with sock:
        try:
            sock.sendall(json.dumps(request).encode() + b"\n")
            reply = read_line(sock)
        except OSError:
            return None
    if not reply:
        return None  # it went away before answering
    answer = json.loads(reply)
    return None if "refused" in answer else answer


def read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        piece = sock.recv(1 << 16)
        if not piece:
            return b""
        data += piece
    return data
