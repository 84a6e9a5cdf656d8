"""sbatch's ``--mail-type``, read where a job's spec is read (standard library only:
the command line reads it before it talks to the service). What is sent, and
when: :mod:`corral.runtime.job_mail`."""

from __future__ import annotations

MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "TIME_LIMIT", "ALL", "ARRAY_TASKS")
EVERY = ("BEGIN", "END", "FAIL", "REQUEUE", "TIME_LIMIT")
"""The occasions mail is sent on (ALL is all of them)."""


def mail_types(text: str) -> list[str]:
    """Read ``--mail-type`` (``END,FAIL``; ``ALL``); ValueError names what is unknown."""
    types = [t.strip().upper() for t in text.split(",") if t.strip()]
    unknown = [t for t in types if t not in MAIL_TYPES]
    if unknown or not types:
        raise ValueError(
            f"'{text}': corral sends {', '.join(MAIL_TYPES)} (not {', '.join(unknown) or 'none'})"
        )
    return types


def wanted(types: list[str] | tuple[str, ...]) -> set[str]:
    """The occasions ``types`` ask mail for (``ALL`` is all of them; ``NONE`` none)."""
    if "NONE" in types:
        return set()
    return set(EVERY) if "ALL" in types else set(types) & set(EVERY)
