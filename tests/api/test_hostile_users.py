"""What one ordinary user could do to the others through the API, each refused:
guessing tokens, numbers the store cannot hold, paths that loop, reading others'
commands, oversized bodies sent in chunks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.api.app import create_app
from corral.runtime.storage.store import AttemptRow, Store
from tests.runtime.harness import PY, auth, make_config

GOOD = {"name": "ok", "command": [PY, "-c", "pass", "--password=s3cret"], "gpus": 1}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, Store]]:
    config = make_config(tmp_path / "state")
    store = Store(config.store_url)
    yield TestClient(create_app(config, store)), store
    store.dispose()


def test_an_address_that_guesses_tokens_is_locked_out_with_back_off(
    api: tuple[TestClient, Store],
) -> None:
    client, _ = api
    clock = Clock()
    client.app.state.auth_guard.clock = clock  # type: ignore[attr-defined]
    assert client.get("/v1/jobs", headers=auth("alice")).status_code == 200  # seen before
    wrong = {"Authorization": "Bearer wrong-token-0"}
    codes = [client.get("/v1/jobs", headers=wrong).status_code for _ in range(25)]
    assert codes[:20] == [401] * 20 and set(codes[20:]) == {429}
    locked = client.get("/v1/jobs", headers=wrong)
    assert locked.status_code == 429 and locked.headers["retry-after"] == "1"
    # a right token not yet seen from this address waits too (a guess never is one) ...
    assert client.get("/v1/jobs", headers=auth("bob")).status_code == 429
    # ... but one that worked from here before goes on: nobody on a shared host is locked out
    assert client.get("/v1/jobs", headers=auth("alice")).status_code == 200
    clock.now += 1.5
    assert client.get("/v1/jobs", headers=auth("bob")).status_code == 200
    for _ in range(20):  # the next lock-out in a row lasts twice as long
        client.get("/v1/jobs", headers=wrong)
    assert client.get("/v1/jobs", headers=wrong).headers["retry-after"] == "2"


def test_a_token_seen_from_an_address_is_trusted_there_after_a_restart(tmp_path: Path) -> None:
    """After a restart a lock-out once stopped every user of a shared host: what was
    seen is kept (hashed, private) in the state directory, and still trusted."""
    config = make_config(tmp_path / "state")
    store = Store(config.store_url)
    try:
        before = TestClient(create_app(config, store))
        assert before.get("/v1/jobs", headers=auth("alice")).status_code == 200
        kept = config.state_dir / "trusted-tokens"
        assert kept.stat().st_mode & 0o777 == 0o600
        assert "alice" not in kept.read_text() and len(kept.read_text().split()) == 1
        after = TestClient(create_app(config, store))  # a restart: a new guard
        wrong = {"Authorization": "Bearer wrong-token-0"}
        codes = [after.get("/v1/jobs", headers=wrong).status_code for _ in range(21)]
        assert codes[-1] == 429
        assert after.get("/v1/jobs", headers=auth("alice")).status_code == 200
        assert after.get("/v1/jobs", headers=auth("bob")).status_code == 429  # never seen
    finally:
        store.dispose()


def test_numbers_the_store_cannot_hold_are_422(tmp_path: Path) -> None:
    from tests.runtime.harness import Harness

    service = Harness(tmp_path / "state", policy="fifo", policy_options={})
    try:
        job = service.submit(command=[PY, "-c", "import time; time.sleep(30)"])
        service.wait_state(job["id"], {"RUNNING"})
        attempt = service.attempts()[-1]
        assert isinstance(attempt, AttemptRow)
        url = f"/v1/jobs/{job['id']}/heartbeat"
        for body in (
            {"attempt": 1, "step": 3, "batch_size": 10**30},
            {"attempt": 1, "step": 1e300},
            {"attempt": 10**30, "step": 1},
            {"attempt": 1, "step": 1, "throughput": -1},
        ):
            answer = service.client.post(url, json=body, headers={"Authorization": "Bearer x"})
            assert answer.status_code == 422, (body, answer.text)
        answer = service.client.post(
            "/v1/jobs", json={**GOOD, "priority": 10**30}, headers=auth("alice")
        )
        assert answer.status_code == 422
    finally:
        service.close()


def test_paths_that_loop_are_422(api: tuple[TestClient, Store], tmp_path: Path) -> None:
    client, _ = api
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for field in ("workdir", "output"):
        answer = client.post(
            "/v1/jobs", json={**GOOD, field: str(loop / "x")}, headers=auth("alice")
        )
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"][0]["loc"] == ["body", field]


def test_a_missing_workdir_is_refused(api: tuple[TestClient, Store], tmp_path: Path) -> None:
    client, _ = api
    answer = client.post(
        "/v1/jobs", json={**GOOD, "workdir": str(tmp_path / "nowhere")}, headers=auth("alice")
    )
    assert answer.status_code == 422
    assert "can enter (or it is missing)" in answer.json()["detail"][0]["msg"]


@pytest.mark.parametrize("private", [True, False])
def test_private_data_hides_other_users_commands(tmp_path: Path, private: bool) -> None:
    config = make_config(tmp_path / "state", private_data=private)
    store = Store(config.store_url)
    client = TestClient(create_app(config, store))
    try:
        spec = {**GOOD, "env": {"TOKEN": "abc"}, "stage": ["cp", "/data/secret", "/tmp"]}
        job = client.post("/v1/jobs", json=spec, headers=auth("alice")).json()
        for who, sees in (("alice", True), ("root", True), ("bob", not private)):
            listed = client.get("/v1/jobs", headers=auth(who)).json()
            assert (listed[0]["command"] == GOOD["command"]) == sees, who
            brief = client.get("/v1/jobs?fields=id,command", headers=auth(who)).json()
            assert (brief[0]["command"] == GOOD["command"]) == sees, who
            shown = client.get(f"/v1/jobs/{job['id']}", headers=auth(who)).json()
            assert ("s3cret" in str(shown)) == sees, who
            assert ("/data/secret" in str(shown)) == sees, who
            assert "abc" not in str(shown) or who == "alice" or who == "root"
        if private:
            shown = client.get(f"/v1/jobs/{job['id']}", headers=auth("bob")).json()
            assert shown["command"] == ["(hidden)"] and shown["spec"]["env"] == "(hidden)"
            assert shown["user"] == "alice" and shown["gpus"] == 1  # the rest is public
    finally:
        store.dispose()


def test_an_oversized_chunked_body_is_413(api: tuple[TestClient, Store]) -> None:
    client, _ = api

    def chunks() -> Iterator[bytes]:
        yield b'{"command": ["true"], "name": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    answer = client.post(
        "/v1/jobs",
        content=chunks(),
        headers={**auth("alice"), "Content-Type": "application/json"},
    )
    assert answer.status_code == 413, answer.text
    assert answer.json()["detail"].startswith("the request body is over")
    small = client.post(
        "/v1/jobs",
        content=iter([b'{"command": ["true"]', b"}"]),
        headers={**auth("alice"), "Content-Type": "application/json"},
    )
    assert small.status_code == 201, small.text
