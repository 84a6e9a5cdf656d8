"""A small client of the REST API (what the CLI verbs use).

Every failure becomes a :class:`~corral.errors.CorralError` whose message a
person can act on: the field a 422 names, a wrong token, a job of someone
else, a service that is not running.
"""

from __future__ import annotations

import os

from corral import wire_json
from corral.api.http_wire import Headers, PlainConnection, SecureConnection, split_url
from corral.errors import (
    CorralError,
    NotFound,
    OperationFailed,
    PermissionDenied,
    Throttled,
    Unreachable,
)

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from corral.api.http_wire import Transport

DEFAULT_URL = "http://127.0.0.1:8470"


class Answer:
    """One HTTP answer: status, headers (case-insensitive ``get``) and body. (A plain
    class: ``dataclasses`` and ``typing`` would be a third of a quick command's imports.)"""

    __slots__ = ("content", "headers", "reason_phrase", "status_code")

    def __init__(self, status_code: int, reason_phrase: str, headers: Headers, content: bytes):
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return wire_json.loads(self.content)


def describe_error(response: Answer) -> str:
    """One line from an error answer (pydantic's 422 list included)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
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


def error_of(response: Answer) -> CorralError:
    """The error an error answer means, of the kind its status says (the exit code)."""
    status = response.status_code
    kind: type[CorralError] = CorralError  # 400, 422: the request was wrong
    if status in (401, 403):
        kind = PermissionDenied
    elif status == 404:
        kind = NotFound
    elif status == 429:
        kind = Throttled
    elif status == 409 or status >= 500:
        kind = OperationFailed
    return kind(describe_error(response))


UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
"""What a query keeps as it is (``urllib.parse.quote_plus``'s safe set)."""


def _quoted(text: str) -> str:
    if all(c in UNRESERVED for c in text):
        return text
    return "".join(
        chr(b) if chr(b) in UNRESERVED else "+" if b == 32 else f"%{b:02X}"
        for b in text.encode("utf-8")
    )


def _query(params: dict[str, Any] | None) -> str:
    """``?key=value&...`` as ``urllib.parse.urlencode`` writes it (that module costs
    4 ms of a quick command; a test holds the two equal), booleans as JSON's."""
    if not params:
        return ""
    plain = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}
    return "?" + "&".join(f"{_quoted(k)}={_quoted(v)}" for k, v in plain.items())


PAGE = 20000
"""Jobs asked for per page when listing them all (a listing of 10,000 is one request)."""


DEFAULT_SOCKET = "/run/corral/corral.sock"
"""Where a service on this host answers without tokens, when its config says so."""


def local_socket(url: str | None, given: str | None) -> str | None:
    """The Unix socket to call the service through: the one given (``--socket``), else
    ``CORRAL_SOCKET``, else the default one when it exists and no URL was given (by
    argument or ``CORRAL_URL``); None: over TCP to the URL."""
    if given:
        return given
    named = os.environ.get("CORRAL_SOCKET")
    if named:
        return named
    if url is None and not os.environ.get("CORRAL_URL") and os.path.exists(DEFAULT_SOCKET):
        return DEFAULT_SOCKET
    return None


