"""Lines for the service's log that say a repeated condition once a while, not once
each time: a full disk under the store failed every pass, and the log took a
traceback a second (70 of them in a minute); a failed ``accept`` repeats many
times a second. (Standard library only: used by the loop and the API alike.)"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Repeats:
    """Say each kind of line (its ``key``) at most once per ``every`` seconds, with the
    count of those left out since it was last said."""

    def __init__(
        self,
        every: float = 60.0,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.every = every
        self.out = out
        self.clock = clock
        self.last: dict[str, tuple[float, int]] = {}
        """Key -> (when it was last said, how many were left out since)."""

    def say(self, key: str, text: str) -> bool:
        """Print ``text`` unless a line of ``key`` was said within ``every`` seconds;
        whether it was printed."""
        now = self.clock()
        at, dropped = self.last.get(key, (-float("inf"), 0))
        if now - at < self.every:
            self.last[key] = (at, dropped + 1)
            return False
        self.last[key] = (now, 0)
        more = f" ({dropped} more like it in the last {self.every:g} s)" if dropped else ""
        print(f"{text}{more}", file=self.out or sys.stderr, flush=True)
        return True
