"""Failed authentication, slowed per client address.

A client that sends wrong tokens again and again (1,000 at 413 a second, in
a test) is guessing. After ``failures`` failed tokens from one address within
``window`` seconds, that address is locked out for a back-off that doubles at
each lock-out in a row (from 1 s up to ``backoff_max``): its requests are
answered 429 with ``Retry-After`` before their token is even compared, so a
guesser learns nothing at any speed; each lock-out is logged once.

Users on a shared login host share its address. So that one of them cannot
lock the others out, a token that authenticated from that address before
the lock-out still works during it (a guess never has); only tokens not yet
seen from there wait for the lock-out to end.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_ADDRESSES = 10_000
"""Addresses remembered at once (the oldest are forgotten first)."""


@dataclass
class _Address:
    failures: deque[float] = field(default_factory=deque)
    locked_until: float = 0.0
    lockouts: int = 0
    trusted: set[str] = field(default_factory=set)
    """Token digests that authenticated from this address."""


class AuthGuard:
    """Counts failed tokens per address and locks out an address that guesses."""

    def __init__(
        self,
        failures: int = 20,
        window: float = 60.0,
        backoff_max: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures, self.window, self.backoff_max = failures, window, backoff_max
        self.clock = clock
        self._lock = threading.Lock()
        self._addresses: OrderedDict[str, _Address] = OrderedDict()

    def _entry(self, address: str) -> _Address:
        entry = self._addresses.get(address)
        if entry is None:
            entry = self._addresses[address] = _Address()
            while len(self._addresses) > MAX_ADDRESSES:
                self._addresses.popitem(last=False)
        else:
            self._addresses.move_to_end(address)
        return entry

    def wait(self, address: str, digest: str) -> float:
        """Seconds the address must wait before this token is compared (0: go on)."""
        with self._lock:
            entry = self._entry(address)
            left = entry.locked_until - self.clock()
            if left <= 0 or digest in entry.trusted:
                return 0.0
            return left

    def succeeded(self, address: str, digest: str) -> None:
        with self._lock:
            entry = self._entry(address)
            entry.trusted.add(digest)
            if len(entry.trusted) > 1000:  # a bound: the oldest are not kept in order
                entry.trusted.pop()

    def failed(self, address: str) -> None:
        with self._lock:
            entry = self._entry(address)
            now = self.clock()
            entry.failures.append(now)
            while entry.failures and entry.failures[0] < now - self.window:
                entry.failures.popleft()
            if len(entry.failures) < self.failures:
                return
            if entry.locked_until < now - self.window:  # a lock-out long ago: start again
                entry.lockouts = 0
            backoff = min(2.0**entry.lockouts, self.backoff_max)
            entry.lockouts += 1
            entry.locked_until = now + backoff
            entry.failures.clear()
        print(
            f"corral: {self.failures} failed tokens from {address} "
            f"within {self.window:g}s; it is locked out for {backoff:g}s",
            file=sys.stderr,
            flush=True,
        )
