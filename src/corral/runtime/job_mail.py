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


class Mailer:
    """Sends the mail the committed events call for (a consumer of the store's echo)."""

    def __init__(self, store: Store, program: Path, out: Any = None) -> None:
        self.store = store
        self.program = program
        self.todo: queue.SimpleQueue[tuple[str, int, dict[str, Any]] | None] = queue.SimpleQueue()
        self.repeats = Repeats(60.0, out)
        self.thread = threading.Thread(target=self._run, name="corral-mail", daemon=True)
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
            tasks = self._tasks(s, row) if array is not None and not per_task else None
            ran = sum(
                max((a.end_time or a.start_time) - a.start_time, 0.0)
                for a in s.scalars(select(AttemptRow).where(AttemptRow.job_id == job))
            )
            name, user, status = row.name, spec.get("mail_user") or row.user, row.status
            waited = (row.first_start or row.submit_time) - row.submit_time
            exit_code = row.exit_code
        label = f"Job_id={array if tasks is not None else job}"
        if array is not None and tasks is None:
            label = f"Job_id={job} ({array}_{spec.get('array_index')})"
        subjects = []
        first = tasks is None or (
            detail.get("attempt") == 1
            and min((t.first_start, t.id) for t in tasks if t.first_start is not None)[1] == job
        )
        if kind == "start" and "BEGIN" in occasions and first:  # (an array: its first start)
            subjects.append(f"{label} Name={name} Began, Queued time {span(waited)}")
        if kind == "attempt_end" and "TIME_LIMIT" in occasions and detail.get("cause") == "timeout":
            subjects.append(f"{label} Name={name} Reached time limit, Run time {span(ran)}")
        if kind in ("attempt_end", "request_cancel"):
            if status == JobStatus.PENDING.value and kind == "attempt_end":
                if "REQUEUE" in occasions and detail.get("cause") not in ("preempted", "suspended"):
                    subjects.append(f"{label} Name={name} Requeued, Run time {span(ran)}")
            elif status in ENDED:
                subjects += self._ended(label, name, status, exit_code, ran, occasions, tasks)
        for subject in subjects:
            self._send(f"corral {subject}", user, f"{subject}\n")

    def _tasks(self, s: Any, row: JobRow) -> list[JobRow]:
        """An array's tasks (the mail for a whole array counts them)."""
        array = row.spec.get("array_job")
        same = select(JobRow).where(JobRow.user == row.user, JobRow.name == row.name)
        return [t for t in s.scalars(same) if (t.spec or {}).get("array_job") == array]

    def _ended(
        self,
        label: str,
        name: str,
        status: str,
        exit_code: int | None,
        ran: float,
        occasions: set[str],
        tasks: list[JobRow] | None,
    ) -> list[str]:
        if tasks is not None:
            if any(t.status not in ENDED for t in tasks):
                return []  # (the array's mail comes when its last task ends)
            failed = [t for t in tasks if t.status in FAILED]
            worst = failed[0] if failed else tasks[0]
            status, exit_code = (worst.status, worst.exit_code) if failed else ("SUCCEEDED", 0)
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
