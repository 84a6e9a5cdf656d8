"""One user against the host, all at once, and another user's work unharmed.

A root-run service whose state directory (store and logs) is a small disk of its
own (a 16 MiB tmpfs). alice, over two seeds: chatty jobs (each writing 20 MB to
its output, cut at ``log_limit``), 400 idle connections and 30 half-sent
requests, 25 wrong tokens from the shared address, a weight of 1,000 and a job
without a time limit. bob, from the same address, submits his jobs and lists
them all along: each answer within a second, every job of his SUCCEEDED; no
node drained, no attempt taken for a lost node, the log small. (Each protection
has its own test; this is them together: ``docs/service.md``, "Security".)
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.api.client import Client
from corral.errors import CorralError
from corral.testing.service_process import ServiceProcess
from tests.runtime.harness import TOKENS, wait_for

PY = sys.executable
CHATTY = [PY, "-c", "import sys\nfor _ in range(200): sys.stdout.write('y' * 100_000)"]


@pytest.fixture
def small_state(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "svc"
    where.mkdir()
    if sys.platform != "linux" or subprocess.run(["id", "-u"], capture_output=True,
                                                 text=True).stdout.strip() != "0":  # fmt: skip
        pytest.skip("a disk of its own for the state needs root (a tmpfs mount)")
    (where / "state").mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(where / "state")],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"no tmpfs mount here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where / "state")], check=False)


@pytest.mark.long
@pytest.mark.parametrize("seed", [0, 1])
def test_one_user_cannot_hurt_another_through_the_host(small_state: Path, seed: int) -> None:
    rng = random.Random(seed)
    service = ServiceProcess(
        small_state, "fifo", users=TOKENS, gpus=[{"type": "V100", "count": 2}],
        jobs_dir=str(small_state.parent / "jobs"), log_limit=256 * 1024,
        disk_floor="2M", disk_warn="4M", disk_reserve="1M", request_timeout=3.0,
        time_limits={"default_time": 60, "max_time": 600}, open_files=1024,
    )  # fmt: skip
    service.start()
    alice = Client(service.url, TOKENS["alice"])
    bob = Client(service.url, TOKENS["bob"])
    slowest = 0.0

    def timed_bob(call: str, *args: object) -> object:
        nonlocal slowest
        began = time.monotonic()
        answer = getattr(bob, call)(*args)
        slowest = max(slowest, time.monotonic() - began)
        return answer

    held: list[socket.socket] = []
    try:
        # bob, alice and the admin have used the service from this address before (a
        # first request ever from an address still waits out a lock-out: documented)
        timed_bob("jobs")
        alice.jobs()
        service.admin.nodes()
        harms = ["chatty", "idle", "half", "guess", "weight", "untimed"]
        rng.shuffle(harms)
        mine: list[int] = []
        chatty: list[int] = []
        for harm in harms:
            if harm == "chatty":
                chatty += [alice.submit({"command": CHATTY, "gpus": 1})["id"] for _ in range(3)]
            elif harm in ("idle", "half"):
                first = b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" if harm == "half" else b""
                for _ in range(400 if harm == "idle" else 30):
                    sock = socket.create_connection(("127.0.0.1", service.port), timeout=5)
                    if first:
                        sock.sendall(first)
                    held.append(sock)
            elif harm == "guess":
                guesser = Client(service.url, "wrong-token-000")
                for _ in range(25):
                    with pytest.raises(CorralError):
                        guesser.jobs()
            elif harm == "weight":
                with pytest.raises(CorralError, match="max_user_weight"):
                    alice.submit({"command": ["true"], "gpus": 1, "weight": 1000})
            else:
                untimed = alice.submit({"command": ["true"], "gpus": 1})["id"]
                assert alice.job(untimed)["spec"]["wall_time"] == 60  # the default_time
            mine.append(timed_bob("submit", {"command": [PY, "-c", "pass"], "gpus": 1})["id"])
            timed_bob("jobs")
        done = wait_for(
            lambda: all(
                timed_bob("job", j)["status"] in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT")
                for j in mine + chatty
            ),
            180,
            "every job to end",
        )
        assert done
        assert [bob.job(j)["status"] for j in mine] == ["SUCCEEDED"] * len(mine)
        assert slowest < 1.0, f"bob waited {slowest:.2f} s for an answer"
        assert all(n["state"] == "up" for n in service.admin.nodes())
        causes = {a["cause"] for j in chatty for a in alice.job(j)["attempts"]}
        assert "node_failure" not in causes, causes
    finally:
        for sock in held:
            sock.close()
        service.close()
    text = service.log.read_text()
    assert len(text) < 8000 and "Traceback" not in text, text[-3000:]
