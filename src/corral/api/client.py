"""A small client of the REST API (what the CLI verbs use).

Every failure becomes a :class:`~corral.errors.CorralError` whose message a
person can act on: the field a 422 names, a wrong token, a job of someone
else, a service that is not running.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from corral.errors import CorralError

DEFAULT_URL = "http://127.0.0.1:8470"


def describe_error(response: httpx.Response) -> str:
    """One line from an error answer (pydantic's 422 list included)."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text.strip() or response.reason_phrase
    if isinstance(detail, list):
        parts = []
        for err in detail:
            loc = [str(p) for p in err.get("loc", []) if p not in ("body", "query", "path")]
            where = f"field '{'.'.join(loc)}': " if loc else ""
            parts.append(f"{where}{err.get('msg', 'invalid')}")
        detail = "; ".join(parts)
    hint = ""
    if response.status_code == 401:
        hint = " (set CORRAL_TOKEN or pass --token)"
    return f"{detail}{hint} [HTTP {response.status_code}]"


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0):
        self.url = (url or os.environ.get("CORRAL_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("CORRAL_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # loading the CA bundle costs a tenth of a second per command: only for https
        secure = self.url.lower().startswith("https:")
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, verify=secure
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise CorralError(
                f"cannot reach the corral service at {self.url} ({exc}); is 'corral serve' running?"
            ) from None
        if response.status_code >= 400:
            raise CorralError(describe_error(response))
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.call(method, path, **kwargs).json()

    # convenience
    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.json("POST", "/v1/jobs", json=spec)

    def job(self, job_id: int) -> dict[str, Any]:
        return self.json("GET", f"/v1/jobs/{job_id}")

    def jobs(self, state: str | None = None, mine: bool = False) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"mine": mine}
        if state:
            params["state"] = state
        return self.json("GET", "/v1/jobs", params=params)

    def history(
        self, of: str | None = None, all_users: bool = False, since: float = 0.0
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"all_users": all_users, "since": since, "limit": 100000}
        if of:
            params["of"] = of
        return self.json("GET", "/v1/history", params=params)

    def action(self, job_id: int, verb: str) -> dict[str, Any]:
        return self.json("POST", f"/v1/jobs/{job_id}/{verb}")

    def set_priority(self, job_id: int, priority: int) -> dict[str, Any]:
        return self.json("PUT", f"/v1/jobs/{job_id}/priority", json={"priority": priority})

    def logs(self, job_id: int, offset: int = 0, attempt: int | None = None) -> httpx.Response:
        params: dict[str, Any] = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return self.call("GET", f"/v1/jobs/{job_id}/logs", params=params)

    def nodes(self) -> list[dict[str, Any]]:
        return self.json("GET", "/v1/nodes")

    def node_state(self, name: str, verb: str, reason: str | None = None) -> dict[str, Any]:
        """``verb`` is ``drain`` or ``resume`` (admins only)."""
        return self.json("POST", f"/v1/nodes/{name}/{verb}", json={"reason": reason})
