"""What the API refuses before a route runs: oversized bodies, and validation errors
answered as plain JSON (never a 500 because the offending input was NaN or huge)."""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.runtime.loop.admission import Refused

MAX_BODY = 1 << 20
"""Bytes a request body may have (a job spec is a few KiB at most)."""


class BodyLimit:
    """Answer 413 to a body over ``limit`` bytes, by its Content-Length or as it streams."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > self.limit:
                    await self._refuse(send)
                    return
        # no length given (a chunked body): read it whole first, up to the limit, so an
        # oversized one is answered 413 before any route (whose JSON parsing would
        # otherwise turn the cut into a 400) sees a byte of it
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"the request body is over {self.limit} bytes"},
            status_code=status.HTTP_413_CONTENT_TOO_LARGE,
        )
        await response({"type": "http"}, _nothing, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """422 with pydantic's list of errors, each its place, message and kind only: the
    input itself is left out (it may be NaN, which JSON cannot carry, or megabytes)."""
    assert isinstance(exc, RequestValidationError)
    detail: list[dict[str, Any]] = []
    for error in exc.errors():
        detail.append(
            {
                "loc": [str(p) if not isinstance(p, int) else p for p in error.get("loc", ())],
                "msg": str(error.get("msg", "invalid")),
                "type": str(error.get("type", "value_error")),
            }
        )
    return JSONResponse({"detail": detail}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


async def refused_error(_request: Request, exc: Exception) -> JSONResponse:
    """A submission admission refused: its status, and pydantic's shape for a field's
    fault (so clients read every validation error one way), the message otherwise."""
    assert isinstance(exc, Refused)
    detail: Any = exc.message
    if exc.where:
        detail = [{"loc": ["body", *exc.where], "msg": exc.message, "type": "value_error"}]
    return JSONResponse({"detail": detail}, status_code=exc.status)


def out_of_space(exc: BaseException) -> bool:
    """Whether a store error is its disk being full (SQLite's and PostgreSQL's words)."""
    text = str(exc).lower()
    orig = getattr(exc, "orig", None)
    return (
        "database or disk is full" in text
        or "no space left on device" in text
        or "could not extend file" in text
        or (isinstance(orig, OSError) and orig.errno == errno.ENOSPC)
    )


def store_error_handler(store_url: str) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """An answer for a request the store could not carry out: 507 naming the disk when
    it is full (nothing was changed; the service recovers by itself once there is
    space again), 503 for any other trouble of the store; never a bare 500."""
    where = (
        str(Path(store_url.removeprefix("sqlite:///")).parent)
        if store_url.startswith("sqlite:///")
        else "the store's database server"
    )

    async def answer(_request: Request, exc: Exception) -> JSONResponse:
        if out_of_space(exc):
            return JSONResponse(
                {
                    "detail": f"the service's store is out of disk space ({where} is full): "
                    "nothing was changed; jobs already running go on, and requests "
                    "succeed again once space is freed there"
                },
                status_code=507,
            )
        return JSONResponse(
            {
                "detail": f"the service's store cannot be written now ({type(exc).__name__}); "
                "nothing was changed: try again shortly"
            },
            status_code=503,
            headers={"Retry-After": "5"},
        )

    return answer
