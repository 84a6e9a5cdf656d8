"""Reading, as root, a file that a job's user may control.

A job's own folder is its user's: whatever the service reads there (the mark of
a finished staging) may have been replaced by a FIFO (an ``open`` that blocks
the scheduler's thread for ever), a link to ``/dev/zero`` (a read that never
ends) or to another user's file (a read with root's rights), or a file of a
gigabyte. Every such read goes through :func:`open_regular`: the last part of
the path is never followed if it is a link, the open never waits for a
writer, anything but a regular file is refused, and :func:`read_small` reads
at most a bounded number of bytes. A regular file read with a bound cannot
block, so these reads stay on the loop's thread.

Files in the service's own folders (attempt records, logs the launcher
writes) are read the same way, so a mistake in what a job may write there
cannot become a hang either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SMALL_FILE = 1 << 20
"""The most bytes :func:`read_small` reads (records and marks are far smaller)."""

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def open_regular(path: Path | str) -> int | None:
    """A read-only descriptor on ``path`` if it is a regular file reached without
    following a link at its last part; None otherwise (missing, a link, a FIFO, a
    device, a socket, a folder)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.set_blocking(fd, True)
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_small(path: Path | str, limit: int = SMALL_FILE) -> bytes | None:
    """The whole of a regular file of at most ``limit`` bytes; None for anything
    else (see :func:`open_regular`), or a file larger than that."""
    fd = open_regular(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_size > limit:
            return None
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None
