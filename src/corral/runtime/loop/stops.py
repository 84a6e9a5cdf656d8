"""Stopping an attempt: what the loop asked is recorded first (so a restarted
service carries the stop on), then the process is signalled, and killed if it
has not left when its grace is over."""

from __future__ import annotations

import signal

from sqlalchemy.orm import Session

from corral.runtime.loop.job_book import Attempt
from corral.runtime.loop.loop_base import LoopState
from corral.runtime.loop.sharing import Sharing
from corral.runtime.storage.store import AttemptRow, JobRow


class Stops:
    """Asking attempts to stop (a stage of the loop)."""

    def __init__(self, loop: LoopState, sharing: Sharing) -> None:
        self.loop = loop
        self.sharing = sharing

    def stop(
        self, a: Attempt, why: str, now: float, grace: float | None = None, asked: bool = False
    ) -> None:
        """Ask an attempt to stop (recorded first, so a restart carries the stop on).
        ``asked``: a user's request (suspend, requeue), which the job's ``--signal``
        warning does not put off, as it does corral's own preemptions."""
        with self.loop.store.session() as s:
            self.set_stop(s, a, why)
            row = s.get(JobRow, a.job)
            if row is not None:
                row.reason = {"preempt": "Preempting", "suspend": "Suspending"}.get(
                    why, why.capitalize()
                )
            self.loop.store.event(s, "stop", a.job, attempt=a.number, why=why)
        lead = 0.0 if asked else self._lead(a, why, grace)
        if lead > 0:  # its --signal first; SIGTERM once the warning's time is over
            self.warn(a, now, why)
            a.term_at = now + lead
            a.kill_at = a.term_at + self.loop.config.stop_grace
            return
        self.signal_stop(a, now, grace)

    def _lead(self, a: Attempt, why: str, grace: float | None) -> float:
        """Seconds a stop waits after the job's ``--signal`` warning: corral's own
        preemptions and suspends of a running job that asked for one, up to
        ``signal_lead_max`` (0: none, SIGTERM now)."""
        if a.warning is None or why not in ("preempt", "suspend") or grace is not None:
            return 0.0
        if a.ref is None or a.paused or a.term_at is not None:
            return 0.0
        return min(a.warning.lead, self.loop.config.signal_lead_max)

    def warn(self, a: Attempt, now: float, why: str) -> None:
        """Send the job's ``--signal`` warning (of its time limit, or of a stop), and
        record it."""
        if a.warning is None or a.ref is None:
            return
        whom = "batch" if a.warning.batch else ("steps" if a.batch_script else "all")
        done, sent = self.loop.contained(
            a, "warn", self.loop.executor.warn, a.ref, a.warning.number, whom
        )
        if why == "time limit":
            a.warned = True
        with self.loop.store.session() as s:
            self.loop.store.event(
                s,
                "warned",
                a.job,
                attempt=a.number,
                signal=a.warning.number,
                to=whom,
                before=why,
                sent=bool(done and sent),
            )

    def set_stop(self, s: Session, a: Attempt, why: str | None) -> None:
        """What the loop asked of an attempt (stop, park, or None: run), in the
        loop's view and in the store, so a restarted service carries it on."""
        a.stop = why
        att = s.get(AttemptRow, a.id)
        if att is not None:
            att.stop = why

    def signal_stop(self, a: Attempt, now: float, grace: float | None = None) -> None:
        if a.ref is None:
            return
        grace = self.loop.config.stop_grace if grace is None else grace
        sig = signal.SIGTERM if grace > 0 else signal.SIGKILL
        a.term_at = None  # (a stop put off for its warning is carried out now)
        self.loop.contained(a, "signal", self.loop.executor.signal, a.ref, sig)
        # a second stop (a cancel of a job timing out) never puts its kill off
        a.kill_at = now + grace if a.kill_at is None else min(a.kill_at, now + grace)
        if a.paused and self.sharing.taking_turns(a.job):
            self.sharing.let_leave(a, now)  # (a GPU's worth at a time: see take_turns)
        elif a.paused:  # a paused job must run to act on the signal
            self.sharing.resume(a, now)
