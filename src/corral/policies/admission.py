"""Admission: which arriving jobs a policy gets to see, and when.

Admission control decides before any policy ranks a job whether the job enters
the queue now, later, or never: a cap on how many jobs may wait, a quota on
the size of a gang, a user held back while they have too much queued. Blox
gives it a module of its own; corral gives it this one, and both engines ask
it the same way:

- as a job arrives (the simulator: at its submission; the live service: once
  its dependencies, begin time and other holds are met), the policy's
  :meth:`~corral.policies.base.Policy.admit` returns a :class:`Verdict`;
- ``ADMIT`` queues the job; ``delay(reason, until)`` keeps it out of the queue
  and asks again at ``until`` (the policy's clock, later than now); ``reject(reason)``
  ends it (the simulator: REJECTED, counted in the summary; live: CANCELLED
  with the reason ``AdmissionRefused (reason)``);
- a job that has once been admitted is never asked again (a requeue after
  preemption or failure is not an arrival).

A policy may override ``admit`` itself; or any policy can be given an
:class:`Admission` (``--admission FILE.py:Class[key=value,...]`` on the
command line, ``admission:`` in the service's config), which its default
``admit`` asks. ``examples/policies/queue_cap.py`` is a complete one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from corral.errors import CorralError

if TYPE_CHECKING:
    from corral.model.state import SchedulerState


@dataclass(frozen=True)
class Verdict:
    """What admission decides for one arriving job."""

    action: Literal["admit", "delay", "reject"] = "admit"
    reason: str = ""
    """Said in the job's reason (live) and kept with the verdict."""
    until: float | None = None
    """For a delay: when to ask again (the policy's clock, seconds; after now)."""


ADMIT = Verdict()


def delay(reason: str, until: float) -> Verdict:
    """Keep the job out of the queue and ask again at ``until`` (the policy's clock)."""
    return Verdict("delay", reason, float(until))


def reject(reason: str) -> Verdict:
    """Refuse the job: it never runs."""
    return Verdict("reject", reason)


class Admission:
    """An admission rule any policy can be given. The base admits every job.

    Subclasses override :meth:`admit`; their ``__init__``'s keyword arguments are
    their options (``--admission 'file.py:Class[limit=8]'``)."""

    name: str = "admit-all"
    description: str = "every job is queued as it arrives"

    def admit(self, state: SchedulerState, i: int) -> Verdict:
        """The verdict on job ``i`` (a row of ``state``), arriving at ``state.now``."""
        return ADMIT


_SPEC = re.compile(r"^(?P<name>[^\[\]]+?)\s*(?:\[(?P<options>[^\[\]]*)\])?$")


def split_spec(text: str) -> tuple[str, dict[str, Any]]:
    """``file.py:Class[key=value,...]`` as the class's name and its options (numbers
    where they read as numbers, ``true``/``false`` as booleans)."""
    match = _SPEC.match(text.strip())
    if match is None:
        raise CorralError(f"admission '{text}': expected NAME or NAME[key=value,...]")
    options: dict[str, Any] = {}
    for pair in (match["options"] or "").split(","):
        if not pair.strip():
            continue
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise CorralError(f"admission '{text}': expected key=value, got '{pair}'")
        options[key.strip()] = _value(value.strip())
    return match["name"].strip(), options


def make_admission(text: str) -> Admission:
    """The admission rule ``text`` names (``file.py:Class`` or ``module:Class``, with
    options in brackets); a clear error for a missing class or an unknown option."""
    name, options = split_spec(text)
    if ":" not in name:
        raise CorralError(
            f"admission '{text}': name a class of your own, file.py:Class or module:Class"
        )
    from corral.plugins import load_class

    cls = load_class(name, Admission, "admission")
    try:
        return cls(**options)  # type: ignore[no-any-return]
    except TypeError as exc:
        raise CorralError(f"admission '{text}': {exc}") from None


def _value(text: str) -> Any:
    """An option as written: ``true``/``false`` as booleans (a rule's ``__init__``
    declares no types to convert to), numbers as numbers, else the text."""
    from corral.policies.options import plain_number

    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return plain_number(text)
