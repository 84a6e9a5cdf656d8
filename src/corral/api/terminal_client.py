"""The user's end of an interactive allocation's terminal: this terminal (put in raw
mode, as ssh does) joined to the job's through the service's WebSocket
(:mod:`corral.api.terminal`).

Keys go to the job's terminal as they are typed, window sizes as they change
(``SIGWINCH``); the job's output is written here as it comes. When standard
input is not a terminal (a pipe, a test), what it gives is sent, then an
end-of-file (Ctrl-D) so a shell reading it exits. The session ends when the
job's terminal closes (its command exited, or the job was stopped).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import termios
import threading
import tty
from typing import Any

from corral.api.client import Client
from corral.errors import CorralError, NotFound, PermissionDenied
from corral.runtime.execution.pty_host import ATTACHED, DATA, frame, window_frame

NOT_OPEN = 4409
"""The close code of a terminal not (yet) open: the job is starting, or not running."""
_ERRORS: dict[int, type[CorralError]] = {4403: PermissionDenied, 4404: NotFound}
EOF_KEY = b"\x04"


class Refused(CorralError):
    """The service would not attach this terminal (the close's code and reason)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason or f"the service closed the terminal (code {code})")
        self.code = code
        self.exit_code = _ERRORS.get(code, CorralError).exit_code


def session(client: Client, job_id: int) -> tuple[int, str]:
    """Join this terminal to the job's until the job's closes; the close's code and
    reason (1000: the terminal closed; 4000 + an HTTP status: refused, see
    :mod:`corral.api.terminal`)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect as tcp_connect
    from websockets.sync.client import unix_connect

    uri, headers, socket = client.websocket_target(f"/v1/jobs/{job_id}/terminal")
    options: dict[str, Any] = {"additional_headers": headers, "open_timeout": 30}
    try:
        if socket is not None:
            ws = unix_connect(socket, uri, **options)
        else:
            ws = tcp_connect(uri, proxy=None, **options)
    except OSError as exc:
        raise CorralError(f"cannot reach the service's terminal relay at {uri}: {exc}") from None
    try:  # joined, or refused (nothing typed is read before: it would be lost)
        first = ws.recv(timeout=60)
    except (ConnectionClosed, TimeoutError):
        ws.close()
        return ws.close_code or 1006, ws.close_reason or ""
    if first != ATTACHED:
        ws.close()
        raise CorralError(f"the service answered the terminal with {first!r:.60}")
    relay(ws)
    return ws.close_code or 1006, ws.close_reason or ""


def window_size() -> tuple[int, int] | None:
    """This terminal's rows and columns (None: not a terminal)."""
    for stream in (sys.stdout, sys.stdin):
        with contextlib.suppress(OSError, ValueError):
            size = os.get_terminal_size(stream.fileno())
            return size.lines, size.columns
    return None


def relay(ws: Any) -> None:
    """Join this terminal to the job's until the job's closes."""
    from websockets.exceptions import ConnectionClosed

    out = sys.stdout.buffer
    done = threading.Event()

    def show(data: bytes | str) -> None:
        out.write(data.encode() if isinstance(data, str) else data)
        out.flush()

    def downstream() -> None:
        try:
            for message in ws:
                show(message)
        except ConnectionClosed:
            pass
        finally:
            done.set()

    reader = threading.Thread(target=downstream, daemon=True)
    reader.start()
    fd = sys.stdin.fileno()
    is_tty = os.isatty(fd)
    saved = termios.tcgetattr(fd) if is_tty else None
    resized = threading.Event()
    old_handler = signal.signal(signal.SIGWINCH, lambda *_: resized.set())
    try:
        if saved is not None:
            tty.setraw(fd, termios.TCSADRAIN)  # (TCSAFLUSH would drop keys typed ahead)
        size = window_size()
        if size is not None:
            ws.send(window_frame(*size))
        open_input = True
        while not done.is_set():
            if resized.is_set():
                resized.clear()
                if (size := window_size()) is not None:
                    ws.send(window_frame(*size))
            if not open_input:
                done.wait(0.2)
                continue
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            data = os.read(fd, 4096)
            if not data:  # (not a terminal, and its input is over: end the shell's too)
                open_input = False
                data = EOF_KEY
            ws.send(frame(DATA, data))
    except ConnectionClosed:
        pass
    finally:
        signal.signal(signal.SIGWINCH, old_handler)
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        with contextlib.suppress(Exception):
            ws.close()
        reader.join(5)
