"""``corral alloc`` as a user types it, on a pseudo-terminal, against a real service:
the allocation waits while the GPUs are busy, a shell opens on its GPU with the
submitting shell's variables, keys and window size reach it, and the allocation
is released when the shell exits, the command exiting with the shell's status."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import TERMINAL, TOKENS


def read_until(fd: int, want: bytes, seen: bytearray, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while want not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"waited for {want!r}; the terminal showed {bytes(seen)!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:  # (the command ended: its terminal closed)
                data = b""
            if not data:
                raise TimeoutError(f"closed before {want!r}; it showed {bytes(seen)!r}")
            seen += data


def test_alloc_on_a_terminal_waits_opens_a_shell_and_releases_the_gpu(tmp_path: Path) -> None:
    service = ServiceProcess(
        tmp_path / "state", "fifo", users=TOKENS, gpus=[{"type": "V100", "count": 1}]
    )
    service.start()
    try:
        env = {
            **os.environ,
            "CORRAL_URL": service.url,
            "CORRAL_TOKEN": TOKENS["alice"],
            "MYVAR": "from-my-shell",
            "TERM": "dumb",
        }
        busy = service.admin.submit({"command": ["sleep", "3"], "gpus": 1})
        main, child = pty.openpty()
        os.set_blocking(main, True)
        fcntl.ioctl(main, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 90, 0, 0))
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral.cli", "alloc", "-G", "1", "--", "sh"],
            stdin=child, stdout=child, stderr=child, env=env, cwd=tmp_path,
            start_new_session=True,
        )  # fmt: skip
        os.close(child)
        seen = bytearray()
        read_until(main, b"waiting for resources", seen)
        read_until(main, b"granted job allocation", seen)
        assert service.admin.job(busy["id"])["status"] == "SUCCEEDED"  # (it waited its turn)
        os.write(main, b'echo "[$MYVAR] gpus $CORRAL_GPU_IDS"; stty size\n')
        read_until(main, b"[from-my-shell] gpus 0", seen)
        read_until(main, b"30 90", seen)  # (this terminal's size, as stty sees it there)
        os.write(main, b"echo $((6 * 7)); exit 4\n")
        read_until(main, b"relinquishing job allocation", seen)
        assert proc.wait(30) == 4
        assert b"42\r\n" in seen
        os.close(main)
        alloc = busy["id"] + 1
        wait_for(lambda: service.admin.job(alloc)["status"] in TERMINAL, 30, "its end")
        ended = service.admin.job(alloc)
        assert (ended["status"], ended["exit_code"], ended["name"]) == ("FAILED", 4, "interactive")
        assert [node["gpus_in_use"] for node in service.admin.nodes()] == [0]  # (released)
    finally:
        service.close()
