"""What the loop accepts of a stored job: one check for every field it reads.

One user's record must never stop the scheduling of everyone (nor the
service's restart). The API validates what it stores, but a record can still
be one the loop cannot use: written by an older release, by a bug, by hand,
or by a path that skipped validation. So the loop checks each job's row once,
where the job enters its view (an arrival, a restart, a rebuild), with the
same rules the API applies, and a job that fails is *set aside* (it ends
FAILED, its reason naming the field and the fault) instead of failing the
pass for all.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from corral.model.status import JobStatus
from corral.runtime.jobspec.specs import JobSpec

SET_ASIDE = "InvalidRecord"
"""The reason's prefix for a job the loop set aside because its record is unusable."""

REQUESTS = (
    None,
    "cancel",
    "suspend",
    "resume",
    "priority",
    "requeue",
    "hold",
    "hold_admin",
    "release",
)
"""The API requests the loop carries out (``jobs.request``)."""

HELD_REASONS = {"user": "JobHeldUser", "admin": "JobHeldAdmin"}
"""A held job's holder -> the reason shown (Slurm's words): a job held by an admin
is released by an admin only."""
HOLDERS = (None, *HELD_REASONS)

MAX_PRIORITY = 1_000_000
"""The largest |priority| the loop ranks (the API allows far less)."""

MAX_COUNT = 2**31
"""Counters (failures, preemptions, batch sizes) beyond this are not a job's."""


class BadRecord(ValueError):
    """A job's stored record the loop cannot use; ``field`` names what is wrong."""

    def __init__(self, job: int, field: str, why: str) -> None:
        self.job, self.field, self.why = job, field, why
        super().__init__(f"{field}: {why}")

    @property
    def reason(self) -> str:
        """The job's reason once set aside (shown in the queue and by ``corral show``)."""
        return f"{SET_ASIDE} ({self.field}: {self.why})"[:500]


FAULTED = "InternalError"
"""The reason's prefix for a job set aside because the loop itself failed on it."""


class Faulted(BadRecord):
    """A job the loop failed on while handling it (the loop's error, or a value of
    the job's that the store refused): set aside as an unusable record is, so that one
    job's trouble never stops every pass. ``why`` says what the loop was doing."""

    def __init__(self, job: int, why: str) -> None:
        super().__init__(job, "loop", why)

    @property
    def reason(self) -> str:
        return f"{FAULTED} ({self.why})"[:500]


def _finite(value: Any, *, nullable: bool, low: float = -math.inf) -> str | None:
    if value is None:
        return None if nullable else "missing"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"not a number ({type(value).__name__})"
    if not math.isfinite(value):
        return f"not finite ({value})"
    if value < low:
        return f"below {low:g}"
    return None


def _count(value: Any, *, nullable: bool, high: int = MAX_COUNT) -> str | None:
    if value is None:
        return None if nullable else "missing"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"not an integer ({type(value).__name__})"
    if not 0 <= value <= high:
        return f"out of range ({value})"
    return None


def spec_fault(spec: Any) -> tuple[JobSpec | None, str, str]:
    """The stored spec as the loop reads it; or None, the field at fault ("" when the
    fault is the whole spec's) and why.

    Admission stores nothing this would refuse (``loop.admission.stored_spec``), so
    a record that fails here was changed behind the service's back."""
    if not isinstance(spec, dict):
        return None, "", f"not a mapping ({type(spec).__name__})"
    try:
        return JobSpec.model_validate(spec), "", ""
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "spec"
        return None, where, str(first.get("msg", "invalid"))
    except (TypeError, ValueError, RecursionError) as exc:
        return None, "", f"{type(exc).__name__}: {exc}"


def spec_problem(spec: Any) -> tuple[JobSpec | None, str | None]:
    """The stored spec as the loop reads it, or the first fault the validator found."""
    read, where, why = spec_fault(spec)
    if read is not None:
        return read, None
    return None, f"{where}: {why}" if where else why


def check_record(row: Any) -> JobSpec:
    """The job's validated spec, once every field the loop reads of ``row`` is usable.

    Raises :class:`BadRecord` naming the first field at fault.
    """
    job = row.id
    spec, problem = spec_problem(row.spec)
    if spec is None:
        raise BadRecord(job, "spec", problem or "invalid")
    checks: list[tuple[str, str | None]] = [
        ("status", None if row.status in set(JobStatus) else f"unknown state {row.status!r}"),
        ("phase", None if row.phase in ("prerun", "main") else f"unknown phase {row.phase!r}"),
        ("request", None if row.request in REQUESTS else f"unknown request {row.request!r}"),
        ("held", None if row.held in HOLDERS else f"unknown holder {row.held!r}"),
        ("user", None if isinstance(row.user, str) and row.user else "missing"),
        ("name", None if isinstance(row.name, str) and row.name else "missing"),
        ("submit_time", _finite(row.submit_time, nullable=False, low=0.0)),
        ("first_start", _finite(row.first_start, nullable=True, low=0.0)),
        ("eligible_at", _finite(row.eligible_at, nullable=False)),
        ("steps", _finite(row.steps, nullable=False, low=0.0)),
        ("throughput", _finite(row.throughput, nullable=True, low=0.0)),
        ("throughput_since", _finite(row.throughput_since, nullable=True)),
        ("grad_noise_scale", _finite(row.grad_noise_scale, nullable=True)),
        ("checkpoint_step", _finite(row.checkpoint_step, nullable=True, low=0.0)),
        ("last_heartbeat", _finite(row.last_heartbeat, nullable=True)),
        ("failures", _count(row.failures, nullable=False)),
        ("preemptions", _count(row.preemptions, nullable=False)),
        ("batch_size", _count(row.batch_size, nullable=True)),
        ("priority", _priority(row.priority)),
        ("gpus", _gpus(row.gpus)),
        ("loss_curve", _curve(row.loss_curve)),
        ("parent", _count(row.parent, nullable=True)),
    ]
    for field, why in checks:
        if why is not None:
            raise BadRecord(job, field, why)
    return spec


def _priority(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"not an integer ({type(value).__name__})"
    return None if abs(value) <= MAX_PRIORITY else f"out of range ({value})"


def _gpus(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(g, int) and not isinstance(g, bool) and 0 <= g < MAX_COUNT for g in value
    ):
        return "not a list of GPU ids"
    return None


def _curve(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"not a mapping ({type(value).__name__})"
    for key, points in value.items():
        if not isinstance(points, list):
            return f"{key}: not a list"
        for point in points:
            if _finite(point, nullable=False) is not None:
                return f"{key}: not a list of finite numbers"
    return None


def aside_reason(exc: Exception) -> str:
    """The reason a job set aside for ``exc`` shows: the field at fault, or the error."""
    if isinstance(exc, BadRecord):
        return exc.reason
    return f"{SET_ASIDE} (the loop cannot take it: {type(exc).__name__}: {exc})"[:500]
