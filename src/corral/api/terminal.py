"""The terminal of an interactive allocation, relayed: ``/v1/jobs/{id}/terminal`` is a
WebSocket between the job's owner (``corral alloc``) and the terminal the job's
process offers on its host (:mod:`corral.runtime.execution.pty_host`).

The service passes bytes both ways without reading them: the client's frames to
the terminal, the terminal's output to the client. The caller is known as for
every route (a bearer token, or the kernel's word on the Unix socket); only the
job's owner attaches (Slurm's ``sattach`` is the owner's too). A refusal is
sent as the WebSocket's close, its code 4000 plus the HTTP status it would have
been (4403, 4404, 4409) and its reason the message, so the client can say it;
a session joined to its terminal is first sent the text ``attached``.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, cast

from fastapi import APIRouter, HTTPException, Request, WebSocket, status
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from corral.api.common import Context, caller, job_or_404
from corral.model.jobs import JobStatus
from corral.runtime.execution.pty_host import ATTACHED, SOCKET_NAME
from corral.runtime.jobspec.config import UserConfig

router = APIRouter()
CLOSE_BASE = 4000
"""A refusal's close code is this plus the HTTP status it stands for."""


def terminal_socket(ctx: Context, job_id: int, user: UserConfig) -> Path:
    """Where the job's terminal is, or the HTTP error saying why it cannot be had."""
    with ctx.store.session() as s:
        row = job_or_404(s, job_id)
        if row.user != user.name:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"job {job_id} is {row.user}'s: only its owner attaches to its terminal",
            )
        if not (row.spec or {}).get("interactive"):
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"job {job_id} is not an interactive allocation (submit with corral alloc)",
            )
        if row.status != JobStatus.RUNNING:
            raise HTTPException(
                status.HTTP_409_CONFLICT, f"job {job_id} is {row.status}, not running"
            )
    return ctx.config.job_root / str(job_id) / SOCKET_NAME


def _credentials(websocket: WebSocket) -> HTTPAuthorizationCredentials | None:
    scheme, _, token = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    return HTTPAuthorizationCredentials(scheme="Bearer", credentials=token.strip())


async def _relay_up(websocket: WebSocket, writer: asyncio.StreamWriter) -> None:
    """The client's frames, to the terminal."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes") or (message.get("text") or "").encode()
        if data:
            writer.write(data)
            await writer.drain()


async def _relay_down(websocket: WebSocket, reader: asyncio.StreamReader) -> None:
    """The terminal's output, to the client, until the terminal closes."""
    while data := await reader.read(65536):
        await websocket.send_bytes(data)


@router.websocket("/v1/jobs/{job_id}/terminal")
async def terminal(websocket: WebSocket, job_id: int) -> None:
    """Attach to a running interactive allocation's terminal (its owner only)."""
    ctx: Context = websocket.app.state.context
    await websocket.accept()
    try:
        request = cast(Request, websocket)  # (the caller is read from what both carry)
        user = await run_in_threadpool(caller, request, _credentials(websocket))
        path = await run_in_threadpool(terminal_socket, ctx, job_id, user)
        try:
            reader, writer = await asyncio.open_unix_connection(str(path))
        except OSError as exc:
            raise HTTPException(
                status.HTTP_409_CONFLICT, f"job {job_id}'s terminal is not open ({exc.strerror})"
            ) from None
    except HTTPException as exc:
        await websocket.close(CLOSE_BASE + exc.status_code, str(exc.detail)[:120])
        return
    await websocket.send_text(ATTACHED)  # (the client types nothing before this)
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(_relay_up(websocket, writer)),
        asyncio.create_task(_relay_down(websocket, reader)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, OSError):
                await task
        writer.close()
        with contextlib.suppress(OSError, RuntimeError):
            await websocket.close(1000, "the terminal closed")
