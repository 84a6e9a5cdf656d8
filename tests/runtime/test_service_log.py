"""The service's log: a line per submission, allocation, start, attempt's end, stop,
node state change and request (who, and why), written once its transaction has
committed (never for a change the store refused), as text or JSON, at the level
asked."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from corral.runtime.service_log import ServiceLog, stamp
from corral.runtime.storage.store import Store
from tests.runtime.harness import Harness, auth


def test_a_line_is_written_only_once_its_transaction_commits(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    out = io.StringIO()
    store.echo = ServiceLog("info", "text", out)
    try:
        with pytest.raises(RuntimeError), store.session() as s:
            store.event(s, "allocated", 7, gpus=[0])
            raise RuntimeError("the store refused the pass")
        assert out.getvalue() == ""
        with store.session() as s:
            store.event(s, "allocated", 7, gpus=[0, 1])
            store.event(s, "packed", 8, on=7)  # (debug: below info)
            store.events(s, "submitted", [10, 11, 12], by="alice", gpus=1)
        lines = out.getvalue().splitlines()
        assert len(lines) == 2
        assert lines[0].endswith(" info    allocated job=7 gpus=[0, 1]")
        assert lines[1].endswith(" info    submitted jobs=3 ids=10-12 by=alice gpus=1")
    finally:
        store.dispose()


def test_json_lines_and_levels() -> None:
    out = io.StringIO()
    log = ServiceLog("warning", "json", out)
    log([(0.5, "allocated", 3, {}), (1.25, "node_down", None, {"node": "n1", "why": "gone"})])
    (line,) = out.getvalue().splitlines()
    assert json.loads(line) == {
        "time": "1970-01-01T00:00:01.250Z",
        "level": "warning",
        "event": "node_down",
        "node": "n1",
        "why": "gone",
    }
    assert stamp(0.0) == "1970-01-01T00:00:00.000Z"


def test_a_jobs_words_never_split_a_line() -> None:
    out = io.StringIO()
    ServiceLog("info", "text", out)([(0.0, "attempt_end", 1, {"detail": "bad\nline x=1"})])
    assert out.getvalue().count("\n") == 1 and 'detail="bad\\nline x=1"' in out.getvalue()


def test_a_services_day_in_its_log(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "state", policy="fifo", policy_options={})
    out = io.StringIO()
    harness.store.echo = ServiceLog("info", "text", out)
    try:
        job = harness.submit(command=["sh", "-c", "exit 3"], max_retries=0)
        harness.wait_state(job["id"], {"FAILED"}, 60)
        node = harness.client.get("/v1/nodes", headers=auth("root")).json()[0]["name"]
        answer = harness.client.post(
            f"/v1/nodes/{node}/drain", json={"reason": "fan"}, headers=auth("root")
        )
        assert answer.status_code == 200, answer.text
        kinds = [line.split()[2] for line in out.getvalue().splitlines()]
        for kind in ("submitted", "allocated", "start", "attempt_end", "node_drained"):
            assert kind in kinds, out.getvalue()
        text = out.getvalue()
        assert "cause=user_error" in text and "exit_code=3" in text
        assert f"node={node} by=root reason=fan" in text
    finally:
        harness.close()
