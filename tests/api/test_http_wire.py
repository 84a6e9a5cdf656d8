"""The command line's HTTP (:mod:`corral.api.http_wire`): answers read as
``http.client`` reads them (from a socket that delivers them a few bytes at a
time), a closed kept-alive connection sent again once, anything else that is
not HTTP refused, service URLs split as ``urlsplit`` splits them, and queries
written as ``urlencode`` writes them."""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlencode, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.api.client import Client, _query
from corral.api.http_wire import BadAnswer, Headers, SocketReader, read_answer, split_url
from corral.errors import CorralError, Unreachable


class Trickle:
    """A socket's ``recv`` that hands out ``raw`` at most ``piece`` bytes a call, then
    b"" (the close): the worst a network can do to a reader's buffer."""

    def __init__(self, raw: bytes, piece: int) -> None:
        self.raw, self.piece = raw, piece

    def recv(self, n: int) -> bytes:
        out, self.raw = self.raw[: min(n, self.piece)], self.raw[min(n, self.piece) :]
        return out


def answer(raw: bytes, method: str = "GET") -> tuple[int, str, Headers, bytes, bool]:
    return read_answer(SocketReader(Trickle(raw, 3)), method)  # type: ignore[arg-type]


@given(
    st.binary(max_size=300),
    st.integers(1, 40),
    st.lists(st.tuples(st.booleans(), st.integers(-1, 80)), max_size=12),
)
def test_the_socket_reader_reads_as_a_buffered_file_does(
    raw: bytes, piece: int, calls: list[tuple[bool, int]]
) -> None:
    ours, theirs = SocketReader(Trickle(raw, piece)), io.BufferedReader(io.BytesIO(raw))  # type: ignore[arg-type]
    for is_line, n in calls:
        if is_line:
            assert ours.readline(n) == theirs.readline(n)
        else:
            assert ours.read(n) == theirs.read(n)
    assert ours.read() == theirs.read()


def test_bodies_by_length_by_chunks_and_to_the_close() -> None:
    status, reason, headers, body, keep = answer(
        b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Total-Count: 7\r\n\r\nhelloNEXT"
    )
    assert (status, reason, body, keep) == (201, "Created", b"hello", True)
    assert headers.get("x-total-count") == headers["X-TOTAL-COUNT"] == "7"
    assert "X-Total-Count" in headers and headers.get("X-Next-After") is None
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nTrailer: x\r\n\r\n"
    )
    assert answer(chunked)[3] == b"Wikipedia"
    closed = answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    assert closed[3:] == (b"ok", False)
    assert answer(b"HTTP/1.0 200 OK\r\n\r\nto the end")[3:] == (b"to the end", False)
    assert answer(b"HTTP/1.1 204 No Content\r\n\r\n")[3:] == (b"", True)
    assert answer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", "HEAD")[3] == b""
    repeated = answer(b"HTTP/1.1 200 OK\r\nVary: a\r\nVary: b\r\nContent-Length: 0\r\n\r\n")
    assert repeated[2]["vary"] == "a, b"


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0-OpenSSH_9.2\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n",
        b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n",
    ],
)
def test_what_is_not_http_is_refused(raw: bytes) -> None:
    with pytest.raises(BadAnswer):
        answer(raw)


