"""sbatch's ``--signal``: a job's warning before its time limit, read where a script's
directives are read (standard library only, and not ``dataclasses``, whose import
of ``inspect`` was a third of a script's submission: the command line reads it
before it talks to the service, and must start fast)."""

from __future__ import annotations

import signal as signals
from typing import NamedTuple


class WarningSignal(NamedTuple):
    """sbatch's ``--signal=[B:]SIG[@SECS]``: a signal sent ``lead`` seconds before the
    job's time limit (and before corral's own preemptions and suspends), to the
    batch script's shell alone (``B:``) or to its other processes."""

    number: int
    lead: float
    batch: bool


WARNING_LEAD_DEFAULT = 60.0
"""Seconds before the limit when ``--signal`` gives none (Slurm's)."""
_NOT_WARNINGS = {"KILL", "STOP"}


def warning_signal(text: str) -> WarningSignal:
    """Read sbatch's ``--signal`` text (``USR1@90``, ``B:TERM``, ``10@30``, ``SIGUSR2``)."""
    body, at, lead_text = text.strip().partition("@")
    whom, colon, name = body.partition(":")
    if not colon:
        whom, name = "", body
    if whom.upper() not in ("", "B"):
        raise ValueError(
            f"'{text}': corral takes B: (the batch script's shell alone) or nothing "
            "(its other processes); R: is about reservations, which corral has not"
        )
    name = name.strip().upper().removeprefix("SIG")
    if name.isdigit():
        number = int(name)
        valid = {int(s) for s in signals.Signals}
        if number not in valid:
            raise ValueError(f"'{text}': {number} is not a signal")
        name = signals.Signals(number).name.removeprefix("SIG")
    else:
        member = getattr(signals.Signals, f"SIG{name}", None)
        if member is None:
            raise ValueError(f"'{text}': SIG{name} is not a signal (USR1, USR2, TERM, ...)")
        number = int(member)
    if name in _NOT_WARNINGS:
        raise ValueError(f"'{text}': SIG{name} cannot be caught, so it warns of nothing")
    lead = WARNING_LEAD_DEFAULT
    if at:
        if not lead_text.strip().isdigit() or int(lead_text) > 65535:
            raise ValueError(f"'{text}': give the seconds before the limit as 0 to 65535")
        lead = float(lead_text)
    return WarningSignal(number, lead, whom.upper() == "B")
