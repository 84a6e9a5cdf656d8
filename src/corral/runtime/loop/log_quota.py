"""Each user's ended attempts' logs kept within ``user_log_limit`` bytes.

``log_limit`` cuts one attempt's log; a user with thousands of attempts could
still fill the state directory's disk with logs. Every ``SWEEP_EVERY`` seconds
the loop sums, per user, the logs of their ended attempts (an attempt's folder
holding its exit record) and empties the oldest until the user is within the
limit, leaving in each a line that says so; the service logs one line per user
per sweep that trimmed. Running attempts' logs are never touched.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TextIO

from corral.runtime.execution.launcher import EXIT_FILE

SWEEP_EVERY = 600.0
LOG_NAME = "log.txt"
TRIMMED = "corral: this attempt's log was removed to keep {user}'s logs within user_log_limit\n"


def ended_logs(jobs_root: Path) -> Iterable[tuple[int, Path, int, float]]:
    """(job, log, bytes, modified) of each ended attempt's log under ``jobs_root``."""
    with contextlib.suppress(OSError):
        for job_dir in os.scandir(jobs_root):
            if not job_dir.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                for attempt in os.scandir(job_dir.path):
                    if not attempt.name.startswith("attempt-"):
                        continue
                    folder = Path(attempt.path)
                    if not (folder / EXIT_FILE).exists():
                        continue  # running (or never ended): left alone
                    with contextlib.suppress(OSError):
                        st = (folder / LOG_NAME).stat(follow_symlinks=False)
                        yield int(job_dir.name), folder / LOG_NAME, st.st_size, st.st_mtime


class LogQuota:
    """The sweep (see the module's docstring)."""

    def __init__(
        self,
        jobs_root: Path,
        limit: int | None,
        owners: Callable[[list[int]], Mapping[int, str]],
        out: TextIO | None = None,
    ) -> None:
        self.jobs_root, self.limit, self.owners = jobs_root, limit, owners
        self.out = out
        self.swept = -float("inf")

    def due(self, now: float) -> bool:
        return self.limit is not None and now - self.swept >= SWEEP_EVERY

    def sweep(self, now: float) -> dict[str, int]:
        """Trim each user's oldest ended logs past the limit; bytes freed per user."""
        self.swept = now
        if self.limit is None:
            return {}
        logs = list(ended_logs(self.jobs_root))
        owner = self.owners(sorted({job for job, *_ in logs}))
        by_user: dict[str, list[tuple[float, Path, int]]] = {}
        for job, path, size, modified in logs:
            if job in owner and size > len(TRIMMED) + 64:
                by_user.setdefault(owner[job], []).append((modified, path, size))
        freed: dict[str, int] = {}
        for user, kept in by_user.items():
            total = sum(size for _, _, size in kept)
            for _, path, size in sorted(kept, key=lambda x: x[0]):  # the oldest first
                if total <= self.limit:
                    break
                with contextlib.suppress(OSError):
                    note = TRIMMED.format(user=user)
                    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
                    with os.fdopen(fd, "w") as handle:
                        handle.write(note)
                    total -= size - len(note)
                    freed[user] = freed.get(user, 0) + size - len(note)
            if user in freed:
                print(
                    f"corral: {user}'s logs passed user_log_limit ({self.limit} bytes): the "
                    f"oldest ended attempts' logs were emptied, {freed[user]} bytes freed",
                    file=self.out or sys.stderr,
                    flush=True,
                )
        return freed
