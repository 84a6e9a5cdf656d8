"""Mail about jobs, as Slurm's ``--mail-type`` and ``--mail-user`` send it through its
``MailProg``: the service runs its configured ``mail_program`` (``/usr/bin/mail``
on most hosts) as ``PROGRAM -s SUBJECT USER`` with a line of body, the subject
in Slurm's words (``corral Job_id=12 Name=train Ended, Run time 00:10:02,
FAILED, ExitCode 1``).

Types: ``BEGIN`` (each start), ``END`` (the job ended, however), ``FAIL`` (it
failed, timed out or was killed), ``REQUEUE`` (queued again: a node failure,
``corral requeue``), ``TIME_LIMIT`` (it reached its time limit), ``ALL`` (all of
them), ``NONE``; ``ARRAY_TASKS`` mails each task of an array, which otherwise
mails once for the whole array: when its first task starts and when its last
ends. It reads the store's events once they have committed (the service's
log's source) and sends from a thread of its own, so a slow mail program never
holds a scheduling pass; a program that fails or hangs (30 s) is said once a
minute in the service's log, and the mail is not retried.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from corral.log_lines import Repeats
from corral.model.jobs import JobStatus
from corral.runtime.jobspec.mail_types import wanted
from corral.runtime.storage.store import AttemptRow, JobRow, Store
from corral.timespan import span

FAILED = {JobStatus.FAILED.value, JobStatus.TIMEOUT.value}
SLURM_STATES = {
    "SUCCEEDED": "COMPLETED",
    "FAILED": "FAILED",
    "CANCELLED": "CANCELLED",
    "TIMEOUT": "TIMEOUT",
}
ENDED = set(SLURM_STATES)
SEND_TIMEOUT = 30.0


@dataclass
class ArrayMail:
    """What the mail of a whole array needs to know of its tasks, kept as their
    events come (its first start, which tasks have not ended, which failed)."""

    open: set[int]
    failed: dict[int, tuple[str, int | None]]
    began: bool
    done: bool = False

    def begins(self, job: int, kind: str, detail: dict[str, Any]) -> bool:
        """Whether this event is the array's first start (said once)."""
        if kind != "start" or detail.get("attempt") != 1 or self.began:
            return False
        self.began = True
        return True

    def ended(self, job: int, status: str, exit_code: int | None) -> None:
        """A task's end (or its requeue: open again)."""
        if status in ENDED:
            self.open.discard(job)
            if status in FAILED:
                self.failed.setdefault(job, (status, exit_code))
        else:
            self.open.add(job)

    def last_end(self) -> bool:
        """Whether every task has ended now (the array's mail is sent once)."""
        if self.done or self.open:
            return False
        self.done = True
        return True


