"""The dashboard at ``/``: one page, a stylesheet and a script, shipped in the
package (no build step, nothing fetched from elsewhere).

Why plain HTML, CSS and JavaScript: the page only reads the JSON API the CLI
reads (polled once a second) and posts the same actions, so it needs no
framework, no Node toolchain at install time and no asset from the internet.
The page itself holds no data and needs no login; every call it makes
carries the token the user typed, kept in the tab's session storage.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

UI = Path(__file__).parent / "ui"

router = APIRouter()


@router.get("/", include_in_schema=False)
def page() -> FileResponse:
    return FileResponse(UI / "index.html", media_type="text/html; charset=utf-8")


@router.get("/jobs/{job_id}", include_in_schema=False)
def job_page(job_id: int) -> FileResponse:
    """A job's own address: the same page, which opens the job (a link can be shared
    and a reload keeps the view)."""
    return FileResponse(UI / "index.html", media_type="text/html; charset=utf-8")
