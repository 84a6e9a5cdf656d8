"""Durations and times as people who use Slurm write and read them: parsed from
job specs, ``#SBATCH`` lines and the command line, printed as sacct prints them.
(Standard library only: the command line parses these before it talks to the
service, and must start fast.)"""

from __future__ import annotations

import math

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from typing import Any


def span(seconds: float | None) -> str:
    """Seconds as sacct prints them: [D-]HH:MM:SS ('-' for none)."""
    if seconds is None:
        return "-"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


_DURATION = r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s?)?$"

_SLURM_DAYS = r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$"


def _match(pattern: str, text: str) -> Any:
    """``re.match``, ``re`` imported at the first time read (``corral queue`` prints
    durations and parses none: ``re`` and its ``enum`` were a tenth of it)."""
    import re

    return re.match(pattern, text)


SLURM_UNLIMITED = ("unlimited", "infinite")
"""sbatch's words for no time limit."""


def slurm_seconds(value: str) -> float | None:
    """Seconds from sbatch's ``--time``: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``
    or ``D-H:M:S`` (a bare number is minutes, as in Slurm), in whole minutes as Slurm
    keeps them (seconds round up: ``0:05`` is a minute); None for UNLIMITED and for 0
    (Slurm's "no time limit")."""
    text = value.strip().lower()
    if text in SLURM_UNLIMITED:
        return None
    days = _match(_SLURM_DAYS, text)
    if days is not None:
        d, h, m, sec = (int(g) if g else 0 for g in days.groups())
        seconds = float(((d * 24 + h) * 60 + m) * 60 + sec)
    else:
        parts = text.split(":")
        if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise ValueError(
                f"'{value}' is not one of Slurm's time formats (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)"
            )
        numbers = [int(p) for p in parts]
        if len(numbers) == 1:
            seconds = numbers[0] * 60.0  # minutes
        elif len(numbers) == 2:
            seconds = numbers[0] * 60.0 + numbers[1]  # minutes:seconds
        else:
            seconds = (numbers[0] * 60.0 + numbers[1]) * 60 + numbers[2]
    if seconds == 0:  # Slurm: "a time limit of zero requests that no time limit be imposed"
        return None
    return math.ceil(seconds / 60) * 60.0


def parse_seconds(value: Any) -> float:
    """Seconds from a number, ``HH:MM:SS`` / ``MM:SS``, Slurm's ``D-HH:MM:SS`` or
    ``1h30m`` / ``90s``. (A bare number is seconds here; in an ``#SBATCH`` line it
    is minutes, as sbatch reads it: :func:`slurm_seconds`.)"""
    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        if _match(_SLURM_DAYS, text):
            found = slurm_seconds(text)
            if found is None:
                raise ValueError("a duration must be positive")
            return found
        if ":" in text:
            parts = text.split(":")
            if len(parts) > 3 or not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"'{value}' is not HH:MM:SS")
            seconds = 0.0
            for part in parts:
                seconds = seconds * 60 + int(part)
        else:
            match = _match(_DURATION, text)
            if not text or match is None:
                raise ValueError(f"'{value}' is not a duration (e.g. 3600, 1h30m, 01:30:00)")
            d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
            seconds = d * 86400 + h * 3600 + m * 60 + s
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


BEGIN_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
"""sbatch's words for the units of ``now+COUNT`` (seconds unless one is given)."""


def _begin_offset(text: str) -> float:
    """``30m``, ``1h30m`` (corral's) or ``1hour``, ``2days``, ``90`` (sbatch's)."""
    import re

    match = re.fullmatch(r"(\d+)\s*([a-z]+?)s?", text.strip().lower())
    if match is not None and match.group(2) in BEGIN_UNITS:
        return int(match.group(1)) * BEGIN_UNITS[match.group(2)]
    return parse_seconds(text)


def parse_begin(value: Any, now: float | None = None) -> float:
    """sbatch's ``--begin``: Unix time, ``now+30m`` (s, m, h, d; or sbatch's
    ``now+1hour``, ``now+2days``, ``now+90`` seconds), or a date and time
    (``2026-11-27``, ``2026-11-27T08:00``; local time, as sbatch reads it)."""
    import time as clock
    from datetime import datetime

    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    if text.lower().startswith("now"):
        rest = text[3:].strip()
        offset = _begin_offset(rest.lstrip("+")) if rest.startswith("+") else 0.0
        if rest and not rest.startswith("+"):
            raise ValueError(f"'{text}': give now+30m, now+2h or a date and time")
        return (clock.time() if now is None else now) + offset
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(
            f"'{text}': give now+30m, a date (2026-11-27) or a date and time (2026-11-27T08:00)"
        ) from None
