"""The REST API: authentication, ownership, validation (422 names the field)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from corral.api.app import create_app
from corral.runtime.storage.store import Store
from tests.runtime.harness import PY, auth, make_config


@pytest.fixture
def api(tmp_path: Path, store_url: str | None) -> Iterator[tuple[TestClient, Store]]:
    config = make_config(tmp_path / "state", store=store_url)
    store = Store(config.store_url)
    yield TestClient(create_app(config, store)), store
    store.dispose()


GOOD = {"name": "ok", "command": [PY, "-c", "pass"], "gpus": 1}


def count_jobs(client: TestClient) -> int:
    return len(client.get("/v1/jobs", headers=auth("root")).json())


def test_openapi_is_served(api: tuple[TestClient, Store]) -> None:
    client, _ = api
    paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/jobs" in paths and "/v1/jobs/{job_id}/cancel" in paths
    assert client.get("/v1/health").json()["status"] == "ok"


def test_the_api_docs_work_offline(api: tuple[TestClient, Store]) -> None:
    """/docs loads every script, style and icon from the service itself (the package
    ships Swagger UI): nothing from a CDN, no validator badge from the internet."""
    import re

    client, _ = api
    page = client.get("/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(a.startswith("/") for a in assets), assets
    for asset in assets:
        assert client.get(asset).status_code == 200, asset
    assert '"validatorUrl": null' in page.text or "validatorUrl: null" in page.text
    assert "https://" not in page.text.replace("https://swagger.io", "")
    assert client.get("/redoc").status_code == 404  # (it would fetch its script from a CDN)


def test_missing_or_wrong_token_is_401(api: tuple[TestClient, Store]) -> None:
    client, _ = api
    assert client.get("/v1/jobs").status_code == 401
    r = client.get("/v1/jobs", headers={"Authorization": "Bearer nope-nope-nope"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert client.post("/v1/jobs", json=GOOD).status_code == 401
    assert count_jobs(client) == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": -1}, "gpus"),
        ({"command": "python train.py"}, "command"),
        ({"command": []}, "command"),
        ({"env": {"CORRAL_JOB_ID": "7"}}, "env"),
        ({"wall_time": "soon"}, "wall_time"),
        ({"name": "has space"}, "name"),
        ({"colour": "blue"}, "colour"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_bad_specs_are_422_with_the_field_and_store_nothing(
    api: tuple[TestClient, Store], change: dict[str, object], field: str
) -> None:
    client, _ = api
    r = client.post("/v1/jobs", json={**GOOD, **change}, headers=auth("alice"))
    assert r.status_code == 422
    assert any(field in [str(p) for p in err["loc"]] for err in r.json()["detail"])
    assert count_jobs(client) == 0


def test_users_act_on_their_own_jobs_admins_on_all(api: tuple[TestClient, Store]) -> None:
    client, _ = api
    job = client.post("/v1/jobs", json=GOOD, headers=auth("alice")).json()
    assert job["user"] == "alice" and job["status"] == "PENDING"
    url = f"/v1/jobs/{job['id']}"
    assert client.get(url, headers=auth("bob")).status_code == 200  # the queue is visible
    for verb in ("cancel", "suspend"):
        r = client.post(f"{url}/{verb}", headers=auth("bob"))
        assert r.status_code == 403 and "alice" in r.json()["detail"]
    assert client.get(f"{url}/logs", headers=auth("bob")).status_code == 403
    r = client.put(f"{url}/priority", json={"priority": 3}, headers=auth("bob"))
    assert r.status_code == 403
    assert client.get(url, headers=auth("alice")).json()["priority"] == 0
    assert client.post(f"{url}/cancel", headers=auth("root")).status_code == 200


def test_only_admins_raise_priority(api: tuple[TestClient, Store]) -> None:
    client, _ = api
    r = client.post("/v1/jobs", json={**GOOD, "priority": 5}, headers=auth("alice"))
    assert r.status_code == 403 and "admin" in r.json()["detail"]
    assert count_jobs(client) == 0
    job = client.post("/v1/jobs", json=GOOD, headers=auth("alice")).json()
    url = f"/v1/jobs/{job['id']}/priority"
    assert client.put(url, json={"priority": 1}, headers=auth("alice")).status_code == 403
    r = client.put(url, json={"priority": -3}, headers=auth("alice"))  # lowering is fine
    assert r.status_code == 200 and r.json()["priority"] == -3
    r = client.put(url, json={"priority": 7}, headers=auth("root"))
    assert r.status_code == 200 and r.json()["priority"] == 7
    r = client.post("/v1/jobs", json={**GOOD, "priority": 9}, headers=auth("root"))
    assert r.status_code == 201 and r.json()["priority"] == 9


def test_unknown_job_is_404_and_wrong_state_409(api: tuple[TestClient, Store]) -> None:
    client, _ = api
    assert client.get("/v1/jobs/99", headers=auth("alice")).status_code == 404
    job = client.post("/v1/jobs", json=GOOD, headers=auth("alice")).json()
    r = client.post(f"/v1/jobs/{job['id']}/resume", headers=auth("alice"))
    assert r.status_code == 409


def test_out_of_range_ids_and_malformed_bodies_are_client_errors(
    api: tuple[TestClient, Store],
) -> None:
    """Found by fuzzing the OpenAPI schema: these were 500s (integer overflow)."""
    client, _ = api
    huge = 2**70
    for method, url in [
        ("GET", f"/v1/jobs/{huge}"),
        ("POST", f"/v1/jobs/{huge}/cancel"),
        ("GET", f"/v1/events?after={huge}"),
        ("GET", f"/v1/jobs/1/logs?offset={huge}"),
    ]:
        r = client.request(method, url, headers=auth("root"))
        assert r.status_code == 422, (url, r.status_code)
    r = client.post(
        "/v1/jobs",
        content=b"a\xff{",
        headers={**auth("alice"), "Content-Type": "application/json"},
    )
    assert r.status_code in (400, 422) and "detail" in r.json()
    documented = client.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}/cancel"]["post"]
    assert {"401", "403", "404", "409"} <= set(documented["responses"])


def test_heartbeat_needs_the_attempt_token(api: tuple[TestClient, Store]) -> None:
    client, _ = api
    job = client.post("/v1/jobs", json=GOOD, headers=auth("alice")).json()
    r = client.post(
        f"/v1/jobs/{job['id']}/heartbeat", json={"attempt": 1, "step": 3}, headers=auth("alice")
    )
    assert r.status_code == 401


def test_gpu_type_and_size_are_checked_against_the_cluster(tmp_path: Path) -> None:
    from tests.runtime.harness import Harness

    h = Harness(tmp_path / "state")
    try:
        for change, field in (
            ({"gpu_type": "A100"}, "gpu_type"),
            ({"gpus": 5}, "gpus"),
            ({"gpus": 3, "gpu_type": "K80"}, "gpus"),
        ):
            r = h.client.post("/v1/jobs", json={**GOOD, **change}, headers=auth("alice"))
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == ["body", field]
        assert count_jobs(h.client) == 0
    finally:
        h.close()
