"""Philly's original release (``cluster_job_log``, msr-fiddle/philly-traces, ATC'19).

The file is one JSON array of jobs, each::

    {"status": "Pass" | "Killed" | "Failed", "vc": "...", "jobid": "application_...",
     "user": "...", "submitted_time": "2017-10-07 01:11:39",
     "attempts": [{"start_time": "...", "end_time": "...",
                   "detail": [{"ip": "m47", "gpus": ["gpu0", "gpu1"]}]}]}

(times ``YYYY-MM-DD HH:MM:SS``; the release says a job may have no attempts, an
attempt may lack its start or end time, and a last attempt with no end was
still running when the log was taken). Unlike the condensed trace corral
bundles, it keeps each job's final status and every attempt with its
machines, which is what the ATC'19 analysis is made of: the share of jobs
passed, killed and unsuccessful, the GPU time each took, failures by job
size, and locality (how many servers a gang was spread over).

As a trace, a job asks for the GPUs of its first attempt and replays the time
its attempts ran (their sum: the gaps between attempts were spent queued
again). Jobs never scheduled, with no attempt times, or still running are
left out and counted. The JSON is read job by job with the file's own line
numbers, so an error names the line a job starts on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from corral.errors import InputError
from corral.model.jobs import JobTable
from corral.textfiles import read_text
from corral.traces.rows import LoadReport

LOG_TIME = "%Y-%m-%d %H:%M:%S"
STATUSES = {"Pass": "Passed", "Killed": "Killed", "Failed": "Unsuccessful"}
"""The log's final statuses -> the ATC'19 paper's names for them."""
SIZE_BUCKETS = ((1, 1, "1"), (2, 4, "2-4"), (5, 8, "5-8"), (9, 1 << 30, ">8"))
"""Job sizes as the paper groups them (GPUs, inclusive)."""


def is_philly_log(first_chars: str) -> bool:
    """A JSON array whose first job has Philly's keys."""
    head = first_chars.lstrip()
    return head.startswith("[") and '"attempts"' in head and '"jobid"' in head


