"""Interactive allocations (``corral alloc``): a command on a terminal of its own,
its owner's keys and window size relayed to it through the service and its
output back, ending as the command does; never preempted or suspended; only
its owner attaches. The terminal's host alone, then the whole path through the
API with a real loop and real processes."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect

from corral.runtime.execution.pty_host import DATA, frame, window_frame
from tests.runtime.harness import Harness, auth, wait_for

HOST = [sys.executable, "-m", "corral.runtime.execution.pty_host"]


def read_until(conn: socket.socket, want: bytes, within: float = 20.0) -> bytes:
    conn.settimeout(within)
    seen = b""
    while want not in seen:
        data = conn.recv(4096)
        if not data:
            break
        seen += data
    return seen


@pytest.fixture
def host(tmp_path: Path) -> Any:
    """A terminal's host running a small shell program; (process, socket path)."""
    path = tmp_path / "t.sock"
    script = 'stty size; read line; echo "got $line"; exit 3'
    proc = subprocess.Popen([*HOST, str(path), "--", "sh", "-c", f"sleep 0.3; {script}"])
    wait_for(path.exists, 20, "the terminal's socket")
    yield proc, path
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_the_host_relays_keys_window_and_output_and_ends_as_its_command(host: Any) -> None:
    proc, path = host
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(str(path))
    conn.sendall(window_frame(33, 101))
    assert b"33 101" in read_until(conn, b"33 101")
    conn.sendall(frame(DATA, b"hello\n"))
    assert b"got hello" in read_until(conn, b"got hello")
    assert proc.wait(20) == 3
    assert not path.exists()


def test_a_second_client_takes_over_and_sees_what_was_written(host: Any) -> None:
    proc, path = host
    first = socket.socket(socket.AF_UNIX)
    first.connect(str(path))
    read_until(first, b"\n")  # (stty's line: the size before any window frame)
    second = socket.socket(socket.AF_UNIX)
    second.connect(str(path))
    assert b"\n" in read_until(second, b"\n")  # what the terminal wrote before
    assert b"attached elsewhere" in read_until(first, b"attached elsewhere")
    second.sendall(frame(DATA, b"again\n"))
    assert b"got again" in read_until(second, b"got again")
    assert proc.wait(20) == 3


@pytest.mark.parametrize("hup", [signal.SIG_DFL, signal.SIG_IGN])
def test_a_client_that_goes_hangs_up_the_command(tmp_path: Path, hup: signal.Handlers) -> None:
    """Also when the host inherits SIGHUP ignored (a service started under nohup):
    the command gets the terminal's signals as they are on a terminal."""
    path = tmp_path / "t.sock"
    proc = subprocess.Popen(
        [*HOST, str(path), "--", "sh", "-c", "sleep 600"],
        preexec_fn=lambda: signal.signal(signal.SIGHUP, hup),
    )
    try:
        wait_for(path.exists, 20, "the terminal's socket")
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(str(path))
        time.sleep(0.3)
        conn.close()
        status = proc.wait(20)  # (no shell left holding GPUs for nobody)
        assert status == 128 + signal.SIGHUP
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture
def harness(tmp_path: Path) -> Any:
    made = Harness(tmp_path / "state", policy="las", policy_options={"quantum": 1.0})
    yield made
    made.close()


def running_terminal(harness: Harness, **spec: Any) -> int:
    job = harness.submit(**{"gpus": 1, "interactive": True, **spec})
    harness.wait_state(job["id"], {"RUNNING"}, 60)
    folder = harness.config.job_root / str(job["id"])
    wait_for((folder / "terminal.sock").exists, 30, "the job's terminal")
    return int(job["id"])


def test_through_the_api_a_shell_on_the_gpus_that_ends_the_allocation(harness: Harness) -> None:
    job = running_terminal(harness, gpus=2, command=["sh"], env={"WHO": "me"})
    with harness.client.websocket_connect(f"/v1/jobs/{job}/terminal", headers=auth("alice")) as ws:
        assert ws.receive_text() == "attached"
        ws.send_bytes(window_frame(24, 80))
        ws.send_bytes(frame(DATA, b'echo "$WHO on $CORRAL_NUM_GPUS GPUs"; exit 5\n'))
        seen = b""
        with pytest.raises(WebSocketDisconnect):
            while True:
                seen += ws.receive_bytes()
    assert b"me on 2 GPUs" in seen
    done = harness.wait_state(job, {"FAILED", "SUCCEEDED"}, 30)
    assert (done["status"], done["exit_code"]) == ("FAILED", 5)
    assert done["max_retries"] == 0  # (a lost terminal is not run again)
    assert harness.scheduler.holders == {}


def test_only_its_owner_attaches_and_only_to_an_interactive_job(harness: Harness) -> None:
    job = running_terminal(harness, command=["sh"])
    batch = harness.submit(gpus=1, command=["sleep", "60"])
    for who, target, code in (("bob", job, 4403), ("alice", batch["id"], 4409)):
        with harness.client.websocket_connect(
            f"/v1/jobs/{target}/terminal", headers=auth(who)
        ) as ws:
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_bytes()
            assert closed.value.code == code
    with harness.client.websocket_connect(f"/v1/jobs/{job}/terminal") as ws:  # no token
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_bytes()
        assert closed.value.code == 4401


def test_an_interactive_allocation_is_never_preempted_nor_suspended(harness: Harness) -> None:
    """LAS with a 1 s quantum preempts a job that has run longest for a new one; an
    interactive allocation holding every GPU keeps them until it ends."""
    job = running_terminal(harness, gpus=4, command=["sleep", "600"])
    waiting = harness.submit(gpus=1, command=["true"])
    harness.wait_loop(
        lambda: harness.events("stop_skipped"), 30, "the plan's stop of the allocation refused"
    )
    time.sleep(2)
    assert harness.job(job)["status"] == "RUNNING"
    assert harness.job(waiting["id"])["status"] == "PENDING"
    answer = harness.client.post(f"/v1/jobs/{job}/suspend", headers=auth("alice"))
    assert answer.status_code == 409 and "never suspended" in answer.text
    assert len(harness.events("stop_skipped")) == 1  # (said once, not at every pass)


@pytest.mark.parametrize(
    ("spec", "field"),
    [({"array": "0-3"}, "array"), ({"output": "/tmp/x.out"}, "output")],
)
def test_what_an_interactive_allocation_cannot_be(
    harness: Harness, spec: dict[str, Any], field: str
) -> None:
    answer = harness.client.post(
        "/v1/jobs",
        json={"command": ["sh"], "gpus": 1, "interactive": True, **spec},
        headers=auth("alice"),
    )
    assert answer.status_code == 422 and field in answer.text
