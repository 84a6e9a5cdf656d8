"""HTTP/1.1 on one kept-alive socket: how the command line talks to the service.

Slurm's users submit in loops, one process a job, so a command's start is most
of its cost. Python's ``http.client`` imports the ``email`` package to read
headers, and ``ssl``: about 30 ms of a 50 ms ``corral submit`` on the
development machine. The service's answers are plain (a status line, headers,
then a body of ``Content-Length`` bytes, chunked, or up to the close), and
that is all this module reads. It uses the C socket module, ``_socket``, as
the standard ``socket`` module does underneath: ``socket`` itself imports
``enum`` and ``selectors`` for its wrappers (5 ms of a quick command). HTTPS
goes through ``http.client`` (imported only then), behind the same call.

Both raise ``ConnectionResetError`` when a kept-alive connection was closed by
the server before it answered (the caller sends once more), :class:`BadAnswer`
for an answer that is not HTTP, and other ``OSError`` for the rest.
"""

from __future__ import annotations

try:
    import _socket as net
except ImportError:  # (not CPython: the wrapper has the same names)
    import socket as net  # type: ignore[no-redef]

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from typing import Protocol

    class Reader(Protocol):
        def readline(self, limit: int = -1, /) -> bytes: ...

        def read(self, n: int = -1, /) -> bytes: ...

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


def connect(host: str | bytes, port: int, timeout: float) -> net.socket:
    """A TCP connection to the first of ``host``'s addresses that answers (as
    ``socket.create_connection`` makes one), with ``timeout`` on each call."""
    failure: OSError | None = None
    for family, kind, proto, _, address in net.getaddrinfo(host, port, 0, net.SOCK_STREAM):
        sock = net.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        sock.setsockopt(net.IPPROTO_TCP, net.TCP_NODELAY, 1)
        return sock
    raise failure or OSError(f"no address found for {host!r}")


def connect_unix(path: str, timeout: float) -> net.socket:
    """A connection to the Unix socket at ``path``."""
    sock = net.socket(net.AF_UNIX, net.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


class SocketReader:
    """Lines and byte counts read from a socket through one buffer: the part of a
    socket's ``makefile("rb")`` that :func:`read_answer` uses."""

    CHUNK = 262144

    def __init__(self, sock: net.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def _more(self) -> bool:
        data = self._sock.recv(self.CHUNK)
        self._buffer += data
        return bool(data)

    def _take(self, n: int) -> bytes:
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def readline(self, limit: int = -1, /) -> bytes:
        """Up to and with the next line feed, at most ``limit`` bytes (less at the close)."""
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched)
            if end >= 0:
                return self._take(end + 1 if limit < 0 else min(end + 1, limit))
            if 0 <= limit <= len(self._buffer):
                return self._take(limit)
            searched = len(self._buffer)
            if not self._more():
                return self._take(len(self._buffer))

    def read(self, n: int = -1, /) -> bytes:
        """``n`` bytes (fewer only at the close), or with -1 all up to the close."""
        while (n < 0 or len(self._buffer) < n) and self._more():
            pass
        return self._take(len(self._buffer) if n < 0 else n)


class PlainConnection:
    """One kept-alive plain-HTTP connection, opened at the first request (to a Unix
    socket's ``path`` where one is given: the service's host, no token needed)."""

    def __init__(self, host: str, port: int, timeout: float, path: str | None = None) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.path = path
        self._sock: net.socket | None = None
        self._reader: SocketReader | None = None

    def close(self) -> None:
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
            self._sock = (
                connect(host, self.port, self.timeout)
                if self.path is None
                else connect_unix(self.path, self.timeout)
            )
            self._reader = SocketReader(self._sock)
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


def _line(reader: Reader) -> bytes:
    line = reader.readline(LINE + 1)
    if len(line) > LINE:
        raise BadAnswer("an answer's line is longer than 64 KiB")
    if line and not line.endswith(b"\n"):
        raise ConnectionResetError("the service closed the connection mid-line")
    return line


def read_answer(reader: Reader, method: str = "GET") -> tuple[int, str, Headers, bytes, bool]:
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


def _exactly(reader: Reader, n: int) -> bytes:
    data = reader.read(n)
    if len(data) < n:
        raise ConnectionResetError(f"the service closed the connection {n - len(data)} bytes short")
    return data


def _chunks(reader: Reader) -> bytes:
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