class Client:
    """Calls on one kept-alive connection, with the standard library only: a CLI
    command starts faster without an HTTP package to import (plain HTTP without
    ``http.client`` either: :mod:`corral.api.http_wire`)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        socket: str | None = None,
    ):
        self.socket = local_socket(url, socket)
        """The service's Unix socket this client calls through (None: its URL)."""
        self.url = (url or os.environ.get("CORRAL_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("CORRAL_TOKEN")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        parts = split_url(self.url)
        if parts is None or parts[0] not in ("http", "https"):
            raise CorralError(f"'{self.url}' is not a service URL (http://host:port)")
        scheme, self._host, self._port, path = parts
        self._secure = scheme == "https"
        self._base = path.rstrip("/")
        self._timeout = timeout
        self._conn: Transport | None = None

    def websocket_target(self, path: str) -> tuple[str, dict[str, str], str | None]:
        """What a WebSocket to ``path`` of the service needs: its URI, the headers that
        say who calls, and the Unix socket to go through (None: the URI's host)."""
        scheme = "wss" if self._secure else "ws"
        port = f":{self._port}" if self._port else ""
        return f"{scheme}://{self._host}{port}{self._base}{path}", dict(self._headers), self.socket

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> Transport:
        if self._conn is None:
            if self._secure:
                self._conn = SecureConnection(self._host, self._port, self._timeout)
            else:
                self._conn = PlainConnection(
                    self._host, self._port or 80, self._timeout, self.socket
                )
        return self._conn

    def call(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json: Any = None,
    ) -> Answer:
        body = None if json is None else wire_json.dumps(json).encode()
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        target = self._base + path + _query(params)
        if not target.isascii():  # (a name in another script: sent percent-encoded)
            from urllib.parse import quote

            target = quote(target, safe="/?&=%+,:;@")
        # (a line break would end the request line or a header early; a token is
        # never repeated in the message, which may reach a shared terminal or log)
        if not target.isprintable() or " " in target:
            raise CorralError(
                f"{target[:60]!r} cannot be sent: it holds spaces or control characters"
            )
        if not all(v.isprintable() and v.isascii() for v in headers.values()):
            raise CorralError(
                "the token cannot be sent: it holds control characters or characters other "
                "than ASCII (CORRAL_TOKEN or --token)"
            )
        for attempt in (1, 2):
            reused = self._conn is not None
            conn = self._connection()
            try:
                response = Answer(*conn.request(method, target, body, headers))
                break
            except (BrokenPipeError, ConnectionResetError) as exc:
                self.close()  # a kept-alive connection the server had closed: once more
                if attempt == 2 or not reused:
                    raise self._unreachable(exc) from None
            except OSError as exc:
                self.close()
                raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise error_of(response)
        return response

    def _unreachable(self, exc: BaseException) -> CorralError:
        where = self.url if self.socket is None else f"{self.socket} (its Unix socket)"
        return Unreachable(
            f"cannot reach the corral service at {where} ({exc}); is 'corral serve' running?"
        )

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.call(method, path, **kwargs).json()

    # convenience
    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.json("POST", "/v1/jobs", json=spec)
        return out

    def submit_many(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Submit jobs in batches of up to 1,000 (each batch all or nothing)."""
        out: list[dict[str, Any]] = []
        for k in range(0, len(specs), 1000):
            out += self.json("POST", "/v1/jobs/batch", json={"jobs": specs[k : k + 1000]})
        return out

    def job(self, job_id: int) -> dict[str, Any]:
        out: dict[str, Any] = self.json("GET", f"/v1/jobs/{job_id}")
        return out

    def jobs(
        self, state: str | None = None, mine: bool = False, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Every job that matches (page after page), or the first ``limit``."""
        return self.jobs_counted(state, mine, limit)[0]

    def jobs_counted(
        self,
        state: str | None = None,
        mine: bool = False,
        limit: int | None = None,
        fields: list[str] | None = None,
        of: str | None = None,
        name: str | None = None,
        ids: str | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """The jobs that match (all, or the first ``limit``) and how many match in all;
        with ``fields``, each job holds those only. ``of``, ``name`` and ``ids`` are
        comma-separated users, job names and job ids to keep."""
        out: list[dict[str, Any]] = []
        total = 0
        for page, counted in self._job_pages(state, mine, limit, fields, of, name, ids, "rows"):
            out += page
            total = counted
        return out, total

    def job_table(
        self,
        fields: list[str],
        state: str | None = None,
        mine: bool = False,
        limit: int | None = None,
        of: str | None = None,
        name: str | None = None,
        ids: str | None = None,
    ) -> tuple[dict[str, list[Any]], int]:
        """As :meth:`jobs_counted`, a list per field (the jobs in the same order in
        each): ten thousand jobs arrive in a third of the bytes, read in a third of
        the time."""
        out: dict[str, list[Any]] = {field: [] for field in fields}
        total = 0
        for page, counted in self._job_pages(state, mine, limit, fields, of, name, ids, "columns"):
            for field, column in page.items():
                out.setdefault(field, []).extend(column)
            total = counted
        return out, total

    def _job_pages(
        self,
        state: str | None,
        mine: bool,
        limit: int | None,
        fields: list[str] | None,
        of: str | None,
        name: str | None,
        ids: str | None,
        layout: str,
    ) -> Iterator[tuple[Any, int]]:
        """Each page of a listing, with how many match in all."""
        params: dict[str, Any] = {"mine": mine}
        for key, given in (("state", state), ("of", of), ("name", name), ("ids", ids)):
            if given:
                params[key] = given
        if fields:
            params["fields"] = ",".join(fields)
        if layout != "rows":
            params["layout"] = layout
        listed = 0
        while True:
            want = PAGE if limit is None else min(PAGE, limit - listed)
            answer = self.call("GET", "/v1/jobs", params={**params, "limit": want})
            page = answer.json()
            listed += len(page) if layout == "rows" else len(next(iter(page.values()), ()))
            yield page, int(answer.headers.get("X-Total-Count") or listed)
            cursor = answer.headers.get("X-Next-After")
            if cursor is None or (limit is not None and listed >= limit):
                return
            params["after"] = int(cursor)

    def history(
        self,
        of: str | None = None,
        all_users: bool = False,
        since: float = 0.0,
        until: float | None = None,
        state: str | None = None,
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"all_users": all_users, "since": since, "limit": 100000}
        if of:
            params["of"] = of
        if until is not None:
            params["until"] = until
        if state:
            params["state"] = state
        out: list[dict[str, Any]] = self.json("GET", "/v1/history", params=params)
        return out

    def action(self, job_id: int, verb: str) -> dict[str, Any]:
        out: dict[str, Any] = self.json("POST", f"/v1/jobs/{job_id}/{verb}")
        return out

    def act_on_many(self, verb: str, selection: dict[str, Any]) -> dict[str, Any]:
        """Cancel, suspend, hold, release or resume every job a selection names (ids,
        ``tasks`` as [array id, index], ``user``, ``states``, ``name``, ``vc``)."""
        out: dict[str, Any] = self.json("POST", f"/v1/jobs/actions/{verb}", json=selection)
        return out

    def set_priority(self, job_id: int, priority: int) -> dict[str, Any]:
        body = {"priority": priority}
        out: dict[str, Any] = self.json("PUT", f"/v1/jobs/{job_id}/priority", json=body)
        return out

    def logs(self, job_id: int, offset: int = 0, attempt: int | None = None) -> Answer:
        params: dict[str, Any] = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        return self.call("GET", f"/v1/jobs/{job_id}/logs", params=params)

    def script(self, job_id: int) -> str:
        """The batch script a job was submitted with (404 when it has none)."""
        return self.call("GET", f"/v1/jobs/{job_id}/script").content.decode("utf-8", "replace")

    def nodes(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.json("GET", "/v1/nodes")
        return out

    def node_state(self, name: str, verb: str, reason: str | None = None) -> dict[str, Any]:
        """``verb`` is ``drain`` or ``resume`` (admins only)."""
        out: dict[str, Any] = self.json("POST", f"/v1/nodes/{name}/{verb}", json={"reason": reason})
        return out
