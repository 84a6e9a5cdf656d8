"""The terminal of an interactive allocation (``corral alloc``, ``corral run --pty``).

Started as the job's command (so as the job's user, inside its limits, on its
GPUs, with its environment): it runs the user's command on a new pseudo-terminal
and offers that terminal on a Unix socket in the job's own folder (mode 0600:
only the job's user and the service can connect). The service relays one
client's connection to it (``/v1/jobs/{id}/terminal``); a new connection takes
the terminal over from the one before, and is first sent the last 64 KiB the
terminal wrote, so a prompt written before anyone attached is seen.

From the client, frames (:data:`FRAME`): ``d`` and bytes typed, ``w`` and the
window's rows and columns; to the client, the terminal's bytes as they come.
When the client goes, the command gets SIGHUP, as when an ssh session or a
terminal window closes (what should outlive it runs under ``tmux`` or
``nohup``), so an abandoned session never keeps its GPUs. When the command
ends, what it wrote last is sent, the connection closed, and this process
exits with the command's status: the allocation ends as the command did.

Standard library only: it starts in the job before anything else.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pty
import select
import signal
import socket
import struct
import sys
import termios

FRAME = struct.Struct("!cI")
"""A client's frame header: its kind (``d`` data, ``w`` window) and its length."""
WINDOW = struct.Struct("!HH")
"""A window frame's body: rows, columns."""
DATA, SIZE = b"d", b"w"
SCROLLBACK = 64 * 1024
MAX_FRAME = 1 << 20


ATTACHED = "attached"
"""The service's first message to a client joined to the terminal (a text message;
the terminal's output comes as binary ones)."""
SOCKET_NAME = "terminal.sock"
"""The terminal's socket in the job's own folder."""
MODULE = "corral.runtime.execution.pty_host"


def host_argv(python: str, folder: str, argv: list[str]) -> list[str]:
    """The job's command that runs ``argv`` on a terminal offered in ``folder``."""
    return [python, "-m", MODULE, os.path.join(folder, SOCKET_NAME), "--", *argv]


def frame(kind: bytes, body: bytes) -> bytes:
    """One frame from the client (see the module docstring)."""
    return FRAME.pack(kind, len(body)) + body


def window_frame(rows: int, columns: int) -> bytes:
    return frame(SIZE, WINDOW.pack(rows, columns))


TERMINAL_SIGNALS = (
    signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGPIPE,
    signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU,
)  # fmt: skip
"""Signals the session's command gets at their default action, as on a terminal."""


class Host:
    """The terminal, its listening socket and the one client attached."""

    def __init__(self, path: str, argv: list[str]) -> None:
        self.path = path
        self.pid, self.master = pty.fork()
        if self.pid == 0:  # the command, leading its own session on the terminal
            # a terminal's signals act as on a terminal, whatever this process inherited
            # (a service started under nohup ignores SIGHUP, and so would the session,
            # which then outlived its client's hang-up)
            for sig in TERMINAL_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            try:
                os.execvp(argv[0], argv)
            except OSError as exc:
                print(f"corral: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
            os._exit(127)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(4)
        self.client: socket.socket | None = None
        self.pending = b""
        self.scrollback = bytearray()
        self.status: int | None = None

    def serve(self) -> int:
        """Relay until the command ends; its exit status, as a shell gives it."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._stop)
        open_ = True
        while open_:
            watched: list[socket.socket | int] = [self.master, self.listener]
            if self.client is not None:
                watched.append(self.client)
            try:
                ready, _, _ = select.select(watched, [], [], 0.5)
            except InterruptedError:
                continue
            if self.master in ready:
                open_ = self._from_terminal()
            if self.listener in ready:
                self._attach()
            if self.client is not None and self.client in ready:
                self._from_client()
            if self._ended() and not self._drain():
                open_ = False
        self._finish()
        status = self.status if self.status is not None else self._wait()
        if status < 0:
            return 1
        code = os.waitstatus_to_exitcode(status)
        return 128 - code if code < 0 else code  # (killed by signal N: 128 + N, as a shell)

    # ---------------------------------------------------------------- the terminal
    def _from_terminal(self) -> bool:
        try:
            data = os.read(self.master, 65536)
        except OSError as exc:  # EIO: every process holding the terminal has gone
            if exc.errno != errno.EIO:
                raise
            return False
        if not data:
            return False
        self.scrollback += data
        del self.scrollback[:-SCROLLBACK]
        self._send(data)
        return True

    def _drain(self) -> bool:
        """After the command ended: whether the terminal still has output to read."""
        ready, _, _ = select.select([self.master], [], [], 0)
        return bool(ready) and self._from_terminal()

    def _ended(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.status = status
        return self.status is not None

    def _wait(self) -> int:
        try:
            return os.waitpid(self.pid, 0)[1]
        except ChildProcessError:
            return -1

    def _stop(self, signum: int, _frame: object) -> None:
        """The job is stopped (cancel, time limit): the command's session is hung up,
        then asked to end."""
        for sig in (signal.SIGHUP, signal.SIGCONT, signum):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    # ------------------------------------------------------------------ the client
    def _attach(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        if self.client is not None:
            with contextlib.suppress(OSError):
                self.client.sendall(b"\r\n[corral: this terminal was attached elsewhere]\r\n")
            self.client.close()
        self.client, self.pending = conn, b""
        self._send(bytes(self.scrollback))

    def _send(self, data: bytes) -> None:
        if self.client is None or not data:
            return
        try:
            self.client.sendall(data)
        except OSError:
            self._detach()

    def _from_client(self) -> None:
        assert self.client is not None
        try:
            data = self.client.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._detach()
            return
        self.pending += data
        while len(self.pending) >= FRAME.size:
            kind, size = FRAME.unpack_from(self.pending)
            if size > MAX_FRAME or kind not in (DATA, SIZE):
                self._detach()  # (not a client of ours)
                return
            if len(self.pending) < FRAME.size + size:
                break
            body = self.pending[FRAME.size : FRAME.size + size]
            self.pending = self.pending[FRAME.size + size :]
            if kind == DATA:
                self._type(body)
            elif len(body) == WINDOW.size:
                rows, columns = WINDOW.unpack(body)
                size = struct.pack("HHHH", rows, columns, 0, 0)  # (the kernel's winsize)
                with contextlib.suppress(OSError):
                    fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)

    def _type(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.master, data) :]
            except BlockingIOError:
                select.select([], [self.master], [], 1.0)
            except OSError:
                return

    def _detach(self) -> None:
        """The client went: the command's session is hung up (see the module)."""
        if self.client is not None:
            self.client.close()
            self.client = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGHUP)
            os.killpg(self.pid, signal.SIGCONT)

    def _finish(self) -> None:
        if self.client is not None:
            with contextlib.suppress(OSError):
                self.client.shutdown(socket.SHUT_RDWR)
            self.client.close()
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.master)


def main(args: list[str]) -> int:
    """``pty_host SOCKET -- COMMAND...``"""
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m corral.runtime.execution.pty_host SOCKET -- COMMAND...")
        return 2
    return Host(args[0], args[2:]).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
