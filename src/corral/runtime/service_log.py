"""The service's log: a line for each thing it did that an operator may be asked
about (an allocation, a start, an attempt's end and why, a stop, a node drained
or resumed and by whom, a user's or admin's request), as slurmctld's log has.

The lines are the store's events, written once their transaction has committed
(a change the store refused is not logged as done), on standard error (journald
keeps them under systemd), each with its time, level, kind, job and details:
``2026-12-06T21:04:05.123Z info  allocated job=12 gpus=[0, 1]``, or one JSON
object a line (``log_format: json``) for a log pipeline. ``log_level`` sets the
least level written: ``debug`` adds the loop's own bookkeeping (packing, turns
of time slices, skipped plan steps), ``warning`` keeps only trouble.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
INFO = frozenset(
    {
        "submitted",
        "allocated",
        "start",
        "started",
        "attempt_end",
        "stop",
        "requested",
        "warned",
        "adopted",
        "found_ended",
        "requeued",
        "node_drained",
        "node_resumed",
        "node_up",
        "node_joined",
        "upgraded",
        "resynced",
        "repaired",
    }
)
WARNING = frozenset(
    {
        "set_aside",
        "gpu_failed",
        "node_down",
        "policy_error",
        "policy_rejected",
        "prestage_failed",
        "dependency_never_satisfied",
        "hold_refused",
    }
)
Said = tuple[float, str, int | None, dict[str, Any]]
"""One event: its time, kind, job (None: about no job) and details."""


def level_of(kind: str) -> str:
    if kind in WARNING:
        return "warning"
    return "info" if kind in INFO else "debug"


def stamp(at: float) -> str:
    """ISO 8601 in UTC, to the millisecond."""
    whole = int(at)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((at - whole) * 1000):03d}Z"
    )


def text_value(value: Any) -> str:
    """A detail's value on a text line: a string with spaces or quotes quoted, line
    breaks escaped (a job's words never split a line)."""
    if isinstance(value, str):
        if value and not any(c in value for c in ' "=\n\r\t'):
            return value
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, default=str)


class ServiceLog:
    """Writes committed events as log lines (the store's ``echo``)."""

    def __init__(self, level: str = "info", form: str = "text", out: TextIO | None = None):
        self.least = LEVELS[level]
        self.form = form
        self.out = out
        self._lock = threading.Lock()

    def __call__(self, events: Sequence[Said]) -> None:
        lines = [self.line(e) for e in events if LEVELS[level_of(e[1])] >= self.least]
        if not lines:
            return
        out = self.out or sys.stderr
        with self._lock:
            try:
                out.write("".join(lines))
                out.flush()
            except (OSError, ValueError):
                pass  # (a closed or full stream never fails the pass that logged)

    def line(self, event: Said) -> str:
        at, kind, job, detail = event
        level = level_of(kind)
        if self.form == "json":
            head: dict[str, Any] = {"time": stamp(at), "level": level, "event": kind}
            if job is not None:
                head["job"] = job
            return json.dumps({**head, **detail}, ensure_ascii=False, default=str) + "\n"
        parts = [stamp(at), f"{level:<7}", kind]
        if job is not None:
            parts.append(f"job={job}")
        parts += [f"{k}={text_value(v)}" for k, v in detail.items()]
        return " ".join(parts) + "\n"