@pytest.mark.parametrize(
    "raw",
    [b"", b"HTTP/1.1 200 OK\r\nContent-Len", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"],
)
def test_an_answer_cut_short_reads_as_a_closed_connection(raw: bytes) -> None:
    with pytest.raises(ConnectionResetError):
        answer(raw)


@pytest.fixture
def server() -> Iterator[tuple[int, list[bytes]]]:
    """A server that answers each connection's first request, then closes it
    (a kept-alive connection the server dropped), and records what it was sent."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length:")), 0,
                )  # fmt: skip
                while len(body) < length:
                    body += conn.recv(65536)
                seen.append(head + b"\r\n\r\n" + body)
                reply = b'{"id": %d, "name": "job"}' % len(seen)
                conn.sendall(
                    b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n" % len(reply) + reply
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], seen
    listener.close()


def test_the_client_sends_again_once_on_a_connection_the_server_closed(
    server: tuple[int, list[bytes]],
) -> None:
    port, seen = server
    with Client(f"http://127.0.0.1:{port}", "secret") as client:
        assert client.submit({"command": ["true"]}) == {"id": 1, "name": "job"}
        assert client.submit({"command": ["false"]}) == {"id": 2, "name": "job"}  # sent again
    first = seen[0].decode()
    assert first.startswith("POST /v1/jobs HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{port}\r\n" in first and "Authorization: Bearer secret\r\n" in first
    assert "Content-Type: application/json\r\n" in first
    assert first.endswith('\r\n\r\n{"command": ["true"]}')


def test_a_service_that_is_not_there_or_not_http_is_said_so() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(Unreachable, match="is 'corral serve' running"):
        Client(f"http://127.0.0.1:{port}").submit({"command": ["true"]})
    with pytest.raises(CorralError, match="not a service URL"):
        Client("ftp://127.0.0.1:21")


hosts = st.one_of(
    st.from_regex(r"[a-zA-Z0-9][a-zA-Z0-9.-]{0,20}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
)


@given(
    scheme=st.sampled_from(["http", "https", "HTTP"]),
    host=hosts,
    port=st.one_of(st.none(), st.integers(0, 65535)),
    path=st.from_regex(r"(/[a-z0-9_.-]{0,8}){0,3}", fullmatch=True),
    tail=st.sampled_from(["", "?x=1", "#frag", "?a=b#c"]),
)
def test_service_urls_split_as_urlsplit_splits_them(
    scheme: str, host: str, port: int | None, path: str, tail: str
) -> None:
    url = f"{scheme}://{host}{'' if port is None else f':{port}'}{path}{tail}"
    parts = urlsplit(url)
    assert split_url(url) == (parts.scheme, parts.hostname, parts.port, parts.path)


@pytest.mark.parametrize(
    "url",
    ["127.0.0.1:8470", "http://", "http://:80", "http://h:99999", "http://u:p@h:1", "http://[::1"],
)
def test_what_is_not_a_service_url_is_refused(url: str) -> None:
    assert split_url(url) is None


@pytest.mark.parametrize(
    ("token", "node"),
    [("abc\r\nX-Admin: 1", "n1"), ("abc", "n1 HTTP/1.1\r\nX: y"), ("abc", "a\nb")],
)
def test_a_line_break_in_a_token_or_a_name_is_refused_before_sending(
    server: tuple[int, list[bytes]], token: str, node: str
) -> None:
    port, seen = server
    with pytest.raises(CorralError, match="cannot be sent"):
        Client(f"http://127.0.0.1:{port}", token).node_state(node, "drain")
    assert seen == []


def test_a_name_in_another_script_is_sent_percent_encoded(server: tuple[int, list[bytes]]) -> None:
    port, seen = server
    Client(f"http://127.0.0.1:{port}", "t").node_state("nœud", "drain")
    assert seen[0].startswith(b"POST /v1/nodes/n%C5%93ud/drain HTTP/1.1\r\n")


def test_a_refused_token_is_not_repeated_in_the_message(server: tuple[int, list[bytes]]) -> None:
    port, _ = server
    with pytest.raises(CorralError) as refused:
        Client(f"http://127.0.0.1:{port}", "s3cret\nX: 1").node_state("n1", "drain")
    assert "s3cret" not in str(refused.value) and "token" in str(refused.value)


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.floats()),
        max_size=5,
    )
)
def test_queries_are_written_as_urlencode_writes_them(params: dict[str, object]) -> None:
    plain = {k: str(v).lower() if isinstance(v, bool) else v for k, v in params.items()}
    assert _query(params) == ("?" + urlencode(plain) if params else "")
