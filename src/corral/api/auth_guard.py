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
seen from there wait for the lock-out to end. What was seen is kept in a file
of the state directory (hashes of address and token digest, mode 0600), so a
restart does not forget it: a lock-out straight after a restart once stopped
every user of a shared host, admins included.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAX_ADDRESSES = 10_000
"""Addresses remembered at once (the oldest are forgotten first)."""
MAX_TRUSTED = 100_000
"""(Address, token) pairs kept in the trust file (the oldest are forgotten first)."""
TRUST_FILE = "trusted-tokens"


def trust_key(address: str, digest: str) -> str:
    """What the trust file keeps of a token that worked from an address (a hash: the
    file holds neither the addresses nor the tokens' digests)."""
    return hashlib.sha256(f"{address}\0{digest}".encode()).hexdigest()


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
        trust_file: Path | None = None,
    ) -> None:
        self.failures, self.window, self.backoff_max = failures, window, backoff_max
        self.clock = clock
        self._lock = threading.Lock()
        self._addresses: OrderedDict[str, _Address] = OrderedDict()
        self.trust_file = trust_file
        self._kept: dict[str, None] = {}
        """The trust file's keys (see :func:`trust_key`), oldest first."""
        if trust_file is not None:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                lines = trust_file.read_text(encoding="ascii").split()
                self._kept = dict.fromkeys(lines[-MAX_TRUSTED:])

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
            if trust_key(address, digest) in self._kept:  # (seen before a restart)
                entry.trusted.add(digest)
                return 0.0
            return left

    def succeeded(self, address: str, digest: str) -> None:
        with self._lock:
            entry = self._entry(address)
            if digest in entry.trusted:
                return
            entry.trusted.add(digest)
            if len(entry.trusted) > 1000:  # a bound: the oldest are not kept in order
                entry.trusted.pop()
            self._keep(trust_key(address, digest))

    def _keep(self, key: str) -> None:
        """Add ``key`` to the trust file (rewritten, halved, when it grows too long)."""
        if self.trust_file is None or key in self._kept:
            return
        self._kept[key] = None
        with contextlib.suppress(OSError):
            if len(self._kept) > MAX_TRUSTED:
                self._kept = dict.fromkeys(list(self._kept)[-MAX_TRUSTED // 2 :])
                tmp = self.trust_file.with_name(f".{self.trust_file.name}.tmp")
                tmp.unlink(missing_ok=True)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="ascii") as out:
                    out.write("".join(f"{k}\n" for k in self._kept))
                os.replace(tmp, self.trust_file)
                return
            fd = os.open(self.trust_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="ascii") as out:
                out.write(f"{key}\n")

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
