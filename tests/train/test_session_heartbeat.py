"""What a session's heartbeat says about its throughput: the figure and how old
the window it covers is (the service reads a shared job's speed only from
figures measured wholly after the sharing began)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from corral.train import session as session_module
from corral.train.session import Session


def job_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the service gives a job's process (an API nobody answers: beats are caught)."""
    for key, value in {
        "CORRAL_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "CORRAL_API_URL": "http://127.0.0.1:9",
        "CORRAL_JOB_ID": "1",
        "CORRAL_JOB_TOKEN": "t",
    }.items():
        monkeypatch.setenv(key, value)


def test_a_heartbeat_says_how_old_its_throughput_window_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_environment(tmp_path, monkeypatch)
    monkeypatch.setenv("CORRAL_HEARTBEAT_INTERVAL", "1000")  # beats are sent by hand here
    sent: list[dict[str, Any]] = []

    def urlopen(request: Any, timeout: float) -> io.BytesIO:
        sent.append(json.loads(request.data))
        return io.BytesIO(b'{"stop": false, "lease_until": 0}')

    monkeypatch.setattr(session_module.urllib.request, "urlopen", urlopen)
    made = time.monotonic()
    session = Session()
    session._send()
    assert sent[-1]["throughput"] is None and sent[-1]["throughput_age"] is None
    began = time.monotonic()
    step = 0
    while time.monotonic() - began < 1.1:  # one full window of steps
        step += 1
        session.report(step)
        time.sleep(0.01)
    time.sleep(0.3)
    session._send()
    beat = sent[-1]
    session._done.set()
    assert beat["throughput"] > 0
    # the window began when the session was made: at least 1.1 + 0.3 s before the beat
    assert 1.4 <= beat["throughput_age"] <= time.monotonic() - made


def test_only_rank_zero_of_a_gang_beats_and_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_environment(tmp_path, monkeypatch)
    made = {}
    for rank in ("0", "1"):
        monkeypatch.setenv("CORRAL_RANK", rank)
        made[rank] = Session()
        made[rank].save(3)
        made[rank]._done.set()
    assert made["0"]._thread is not None and made["1"]._thread is None
    saved = list((tmp_path / "ckpt").iterdir())
    assert len(saved) == 1  # rank 0's checkpoint; rank 1 wrote nothing
