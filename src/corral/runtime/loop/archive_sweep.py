"""The service's own archiving of ended jobs (``archive_after``), between passes.

Once an hour the loop moves one page of jobs that ended more than
``archive_after`` ago out of the hot tables (see
:mod:`corral.runtime.storage.archive`), then one page a pass until none is left:
each page is one short transaction, so the API's writes and the next pass wait
for a page at most, never for the whole history.
"""

from __future__ import annotations

import sys

from corral.runtime.storage.archive import archive_ended
from corral.runtime.storage.store import Store

EVERY = 3600.0
"""Seconds between two sweeps through the ended jobs."""


class ArchiveSweep:
    """Moves ended jobs out, a page at a time (see the module's docstring)."""

    def __init__(self, store: Store, older_than: float | None) -> None:
        self.store = store
        self.older_than = older_than
        self.swept: float | None = None
        """When the last sweep began (None: none yet)."""
        self.after: int | None = None
        """The last id a sweep in progress read (None: no sweep in progress)."""
        self.moved = 0

    def due(self, now: float) -> bool:
        if self.older_than is None:
            return False
        return self.after is not None or self.swept is None or now - self.swept >= EVERY

    def step(self, now: float) -> int:
        """One page; the jobs it moved."""
        assert self.older_than is not None
        if self.after is None:
            self.swept, self.after, self.moved = now, 0, 0
        done, last = archive_ended(self.store, self.older_than, now, after=self.after)
        self.after = last
        self.moved += done.jobs
        if last is None and self.moved:
            days = self.older_than / 86400
            print(f"corral: {self.moved} ended job(s) archived (ended over {days:g} days ago)",
                  file=sys.stderr, flush=True)  # fmt: skip
        return done.jobs
