"""Under systemd's ``Type=notify`` with a watchdog: ``corral serve`` says READY once it
answers, pings the watchdog while its loop makes passes, and says STOPPING on
its way out (a datagram socket standing in for systemd's)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from corral.runtime import systemd
from corral.testing.service_process import ServiceProcess


def received(sock: socket.socket, within: float) -> list[str]:
    sock.settimeout(0.2)
    out: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
    return out


def test_ready_watchdog_and_stopping_as_systemd_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    service = ServiceProcess(
        tmp_path / "state",
        "fifo",
        env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "1000000"},
    )
    try:
        service.start()
        said = received(sock, 3.0)
        assert said and said[0].startswith("READY=1\nSTATUS=serving http://127.0.0.1:")
        assert said.count("WATCHDOG=1") >= 3  # (every half second while the loop runs)
        service.stop()
        assert "STOPPING=1" in received(sock, 1.0)
    finally:
        service.close()
        sock.close()


def test_nothing_is_sent_outside_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(key, raising=False)
    assert systemd.notify("READY=1") is False
    assert systemd.watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))  # (another process's watchdog)
    assert systemd.watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert systemd.watchdog_interval() == 15.0
