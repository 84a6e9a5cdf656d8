"""Text files that users name (job scripts, specs, traces, logs), read so that a
file that cannot be read, or is not UTF-8, is an error naming the file and line.
(Standard library only: the command line reads job scripts before it talks to the
service, and must start fast.)"""

from __future__ import annotations

from pathlib import Path

from corral.errors import InputError


def read_text(path: str | Path) -> str:
    """A UTF-8 text file a user named; unreadable or not UTF-8 is an :class:`InputError`
    (with the line of the first bad byte)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(str(path), None, None, f"cannot read it: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            str(path), line, None, f"not UTF-8 text (byte 0x{data[exc.start]:02x})"
        ) from None
    return text
