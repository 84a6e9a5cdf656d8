"""One user's idle or half-sent connections cannot make the API unreachable: under
a hard limit of 1,024 open files, 1,100 idle connections and 50 half-sent requests
from one address leave another user's submission and listing answered within a
second; idle ones are closed after ``request_timeout``; the log stays small.
(:mod:`corral.api.connections`.) And a root service is the kernel's OOM killer's
last choice."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.api.client import Client
from corral.api.connections import RESERVED_FILES, ConnectionLimits, QuietErrors
from corral.runtime.execution.launcher import SERVICE_OOM_SCORE_ADJ
from corral.testing.service_process import ServiceProcess
from tests.runtime.harness import TOKENS

IDLE, HALF_SENT = 1100, 50


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    made = ServiceProcess(
        tmp_path, "fifo", users=TOKENS, gpus=[{"type": "V100", "count": 1}],
        open_files=1024, request_timeout=3.0,
    )  # fmt: skip
    made.start()
    yield made
    made.close()


def opened(port: int, count: int, first: bytes = b"") -> list[socket.socket]:
    out = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if first:
            sock.sendall(first)
        out.append(sock)
    return out


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the service closed it (an end of file, perhaps after a 503, or a reset)."""
    sock.settimeout(0.05)
    try:
        sock.recv(4096)
    except TimeoutError:
        return False  # open, and silent
    except OSError:
        return True
    return True


def test_idle_and_half_sent_connections_leave_the_api_to_others(
    service: ServiceProcess,
) -> None:
    bob = Client(service.url, TOKENS["bob"])
    held = opened(service.port, IDLE)
    held += opened(service.port, HALF_SENT, b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")
    try:
        for _ in range(3):  # (each a new connection: the client's own is closed)
            began = time.monotonic()
            job = bob.submit({"command": ["true"], "gpus": 1})
            listed = bob.jobs()
            took = time.monotonic() - began
            assert took < 1.0, f"a submission and a listing took {took:.2f} s"
            assert job["id"] in {j["id"] for j in listed}
            bob.close()
        time.sleep(3.0 + 1.5)  # past request_timeout: the idle and half-sent are gone
        still = [s for s in held[-200:] if not closed_by_server(s)]
        assert not still, f"{len(still)} of the last 200 still open"
    finally:
        for sock in held:
            sock.close()
    text = service.log.read_text()
    assert len(text) < 4000 and "Too many open files" not in text, text[-2000:]
    assert "at most" in text and "LimitNOFILE" in text  # (the limit said once, at start)


def test_the_caps_stay_below_the_open_file_limit() -> None:
    assert ConnectionLimits.within(1024, 256, 20.0, 1024) == ConnectionLimits(
        1024 - RESERVED_FILES, 256, 20.0
    )
    assert ConnectionLimits.within(1024, 2000, 5.0, 10**6) == ConnectionLimits(1024, 1024, 5.0)


def test_a_repeated_loop_error_is_logged_once_a_minute_with_a_count() -> None:
    out = io.StringIO()
    quiet = QuietErrors(every=60.0, out=out)
    loop = asyncio.new_event_loop()
    try:
        for _ in range(1000):
            quiet(loop, {"message": "socket.accept() out of system resource",
                         "exception": OSError(24, "Too many open files")})  # fmt: skip
        quiet(loop, {"message": "another thing"})
    finally:
        loop.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "Too many open files" in lines[0], lines
    quiet.lines.last = {k: (v[0] - 61, v[1]) for k, v in quiet.lines.last.items()}  # a minute on
    quiet(loop, {"message": "socket.accept() out of system resource",
                 "exception": OSError(24, "Too many open files")})  # fmt: skip
    assert "999 more like it" in out.getvalue().splitlines()[-1]


def _may_lower_oom_score() -> bool:
    """Whether a process here may lower its oom_score_adj (root with CAP_SYS_RESOURCE;
    a container may withhold it)."""
    probe = "from corral.runtime.execution.launcher import set_oom_score_adj as s; print(s(-1))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return done.stdout.strip() == "True"


@pytest.mark.skipif(
    os.geteuid() != 0 or not _may_lower_oom_score(),
    reason="lowering oom_score_adj needs root with CAP_SYS_RESOURCE",
)
def test_the_service_is_the_oom_killers_last_choice(service: ServiceProcess) -> None:
    assert service.proc is not None
    adj = Path(f"/proc/{service.proc.pid}/oom_score_adj").read_text().strip()
    assert adj == str(SERVICE_OOM_SCORE_ADJ)
