"""One rank of an attempt on a Ray node (the Ray executor's actor).

The executor creates one detached, named actor per node of a gang, pinned to
that node. The actor runs the rank's processes exactly as the local executor
runs an attempt: through :mod:`corral.runtime.execution.launcher`, in their own process
group, which records the exit in the rank's folder. The actor outlives the
service (it is detached), so a restarted service finds it by name and adopts
the rank; it hands back the rank's output in pieces for the service's log.

This module imports nothing of Ray: the executor wraps the class with
``ray.remote`` when it is used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from corral.runtime.execution.executor import (
    group_alive,
    process_start,
    read_exit_record,
    start_launcher,
)
from corral.runtime.execution.launcher import Confinement

LOG_NAME = "output.txt"
NODE_FILE = "ray-node-id"
MAX_CHUNK = 1 << 20
"""Most bytes of output handed back per status call."""


class RankProcess:
    """The launcher of one rank, on the node the actor was placed on."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.pid_start = ""
        self.folder: Path | None = None

    def node(self) -> dict[str, Any]:
        """Where this rank runs: its address (the gang's rendezvous) and a free port there."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = int(sock.getsockname()[1])
        host = os.environ.get("RAY_NODE_IP_ADDRESS") or _node_ip()
        return {"address": host, "port": port, "hostname": socket.gethostname()}

    def start(
        self,
        folder: str,
        conf: dict[str, Any],
        env: dict[str, str],
        argv: list[str],
        head: dict[str, Any] | None = None,
    ) -> tuple[int, str]:
        """Start the rank's launcher; its pid and start time. ``head``: rank 0's
        :meth:`node` for a gang over several nodes (its rendezvous)."""
        if head is not None:
            env = {
                **env,
                "CORRAL_MASTER_ADDR": str(head["address"]),
                "CORRAL_MASTER_PORT": str(head["port"]),
            }
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / NODE_FILE).write_text(_node_id())  # where Ray placed it, for people
        confinement = Confinement(**conf)
        confinement.parent = os.getpid()  # a rank no actor reports on must not run on
        self.child = start_launcher(self.folder, confinement, argv, env, self.folder / LOG_NAME)
        self.pid = self.child.pid
        self.pid_start = process_start(self.pid) or ""
        return self.pid, self.pid_start

    def status(self, offset: int) -> dict[str, Any]:
        """Whether the rank ended (its exit record), and its output from ``offset`` on."""
        assert self.folder is not None
        if self.child is not None:
            self.child.poll()  # reap the launcher
        record = None
        if not self._running():
            if group_alive(self.pid):  # the launcher died but the job's processes live
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
            else:
                found = read_exit_record(self.folder)
                record = (
                    {"exit_code": found.exit_code, "signal": found.signal, "detail": found.detail}
                    if found is not None
                    else {"lost": True, "detail": "the rank's process vanished without a record"}
                )
        data = b""
        with contextlib.suppress(OSError), open(self.folder / LOG_NAME, "rb") as log:
            log.seek(offset)
            data = log.read(MAX_CHUNK)
        return {"record": record, "output": data, "offset": offset + len(data)}

    def signal(self, sig: int) -> None:
        if self._running():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def _running(self) -> bool:
        start = process_start(self.pid) if self.pid else None
        return start is not None and (not self.pid_start or start == self.pid_start)


def _node_id() -> str:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # outside Ray
        return ""


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # outside Ray (tests of this class alone)
        return "127.0.0.1"