class Mailer:
    """Sends the mail the committed events call for (a consumer of the store's echo)."""

    def __init__(self, store: Store, program: Path, out: Any = None) -> None:
        self.store = store
        self.program = program
        self.todo: queue.SimpleQueue[tuple[str, int, dict[str, Any]] | None] = queue.SimpleQueue()
        self.repeats = Repeats(60.0, out)
        self.thread = threading.Thread(target=self._run, name="corral-mail", daemon=True)
        self.arrays: dict[int, ArrayMail] = {}
        """Arrays whose mail is for the whole array, by the array's id."""
        self.thread.start()
        self.sent = 0

    def __call__(self, events: Sequence[tuple[float, str, int | None, dict[str, Any]]]) -> None:
        for _at, kind, job, detail in events:
            if job is not None and kind in ("start", "attempt_end", "request_cancel"):
                self.todo.put((kind, job, detail))

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join(5)

    def _run(self) -> None:
        while (item := self.todo.get()) is not None:
            try:
                self._consider(*item)
            except Exception as exc:  # (one mail's trouble never stops the others)
                self.repeats.say(f"mail:{type(exc).__name__}", f"corral: mail not sent: {exc}")

    def _consider(self, kind: str, job: int, detail: dict[str, Any]) -> None:
        with self.store.session() as s:
            row = s.get(JobRow, job)
            if row is None or not isinstance(row.spec, dict):
                return
            spec = row.spec
            types = spec.get("mail_type") or []
            occasions = wanted(types)
            if not occasions:
                return
            per_task = "ARRAY_TASKS" in types
            array = spec.get("array_job")
            whole = None
            if array is not None and not per_task:
                whole = self._array(s, row, kind, detail)
            ran = sum(
                max((a.end_time or a.start_time) - a.start_time, 0.0)
                for a in s.scalars(select(AttemptRow).where(AttemptRow.job_id == job))
            )
            name, user, status = row.name, spec.get("mail_user") or row.user, row.status
            waited = (row.first_start or row.submit_time) - row.submit_time
            exit_code = row.exit_code
        label = f"Job_id={array if whole is not None else job}"
        if array is not None and whole is None:
            label = f"Job_id={job} ({array}_{spec.get('array_index')})"
        subjects = []
        if whole is not None and kind in ("attempt_end", "request_cancel"):
            whole.ended(job, status, exit_code)  # (before its mail: it may be the last)
        first = whole is None or whole.begins(job, kind, detail)
        if kind == "start" and "BEGIN" in occasions and first:  # (an array: its first start)
            subjects.append(f"{label} Name={name} Began, Queued time {span(waited)}")
        if kind == "attempt_end" and "TIME_LIMIT" in occasions and detail.get("cause") == "timeout":
            subjects.append(f"{label} Name={name} Reached time limit, Run time {span(ran)}")
        if kind in ("attempt_end", "request_cancel"):
            if status == JobStatus.PENDING.value and kind == "attempt_end":
                if "REQUEUE" in occasions and detail.get("cause") not in ("preempted", "suspended"):
                    subjects.append(f"{label} Name={name} Requeued, Run time {span(ran)}")
            elif status in ENDED:
                subjects += self._ended(label, name, status, exit_code, ran, occasions, whole)
        for subject in subjects:
            self._send(f"corral {subject}", user, f"{subject}\n")

    def _array(self, s: Any, row: JobRow, kind: str, detail: dict[str, Any]) -> ArrayMail:
        """The array's record (made from its tasks' rows the first time one of them is
        seen: one query an array, not one a task's event)."""
        array = int(row.spec["array_job"])
        known = self.arrays.get(array)
        if known is not None:
            return known
        same = select(JobRow.id, JobRow.status, JobRow.first_start, JobRow.exit_code, JobRow.spec)
        same = same.where(JobRow.user == row.user, JobRow.name == row.name, JobRow.id >= array)
        tasks = [t for t in s.execute(same) if (t.spec or {}).get("array_job") == array]
        started = [(t.first_start, t.id) for t in tasks if t.first_start is not None]
        earliest = min(started)[1] if started else None
        made = ArrayMail(
            open={t.id for t in tasks if t.status not in ENDED},
            failed={t.id: (t.status, t.exit_code) for t in tasks if t.status in FAILED},
            # begun already unless this is the first start of its first task to start
            began=not (kind == "start" and detail.get("attempt") == 1 and earliest == row.id),
        )
        self.arrays[array] = made
        return made

    def _ended(
        self,
        label: str,
        name: str,
        status: str,
        exit_code: int | None,
        ran: float,
        occasions: set[str],
        whole: ArrayMail | None,
    ) -> list[str]:
        if whole is not None:
            if not whole.last_end():
                return []  # (the array's mail comes when its last task ends, once)
            if whole.failed:
                status, exit_code = whole.failed[min(whole.failed)]
            else:
                status, exit_code = "SUCCEEDED", 0
        shown = SLURM_STATES.get(status, status)
        line = f"{label} Name={name} {{}}, Run time {span(ran)}, {shown}, ExitCode {exit_code}"
        if status in FAILED and "FAIL" in occasions:
            return [line.format("Failed")]
        if "END" in occasions:
            return [line.format("Ended")]
        return []

    def _send(self, subject: str, user: str, body: str) -> None:
        argv = [str(self.program), "-s", subject, user]
        try:
            done = subprocess.run(
                argv, input=body, text=True, capture_output=True, timeout=SEND_TIMEOUT
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.repeats.say("mail-run", f"corral: mail to {user} not sent: {exc}")
            return
        if done.returncode != 0:
            why = (done.stderr or "").strip()[-200:] or f"exit code {done.returncode}"
            self.repeats.say("mail-exit", f"corral: {self.program} failed: {why}")
            return
        self.sent += 1


def fan_out(*consumers: Any) -> Any:
    """One echo for the store that tells each of ``consumers`` in turn."""

    def echo(events: Sequence[tuple[float, str, int | None, dict[str, Any]]]) -> None:
        for consumer in consumers:
            consumer(events)

    return echo
