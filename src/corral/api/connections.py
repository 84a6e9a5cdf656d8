"""The API's connections, bounded: one user holding idle or half-sent connections
cannot make the API unreachable for everyone else.

Without these, each TCP connection holds a descriptor for as long as its client
likes: a thousand idle ones under systemd's default limit of 1,024 open files
left no descriptor to accept another user's request (nor for the store), and
asyncio then logged the failed accept over and over. So:

- at start the soft ``RLIMIT_NOFILE`` is raised to the hard limit
  (:func:`raise_open_files_limit`), and the connections allowed are kept well
  below what is left of it;
- a connection must send a whole request within ``request_timeout`` of opening
  (or of its last answer): idle and half-sent connections are closed;
- past the caps (overall, and per client address) the connection idle the
  longest is closed to make room (of that address first); when every one is
  busy with a request, the new connection is answered 503 and closed;
- errors of the event loop (a failed ``accept``) are logged once per condition
  per minute, with a count of those left out, never one line each.

uvicorn's own HTTP/1.1 protocol serves the requests; this subclass only adds the
caps and the deadline (its hooks: ``connection_made``, ``connection_lost``,
``on_response_complete``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from corral.log_lines import Repeats

RESERVED_FILES = 256
"""Descriptors kept for the store, logs and job launches whatever the connections,
and for a batch of :data:`ACCEPT_BATCH` accepted before those they replace are
closed."""
ACCEPT_BATCH = 128
"""The listening socket's backlog, which is also how many connections asyncio
accepts in one go (uvicorn's default, 2,048, let one burst take every descriptor
left before a connection closed to make room had let go of its own)."""
MOST_FILES = 1 << 20
"""The soft limit asked for when the hard one is unlimited."""
BUSY_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\nretry-after: 1\r\ncontent-length: 60\r\n\r\n"
    b'{"detail": "too many connections open; try again in a while"}'
)


PEER_PREFIX = "uid:"
"""The client "address" of a caller on the Unix socket: ``uid:N``, its uid as the
kernel gives it (never the form of a TCP peer's address)."""


def peer_uid(transport: asyncio.BaseTransport) -> int | None:
    """The uid of the process at the other end of a Unix socket (None: not one)."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def unix_listener(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` (a stale one from an earlier run replaced),
    mode 0666: anyone on the host may call, and is known by their uid."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o666)
    sock.listen(ACCEPT_BATCH)
    return sock


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard one (as a login shell's
    ``ulimit -n`` may); the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MOST_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return MOST_FILES if soft == resource.RLIM_INFINITY else soft


@dataclass(frozen=True)
class ConnectionLimits:
    """The caps in force (see the module's docstring)."""

    total: int
    per_address: int
    request_timeout: float

    @classmethod
    def within(
        cls, total: int, per_address: int, request_timeout: float, open_files: int
    ) -> ConnectionLimits:
        """The configured caps, kept below the open-file limit less a reserve."""
        room = max(open_files - RESERVED_FILES, 16)
        most = min(total, room)
        return cls(most, min(per_address, most), request_timeout)


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with ``limits`` (given to ``uvicorn.Config(http=...)``),
    and registers of its own connections (one server's)."""

    class Guarded(GuardedProtocol):
        pass

    Guarded.limits = limits
    Guarded.everyone = {}
    Guarded.by_address = {}
    return Guarded


class GuardedProtocol(H11Protocol):
    """One connection, with a deadline for its requests and the caps applied when it
    opens. The registers keep connections in the order they last became idle (the
    first idle one is the one to close), so making room costs no scan of them all:
    a thousand connections opened at once were a million steps."""

    limits = ConnectionLimits(1024, 256, 20.0)
    everyone: ClassVar[dict[GuardedProtocol, None]] = {}
    by_address: ClassVar[dict[str | None, dict[GuardedProtocol, None]]] = {}
    deadline: asyncio.TimerHandle | None = None
    address: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        uid = peer_uid(transport)
        if uid is not None:  # (the Unix socket: who calls, as the kernel says)
            self.client = (f"{PEER_PREFIX}{uid}", 0)
        self.address = self.client[0] if self.client else None
        self._arm()
        if not self._make_room():
            self._forget()
            transport.write(BUSY_ANSWER)
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._forget()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self in self.everyone:
            self._arm()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """A WebSocket (an interactive allocation's terminal) leaves the caps and the
        deadline of requests: it is one authenticated session that lasts as long as
        its shell. On the Unix socket its caller stays known by uid."""
        self._disarm()
        self._forget()
        client, base = self.client, self.ws_protocol_class
        if base is not None and client is not None and client[0].startswith(PEER_PREFIX):

            class KnownPeer(base):  # type: ignore[valid-type, misc]
                def connection_made(self, transport: asyncio.Transport) -> None:
                    super().connection_made(transport)
                    self.client = client

            self.ws_protocol_class = KnownPeer
        super().handle_websocket_upgrade(event)

    # ------------------------------------------------------------ the deadline
    def _arm(self) -> None:
        """Start its deadline, and put it last in the registers (idle the least)."""
        self._disarm()
        self.deadline = self.loop.call_later(self.limits.request_timeout, self._deadline_passed)
        self.everyone.pop(self, None)
        self.everyone[self] = None
        mine = self.by_address.setdefault(self.address, {})
        mine.pop(self, None)
        mine[self] = None

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _forget(self) -> None:
        self.everyone.pop(self, None)
        mine = self.by_address.get(self.address)
        if mine is not None:
            mine.pop(self, None)
            if not mine:
                del self.by_address[self.address]

    def _deadline_passed(self) -> None:
        """No whole request in time: close it (one whose request is in, being answered
        or streamed, is left alone)."""
        self.deadline = None
        if self.idle() and not self.transport.is_closing():
            self._forget()
            self.transport.close()

    def idle(self) -> bool:
        """Not serving a request: nothing sent yet, a request half-sent, or between two."""
        serving = self.cycle is not None and not self.cycle.response_complete
        return not serving or self.conn.their_state in (h11.IDLE, h11.SEND_BODY)

    # ---------------------------------------------------------------- the caps
    def _make_room(self) -> bool:
        """Keep the connections within the caps, this one counted: close the longest
        idle of its address (over the address's cap) or of all (over the total). False
        when there is none to close: this one is refused."""
        mine = self.by_address.get(self.address, {})
        if len(mine) > self.limits.per_address and not _close_oldest_idle(mine, self):
            return False
        return len(self.everyone) <= self.limits.total or _close_oldest_idle(self.everyone, self)


def _close_oldest_idle(register: dict[GuardedProtocol, None], spare: GuardedProtocol) -> bool:
    """Close the first idle connection of ``register`` other than ``spare``; False if none."""
    for connection in register:
        if connection is not spare and connection.idle():
            connection._forget()
            connection.transport.close()
            return True
    return False


class QuietErrors:
    """An event loop's exception handler that logs each kind of error once per
    ``every`` seconds, with the count of those left out (a failed ``accept`` with
    no descriptor left repeats many times a second)."""

    def __init__(self, every: float = 60.0, out: Any = None) -> None:
        self.lines = Repeats(every, out)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", "error"))
        exc = context.get("exception")
        key = f"{message}: {type(exc).__name__}: {exc}" if exc is not None else message
        self.lines.say(key, f"corral: {key}")
