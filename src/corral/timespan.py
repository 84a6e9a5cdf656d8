"""Durations as people who use Slurm read them."""

from __future__ import annotations


def span(seconds: float | None) -> str:
    """Seconds as sacct prints them: [D-]HH:MM:SS ('-' for none)."""
    if seconds is None:
        return "-"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text