@dataclass
class Attempt:
    start: datetime | None
    end: datetime | None
    servers: int
    gpus: int

    @property
    def seconds(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max((self.end - self.start).total_seconds(), 0.0)


@dataclass
class LoggedJob:
    """One job of the log, checked."""

    job_id: str
    line: int
    status: str
    vc: str
    user: str
    submitted: datetime
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def gpus(self) -> int | None:
        """The GPUs of its first attempt that names its machines (its gang size)."""
        return next((a.gpus for a in self.attempts if a.gpus > 0), None)

    @property
    def running(self) -> bool:
        """Still running when the log was taken (its last attempt began and has no end)."""
        return (
            bool(self.attempts)
            and self.attempts[-1].start is not None
            and (self.attempts[-1].end is None)
        )

    @property
    def run_seconds(self) -> float:
        """Time its attempts ran, summed (attempts lacking a time count nothing)."""
        return sum(s for a in self.attempts if (s := a.seconds) is not None)

    @property
    def gpu_seconds(self) -> float:
        return sum(s * a.gpus for a in self.attempts if (s := a.seconds) is not None)

    @property
    def queued_seconds(self) -> float | None:
        """From submission to its first attempt's start (None when it never started)."""
        first = next((a.start for a in self.attempts if a.start is not None), None)
        return None if first is None else max((first - self.submitted).total_seconds(), 0.0)


def _text(path: str) -> str:
    if not path.endswith(".gz"):
        return read_text(path)
    import gzip

    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise InputError(path, None, None, f"cannot read it as gzipped UTF-8 text: {exc}") from None


def _records(path: str) -> Iterator[tuple[int, Any]]:
    """``(line, job object)`` for each element of the file's JSON array."""
    text = _text(path)
    decoder = json.JSONDecoder()
    pos, line, counted = 0, 1, 0

    def skip(at: int) -> int:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        return at

    def line_at(at: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, at)
        counted = at
        return line

    pos = skip(pos)
    if pos >= len(text) or text[pos] != "[":
        raise InputError(path, line_at(pos), None, "a Philly job log is a JSON array of jobs")
    pos = skip(pos + 1)
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise InputError(path, exc.lineno, None, f"not valid JSON: {exc.msg}") from None
        yield line_at(pos), obj
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
        elif pos < len(text) and text[pos] == "]":
            return
        else:
            raise InputError(path, line_at(pos), None, "expected ',' or ']' between jobs")


def _time(path: str, line: int, name: str, value: Any, required: bool) -> datetime | None:
    if value is None or value in ("", "None"):
        if required:
            raise InputError(path, line, name, "is missing")
        return None
    try:
        return datetime.strptime(str(value), LOG_TIME)
    except ValueError:
        raise InputError(
            path, line, name, f"'{value}' is not a time like 2017-10-07 01:11:39"
        ) from None


def _job(path: str, line: int, obj: Any) -> LoggedJob:
    if not isinstance(obj, dict):
        raise InputError(path, line, None, "a job is a JSON object")
    for key in ("jobid", "status", "submitted_time", "attempts"):
        if key not in obj:
            raise InputError(path, line, key, "is missing")
    status = obj["status"]
    if status not in STATUSES:
        raise InputError(path, line, "status", f"'{status}': expected Pass, Killed or Failed")
    if not isinstance(obj["attempts"], list):
        raise InputError(path, line, "attempts", "must be a list")
    attempts = []
    for k, raw in enumerate(obj["attempts"]):
        name = f"attempts[{k}]"
        if not isinstance(raw, dict):
            raise InputError(path, line, name, "an attempt is a JSON object")
        detail = raw.get("detail") or []
        if not isinstance(detail, list) or not all(
            isinstance(d, dict) and isinstance(d.get("gpus", []), list) for d in detail
        ):
            raise InputError(path, line, f"{name}.detail", "must list {ip, gpus: [...]} objects")
        attempts.append(
            Attempt(
                _time(path, line, f"{name}.start_time", raw.get("start_time"), False),
                _time(path, line, f"{name}.end_time", raw.get("end_time"), False),
                len(detail),
                sum(len(d.get("gpus", [])) for d in detail),
            )
        )
    submitted = _time(path, line, "submitted_time", obj["submitted_time"], True)
    assert submitted is not None
    return LoggedJob(
        str(obj["jobid"]),
        line,
        STATUSES[status],
        str(obj.get("vc") or "default"),
        str(obj.get("user") or ""),
        submitted,
        attempts,
    )


def read_philly_log(
    path: str, skip_bad: bool = False, report: LoadReport | None = None
) -> list[LoggedJob]:
    """Every job of the log, checked (with ``skip_bad``, bad jobs dropped and counted)."""
    jobs: list[LoggedJob] = []
    seen: dict[str, int] = {}
    for line, obj in _records(path):
        if report is not None:
            report.rows += 1
        try:
            job = _job(path, line, obj)
            if job.job_id in seen:
                first = seen[job.job_id]
                raise InputError(path, line, "jobid", f"'{job.job_id}' repeats line {first}'s job")
        except InputError as exc:
            if not skip_bad:
                raise
            if report is not None:
                report.skipped += 1
                report.first_problem = report.first_problem or str(exc)
            continue
        seen[job.job_id] = line
        jobs.append(job)
    return jobs


def load_philly_log(
    path: str, skip_bad: bool = False, report: LoadReport | None = None
) -> JobTable:
    report = report or LoadReport(path)
    return philly_log_table(read_philly_log(path, skip_bad, report), path, report)


def philly_log_table(jobs: list[LoggedJob], path: str, report: LoadReport) -> JobTable:
    """The job table of jobs read from a log (for callers that analyse them too)."""
    kept = [j for j in jobs if j.gpus and not j.running and j.run_seconds > 0]
    never = sum(1 for j in jobs if not j.gpus)
    running = sum(1 for j in jobs if j.gpus and j.running)
    untimed = len(jobs) - len(kept) - never - running
    for count, what in (
        (never, "never scheduled (no attempt names its GPUs)"),
        (running, "still running when the log was taken"),
        (untimed, "with no attempt time recorded"),
    ):
        if count:
            report.notes.append(f"{count} job(s) {what} left out")
    if kept:
        statuses = pd.Series([j.status for j in kept]).value_counts()
        report.notes.append(
            "final statuses of the jobs kept (each replays the time its attempts ran): "
            + ", ".join(f"{k} {v}" for k, v in statuses.items())
        )
    kept.sort(key=lambda j: j.submitted)
    epoch = kept[0].submitted if kept else datetime(2017, 1, 1)
    run = np.array([j.run_seconds for j in kept], dtype=np.float64)
    df = pd.DataFrame(
        {
            "job_id": [j.job_id for j in kept],
            "submit_time": [(j.submitted - epoch).total_seconds() for j in kept],
            "num_gpus": np.array([j.gpus for j in kept], dtype=np.int64),
            "duration": run,
            "total_steps": run,
            "vc": [j.vc for j in kept],
            "user": [j.user for j in kept],
        }
    )
    table = JobTable(df, source=path)
    report.kept = len(table)
    return table
