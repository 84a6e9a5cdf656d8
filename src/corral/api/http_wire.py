"""HTTP/1.1 on one kept-alive socket: how the command line talks to the service.

Slurm's users submit in loops, one process a job, so a command's start is most
of its cost. Python's ``http.client`` imports the ``email`` package to read
headers, and ``ssl``: about 30 ms of a 50 ms ``corral submit`` on the
development machine. The service's answers are plain (a status line, headers,
then a body of ``Content-Length`` bytes, chunked, or up to the close), and
that is all this module reads, with the standard library's ``socket``. HTTPS
goes through ``http.client`` (imported only then), behind the same call.

Both raise ``ConnectionResetError`` when a kept-alive connection was closed by
the server before it answered (the caller sends once more), :class:`BadAnswer`
for an answer that is not HTTP, and other ``OSError`` for the rest.
"""

from __future__ import annotations

import socket

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from typing import BinaryIO, Protocol

    class Transport(Protocol):
        def request(
            self, method: str, target: str, body: bytes | None, headers: dict[str, str]
        ) -> tuple[int, str, Headers, bytes]: ...

        def close(self) -> None: ...


LINE = 65536
"""The longest status or header line read (``http.client``'s own limit)."""
HEADERS = 100
"""The most header lines read from one answer (``http.client``'s own limit)."""


class BadAnswer(OSError):
    """What came back is not an HTTP/1.x answer."""


class Headers(dict[str, str]):
    """An answer's headers, looked up without regard to case (names kept lower-case;
    built from pairs, give them lower-case)."""

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key.lower(), value)

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class PlainConnection:
    """One kept-alive plain-HTTP connection, opened at the first request."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._sock: socket.socket | None = None
        self._reader: BinaryIO | None = None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def request(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, Headers, bytes]:
        """Send one request and read its whole answer: status, reason, headers, body."""
        if self._sock is None or self._reader is None:
            # An ASCII host is given as bytes: a str host makes getaddrinfo import
            # the IDNA codec (2 ms of a quick command).
            host: str | bytes = self.host.encode() if self.host.isascii() else self.host
            self._sock = socket.create_connection((host, self.port), self.timeout)  # type: ignore[arg-type]
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._reader = self._sock.makefile("rb")
        named = f"[{self.host}]" if ":" in self.host else self.host  # (an IPv6 address)
        lines = [f"{method} {target} HTTP/1.1", f"Host: {named}:{self.port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        self._sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        status, reason, answer_headers, content, keep = read_answer(self._reader, method)
        if not keep:
            self.close()
        return status, reason, answer_headers, content


def _line(reader: BinaryIO) -> bytes:
    line = reader.readline(LINE + 1)
    if len(line) > LINE:
        raise BadAnswer("an answer's line is longer than 64 KiB")
    if line and not line.endswith(b"\n"):
        raise ConnectionResetError("the service closed the connection mid-line")
    return line


def read_answer(reader: BinaryIO, method: str = "GET") -> tuple[int, str, Headers, bytes, bool]:
    """Read one answer from a binary file: status, reason, headers, body, and whether
    the connection may be used again."""
    first = _line(reader)
    if not first:
        raise ConnectionResetError("the service closed the connection without answering")
    version, _, rest = first.decode("latin-1").rstrip("\r\n").partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not (len(code) == 3 and code.isdigit()):
        raise BadAnswer(f"not an HTTP answer: {first[:80]!r}")
    status = int(code)
    headers = Headers()
    for _ in range(HEADERS + 1):
        line = _line(reader)
        if line in (b"\r\n", b"\n"):
            break
        if not line:
            raise ConnectionResetError("the service closed the connection mid-answer")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon:
            raise BadAnswer(f"a header line without a colon: {line[:80]!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    else:
        raise BadAnswer(f"an answer with more than {HEADERS} headers")
    keep = version != "HTTP/1.0" and "close" not in (headers.get("connection") or "").lower()
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return status, reason, headers, b"", keep
    if "chunked" in (headers.get("transfer-encoding") or "").lower():
        return status, reason, headers, _chunks(reader), keep
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise BadAnswer(f"a Content-Length that is not a number: {length[:40]!r}")
        return status, reason, headers, _exactly(reader, int(length)), keep
    return status, reason, headers, reader.read(), False  # (up to the close)


def _exactly(reader: BinaryIO, n: int) -> bytes:
    data = reader.read(n)
    if len(data) < n:
        raise ConnectionResetError(f"the service closed the connection {n - len(data)} bytes short")
    return data


def _chunks(reader: BinaryIO) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = _line(reader).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise BadAnswer(f"a chunk size that is not a number: {size_line[:40]!r}") from None
        if size == 0:
            while _line(reader) not in (b"\r\n", b"\n", b""):  # (trailers, read and dropped)
                pass
            return b"".join(parts)
        parts.append(_exactly(reader, size))
        _exactly(reader, 2)  # (the CRLF after each chunk)


class SecureConnection:
    """HTTPS, through ``http.client``: the same call as :class:`PlainConnection`."""

    def __init__(self, host: str, port: int | None, timeout: float) -> None:
        import http.client

        self._conn = http.client.HTTPSConnection(host, port, timeout=timeout)

    def close(self) -> None:
        self._conn.close()

    def request(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, Headers, bytes]:
        import http.client

        try:
            self._conn.request(method, target, body=body, headers=headers)
            raw = self._conn.getresponse()
            content = raw.read()
        except http.client.RemoteDisconnected as exc:
            raise ConnectionResetError(str(exc)) from None
        except http.client.HTTPException as exc:
            raise BadAnswer(str(exc) or type(exc).__name__) from None
        answer_headers = Headers((name.lower(), value) for name, value in raw.getheaders())
        return raw.status, raw.reason, answer_headers, content


def split_url(url: str) -> tuple[str, str, int | None, str] | None:
    """``scheme://host[:port][/path]`` as (scheme, host, port, path), or None when
    ``url`` is not of that form. (``urllib.parse`` costs 4 ms of a quick command;
    a test holds this to its ``urlsplit`` over generated URLs.)"""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.isalpha():
        return None
    netloc, slash, path = rest.partition("/")
    netloc = netloc.split("#", 1)[0].split("?", 1)[0]
    path = (slash + path).split("#", 1)[0].split("?", 1)[0]
    if "@" in netloc:
        return None  # (credentials in a URL: not a service URL)
    if netloc.startswith("["):
        host, bracket, after = netloc[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            return None
        port_text = after[1:] if after else ""
    else:
        host, _, port_text = netloc.partition(":")
    if not host:
        return None
    port: int | None = None
    if port_text:
        if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
            return None
        port = int(port_text)
    return scheme.lower(), host.lower(), port, path
