"""The disks under the service's state and the jobs' folders, watched: one job's
output must not stop every user's.

A job that wrote 60 MB onto a small state disk once left the store and every
launcher without room: attempts were recorded as lost nodes and the node was
drained. Now (besides the launcher's room for its exit record):

- each distinct file system among ``state_dir`` and ``jobs_dir`` is read every
  few seconds; below ``disk_warn`` free a line says so, below ``disk_floor`` new
  launches wait (jobs stay placed, none fails) until there is room again, each
  change said once, never a line per pass;
- a reserve of ``disk_reserve`` bytes is kept as a file in ``state_dir`` once
  that disk has less than eight times ``disk_warn`` free (a roomy disk needs
  none, and each service need not write one): when the disk falls below the
  floor it is let go, so the store can still commit (a cancel, an attempt's
  end) while people make room, and taken again when there is room for it;
- ``corral_disk_free_bytes{path}`` and ``corral_launches_paused`` are metrics.

May import: the loop's metrics registry (prometheus_client).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from prometheus_client import CollectorRegistry, Gauge

RESERVE_NAME = "disk-reserve"
CHECK_EVERY = 5.0
"""Seconds between two reads of the disks' free space."""
MIB = 2**20
ROOMY = 8
"""A disk with this many times ``disk_warn`` free needs no reserve taken yet."""


FLOOR_SHARE, WARN_SHARE = 0.05, 0.10
"""On a disk smaller than the floors say, they are these shares of its size instead
(a state directory on a 16 MiB disk would otherwise never launch a job)."""


def free_bytes(path: Path) -> int:
    """Bytes free to an unprivileged writer on the file system holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def size_bytes(path: Path) -> int:
    """The size of the file system holding ``path``."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


class DiskWatch:
    """The watch of the loop's disks (see the module's docstring)."""

    def __init__(
        self,
        state_dir: Path,
        jobs_dir: Path | None,
        floor: int,
        warn: int,
        reserve: int,
        registry: CollectorRegistry | None = None,
        free_of: Callable[[Path], int] = free_bytes,
        out: TextIO | None = None,
        size_of: Callable[[Path], int] = size_bytes,
    ) -> None:
        self.floor, self.warn, self.reserve = floor, warn, reserve
        with contextlib.suppress(OSError):  # (a small disk: shares of it instead)
            size = size_of(state_dir)
            self.floor = min(floor, int(size * FLOOR_SHARE))
            self.warn = min(warn, int(size * WARN_SHARE))
            self.reserve = min(reserve, int(size * FLOOR_SHARE))
        self.free_of = free_of
        self.out = out
        self.reserve_file = state_dir / RESERVE_NAME
        self.paths = [state_dir]
        with contextlib.suppress(OSError):  # (a jobs_dir made later: its disk then)
            if jobs_dir is not None and os.stat(jobs_dir).st_dev != os.stat(state_dir).st_dev:
                self.paths.append(jobs_dir)
        self.level: dict[Path, str] = {}
        """Each path's last state said: ``ok``, ``low`` (below the warning) or ``full``
        (below the floor)."""
        self.checked = -float("inf")
        self.paused = False
        self.free_gauge = Gauge(
            "corral_disk_free_bytes",
            "Bytes free on the disks of the service's state and the jobs' folders",
            ["path"],
            registry=registry,
        )
        self.paused_gauge = Gauge(
            "corral_launches_paused",
            "1 while new launches wait for room on a disk (disk_floor)",
            registry=registry,
        )

    def launches_paused(self, now: float) -> bool:
        """Whether new launches wait for disk space (read every :data:`CHECK_EVERY` s)."""
        if now - self.checked >= CHECK_EVERY:
            self.checked = now
            self.paused = self._check()
            self.paused_gauge.set(1 if self.paused else 0)
        return self.paused

    def _check(self) -> bool:
        full = False
        for path in self.paths:
            try:
                free = self.free_of(path)
            except OSError:
                continue  # (gone for now: said by whatever uses it)
            if path == self.paths[0]:
                free = self._tend_reserve(free)
            self.free_gauge.labels(str(path)).set(free)
            level = "full" if free < self.floor else "low" if free < self.warn else "ok"
            full |= level == "full"
            if level != self.level.get(path, "ok"):
                self._say(path, level, free)
            self.level[path] = level
        return full

    def _tend_reserve(self, free: int) -> int:
        """Let the reserve go below the floor, take it again with room to spare; the
        free space after."""
        if not self.reserve:
            return free
        held = self.reserve_file.exists()
        if held and free < self.floor:
            with contextlib.suppress(OSError):
                self.reserve_file.unlink()
                self._line(
                    f"let go of the {self.reserve // MIB} MiB kept in {self.reserve_file} so "
                    "the store can still write; make room on that disk"
                )
                return self.free_of(self.paths[0])
        if not held and self.warn + self.reserve <= free < ROOMY * self.warn:
            with contextlib.suppress(OSError):
                take_reserve(self.reserve_file, self.reserve)
                return self.free_of(self.paths[0])
        return free

    def _say(self, path: Path, level: str, free: int) -> None:
        amount = f"{free // MIB} MiB free"
        if level == "full":
            self._line(
                f"new launches wait: the disk holding {path} has {amount}, below disk_floor "
                f"({self.floor // MIB} MiB); they go on once there is room"
            )
        elif level == "low":
            self._line(
                f"the disk holding {path} has {amount}, below disk_warn "
                f"({self.warn // MIB} MiB); launches wait below {self.floor // MIB} MiB"
            )
        else:
            self._line(f"the disk holding {path} has room again ({amount})")

    def _line(self, text: str) -> None:
        print(f"corral: {text}", file=self.out or sys.stderr, flush=True)


def take_reserve(path: Path, size: int) -> None:
    """Hold ``size`` bytes of the disk in a file (allocated, not sparse)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            chunk = b"\0" * MIB
            for _ in range(size // MIB):
                os.write(fd, chunk)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    else:
        os.close(fd)
