"""corral serve's start-up pieces: the listening socket it binds before the store."""

from __future__ import annotations

import socket

import pytest

from corral.errors import CorralError
from corral.service import bind


def test_the_listening_socket_is_tcp_so_answers_are_not_held_by_nagle() -> None:
    """asyncio disables Nagle only on sockets whose protocol is TCP; a socket made with
    protocol 0 left every answer waiting ~40 ms for a delayed ACK."""
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


def test_a_taken_port_is_a_message() -> None:
    first = bind("127.0.0.1", 0)
    try:
        with pytest.raises(CorralError, match=r"cannot listen on 127\.0\.0\.1"):
            bind("127.0.0.1", first.getsockname()[1])
    finally:
        first.close()
