"""Slurm's DefaultTime and MaxTime: a job that gives no wall time gets the most
specific default (its partition's, its VC's, the service's) or else the tightest
maximum; a job over any maximum that applies is refused, the limit and where it
is set named; a config whose default passes its maximum is refused at start.
And a job's weight capped for users as its priority is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from corral.api.app import create_app
from corral.runtime.jobspec.config import Partition, TimeLimits
from corral.runtime.storage.store import JobRow, Store
from tests.runtime.harness import auth, make_config


def client(tmp_path: Path, **config: Any) -> tuple[TestClient, Store]:
    made = make_config(tmp_path / "state", **config)
    store = Store(made.store_url)
    return TestClient(create_app(made, store)), store


def wall_time(api: TestClient, store: Store, **spec: Any) -> Any:
    """The wall time a job is stored with, or the refusal's status and text."""
    answer = api.post(
        "/v1/jobs", json={"command": ["true"], "gpus": 1, **spec}, headers=auth("alice")
    )
    if answer.status_code != 201:
        return answer.status_code, str(answer.json())
    with store.session() as s:
        row = s.get(JobRow, answer.json()["id"])
        assert row is not None
        return row.spec["wall_time"]


def test_without_limits_a_job_keeps_what_it_gives(tmp_path: Path) -> None:
    api, store = client(tmp_path)
    try:
        assert wall_time(api, store) is None
        assert wall_time(api, store, wall_time="3-00:00:00") == 3 * 86400
    finally:
        store.dispose()


def test_defaults_and_maxima_of_the_service_a_vc_and_a_partition(tmp_path: Path) -> None:
    api, store = client(
        tmp_path,
        vcs={"lab": 2, "prod": 2},
        time_limits=TimeLimits(default_time="1h", max_time="1-00:00:00"),
        vc_time_limits={"lab": TimeLimits(max_time="4h")},
        partitions={
            "short": Partition(vc="prod", default_time="10m", max_time="30m"),
            "debug": Partition(vc="lab", default_time="8h"),  # (the VC's 4 h still holds)
        },
    )
    try:
        assert wall_time(api, store) == 3600  # the service's default
        assert wall_time(api, store, vc="lab") == 3600  # within the VC's maximum
        assert wall_time(api, store, partition="short") == 600
        assert wall_time(api, store, partition="debug") == 4 * 3600  # capped by lab's
        assert wall_time(api, store, wall_time="20h") == 20 * 3600
        status, said = wall_time(api, store, wall_time="25h")
        assert status == 422 and "1-00:00:00" in said and "this service" in said, said
        assert "wall_time" in said
        status, said = wall_time(api, store, vc="lab", wall_time="5h")
        assert "04:00:00" in said and "virtual cluster 'lab'" in said, said
        status, said = wall_time(api, store, partition="short", wall_time="31m")
        assert "00:30:00" in said and "partition 'short'" in said, said
        assert wall_time(api, store, partition="short", wall_time="30m") == 1800
    finally:
        store.dispose()


def test_a_maximum_alone_is_a_job_s_limit_when_it_gives_none(tmp_path: Path) -> None:
    """As Slurm gives a partition's MaxTime to a job when DefaultTime is unset."""
    api, store = client(tmp_path, time_limits=TimeLimits(max_time=7200))
    try:
        assert wall_time(api, store) == 7200
        assert wall_time(api, store, wall_time=60) == 60
    finally:
        store.dispose()


def test_a_default_longer_than_its_maximum_is_refused_in_the_config() -> None:
    with pytest.raises(ValidationError, match="default_time is longer than max_time"):
        TimeLimits(default_time="2h", max_time="1h")
    with pytest.raises(ValidationError):
        Partition(vc="x", max_time="soon")


def test_a_users_weight_is_capped_as_priority_is(tmp_path: Path) -> None:
    """A weight is a share under the weighted policies: above the cap (1 unless the
    config says) a user's job is refused (403, the setting named); lower is fine;
    an admin's is not capped; a user's own ``max_weight`` overrides the service's."""
    from corral.runtime.jobspec.config import UserConfig
    from tests.runtime.harness import TOKENS

    users = [
        UserConfig(name="alice", token=TOKENS["alice"]),
        UserConfig(name="bob", token=TOKENS["bob"], max_weight=4),
        UserConfig(name="root", token=TOKENS["root"], admin=True),
    ]
    api, store = client(tmp_path, users=users)

    def post(user: str, weight: float) -> Any:
        body = {"command": ["true"], "gpus": 1, "weight": weight}
        return api.post("/v1/jobs", json=body, headers=auth(user))

    try:
        refused = post("alice", 1000)
        assert refused.status_code == 403, refused.text
        assert "max_user_weight" in refused.text and "1000" in refused.text
        assert post("alice", 1).status_code == post("alice", 0.5).status_code == 201
        assert post("bob", 4).status_code == 201
        assert "max_weight" in post("bob", 4.5).text
        assert post("root", 1000).status_code == 201
    finally:
        store.dispose()
