"""What the API returns: pydantic views of the store's rows (the OpenAPI schema)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.api.limits import LOG_CHUNK as LOG_CHUNK
from corral.api.limits import MAX_ID as MAX_ID
from corral.api.limits import MAX_REPORTED
from corral.runtime.jobspec.specs import MAX_BATCH, JobSpec
from corral.runtime.storage.store import AttemptRow, EventRow, JobRow, NodeRow


class ErrorView(BaseModel):
    """Every error answer: a message for people (422s carry pydantic's list instead)."""

    detail: str


@functools.cache
def _spec_defaults() -> dict[str, Any]:
    """Every job-spec field's default (read-only: shared by every view)."""
    return {
        name: field.get_default(call_default_factory=True)
        for name, field in JobSpec.model_fields.items()
    }


ROW_FIELDS = (
    "id", "name", "user", "status", "reason", "priority", "phase", "submit_time",
    "first_start", "end_time", "steps", "throughput", "loss", "batch_size",
    "grad_noise_scale", "gpu_utilization", "gpu_memory_gb", "checkpoint_step",
    "failures", "preemptions", "exit_code",
)  # fmt: skip
"""Job-view fields that are the store row's columns of the same name."""
SPEC_FIELDS = {
    "gpus": int,
    "gpu_type": str,
    "job_type": str,
    "vc": str,
    "total_steps": int,
    "max_retries": int,
    "array_job": int,
    "array_index": int,
}
"""Job-view fields read from the stored spec (scalars), with their types."""
LOOKED_UP = ("position", "remaining")
"""Job-view fields the API adds: the queue position and the policy's work left."""


def brief_columns(fields: set[str]) -> list[Any] | None:
    """The row columns that give these job-view fields without reading whole rows (a
    listing of ten thousand jobs reads a fifth of the data), with the submission
    time (it keys :class:`StoredSpecs`); None when a field asked for needs the whole
    row (a command, a dependency, lists). Fields from the spec come from
    :class:`StoredSpecs`."""
    from corral.runtime.storage.store import JobRow

    if not fields <= {*ROW_FIELDS, *SPEC_FIELDS, *LOOKED_UP}:
        return None
    wanted = {name for name in fields if name in ROW_FIELDS} | {"id", "submit_time"}
    return [getattr(JobRow, name).label(name) for name in sorted(wanted)]


class StoredSpecs:
    """The spec's scalars (:data:`SPEC_FIELDS`) of listed jobs, kept by job id and
    submission time.

    A stored spec is written once, in its job's submission (an array's tasks get
    their array id in the same transaction), so what was read of it stays true;
    the submission time guards against a store whose ids start again. Read from
    the JSON in the database, ten thousand jobs' specs took a third of a listing's
    time, again after every change to the store; now a listing after a change reads
    the specs of the jobs it has not seen. At most :data:`KEPT` jobs are kept (then
    all are forgotten and read again)."""

    KEPT = 100_000

    def __init__(self) -> None:
        self._known: dict[tuple[int, float], tuple[Any, ...]] = {}
        self._lock = threading.Lock()

    def columns(
        self,
        s: Any,
        ids: Sequence[int],
        submitted: Sequence[float],
        query: Any,
        names: Sequence[str],
    ) -> dict[str, list[Any]]:
        """The spec fields ``names`` of the jobs ``ids`` (submitted at ``submitted``),
        a column each, the spec's defaults where it is silent. ``query`` selects at
        least those jobs: read again for their specs when many are new, so that the
        database is not sent thousands of ids."""
        from corral.runtime.storage.store import JobRow

        if not names:
            return {}
        known = self._known
        keys = list(zip(ids, submitted, strict=True))
        missing = [key for key in keys if key not in known]
        if missing:
            extract = [JobRow.id, JobRow.submit_time, *(_spec_item(n) for n in SPEC_ORDER)]
            if len(missing) > MANY_SPECS:
                found = s.execute(query.with_only_columns(*extract))
            else:
                wanted = [job for job, _ in missing]
                found = s.execute(query.with_only_columns(*extract).where(JobRow.id.in_(wanted)))
            read = {(r[0], r[1]): tuple(r[2:]) for r in found}
            with self._lock:  # (replaced, never emptied: a listing's ``known`` stays whole)
                if len(self._known) + len(read) > self.KEPT:
                    self._known = {}
                self._known.update(read)
            values = [read.get(key) or known[key] for key in keys]
        else:
            values = [known[key] for key in keys]
        defaults = _spec_defaults()
        out: dict[str, list[Any]] = {}
        for name in names:
            k, default = SPEC_ORDER.index(name), defaults[name]
            column = [v[k] for v in values]
            out[name] = column if default is None else [default if v is None else v for v in column]
        return out


SPEC_ORDER = tuple(SPEC_FIELDS)
"""The order :class:`StoredSpecs` keeps a spec's scalars in."""
MANY_SPECS = 500
"""Above this many new jobs, :class:`StoredSpecs` reads the listing's query again
rather than sending the ids."""


def _spec_item(name: str) -> Any:
    from corral.runtime.storage.store import JobRow

    item = JobRow.spec[name]
    return item.as_integer() if SPEC_FIELDS[name] is int else item.as_string()


def columns_of(rows: Sequence[Any], labels: Sequence[str]) -> dict[str, Sequence[Any]]:
    """Rows as a column each, by label (read once: a row's fields by name cost more
    than the whole transposition over ten thousand rows)."""
    if not rows:
        return {label: () for label in labels}
    return dict(zip(labels, zip(*rows, strict=True), strict=True))


def brief_table(
    table: Mapping[str, Sequence[Any]],
    specs: Mapping[str, Sequence[Any]],
    fields: set[str],
    positions: Mapping[int, int],
    remaining: Mapping[int, tuple[float, str]],
) -> dict[str, Sequence[Any]]:
    """Jobs' views restricted to ``fields``, a column each (the values
    :meth:`JobView.of` gives), from the columns of :func:`brief_columns` (by
    :func:`columns_of`) and the spec columns of :class:`StoredSpecs`. Jobs with the
    same work left share its view."""
    out: dict[str, Sequence[Any]] = {}
    for name in sorted(fields):
        if name in SPEC_FIELDS:
            out[name] = specs[name]
        elif name not in LOOKED_UP:
            out[name] = table[name]
    ids = table["id"]
    if "position" in fields:
        out["position"] = [positions.get(job) for job in ids]
    if "remaining" in fields:
        shown: dict[tuple[float, str] | None, dict[str, Any] | None] = {None: None}
        for known in remaining.values():
            if known not in shown:
                shown[known] = {"seconds": known[0], "source": known[1]}
        out["remaining"] = [shown[remaining.get(job)] for job in ids]
    return out


def brief_views(table: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """:func:`brief_table`'s columns as a dict per job, each from its values in one
    call (a listing of ten thousand jobs: a fraction of the time of a dict per row
    filled field by field)."""
    names = list(table)
    return [dict(zip(names, row, strict=True)) for row in zip(*table.values(), strict=True)]


class RemainingView(BaseModel):
    seconds: float
    source: str = Field(
        description="heartbeats (steps left / throughput), convergence (the steps its "
        "fitted loss curve needs to reach the target loss, over throughput), duration or "
        "wall_time (the owner's), history (median of the owner's past jobs) or default "
        "(the config's)"
    )


HIDDEN = "(hidden)"
"""What another user's job shows in place of its command, environment and paths
under ``private_data``."""
UNREADABLE = "(unreadable record)"
"""The command shown for a job whose stored spec cannot be read (set aside)."""
PRIVATE_SPEC = (
    "command",
    "env",
    "stage",
    "workdir",
    "output",
    "error",
    "task",
    "script_path",
    "submit_dir",
)
"""A job's fields only its owner and admins see under ``private_data``: commands
and environments carry secrets (``--password=...``), paths tell what others work on."""


def private_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as another user sees it under ``private_data``."""
    return {
        k: HIDDEN if k in PRIVATE_SPEC and v not in (None, {}, []) else v for k, v in spec.items()
    }


class JobView(BaseModel):
    id: int
    name: str
    user: str
    status: str
    reason: str | None = Field(
        None,
        description="why it waits (PENDING), how it runs where that is not the plain way "
        "(RUNNING: Opportunistic, Shared) or how it ended",
    )
    position: int | None = Field(None, description="place in the queue (PENDING jobs, from 1)")
    priority: int
    gpus: int
    gpu_type: str | None
    job_type: str
    vc: str | None = Field(None, description="virtual cluster the job names (Philly, HiveD)")
    assigned_gpus: list[int] | None
    command: list[str]
    phase: str
    submit_time: float
    first_start: float | None
    end_time: float | None
    steps: float
    total_steps: int | None
    throughput: float | None
    loss: float | None
    batch_size: int | None = Field(None, description="global batch size the job reports")
    grad_noise_scale: float | None = Field(
        None, description="gradient noise scale the job reports (examples)"
    )
    gpu_utilization: float | None = Field(
        None, description="percent, the mean over its GPUs, as the driver measured it"
    )
    gpu_memory_gb: float | None = Field(
        None, description="GPU memory its processes held, as the driver measured it"
    )
    checkpoint_step: float | None
    failures: int
    preemptions: int
    max_retries: int
    exit_code: int | None
    array_job: int | None = Field(None, description="the array's first job (array tasks)")
    array_index: int | None = Field(None, description="this task's index (array tasks)")
    dependency: dict[str, list[int]] = Field(default_factory=dict)
    array_tasks: list[int] | None = Field(
        None, description="on submitting an array: the ids of its tasks"
    )
    remaining: RemainingView | None = Field(
        None, description="the work left the policy believes (queued and running jobs)"
    )

    @classmethod
    def of(
        cls,
        row: JobRow,
        position: int | None = None,
        remaining: tuple[float, str] | None = None,
    ) -> JobView:
        # the stored spec was validated when it was submitted: its fields are read
        # as they are, with the schema's defaults for those it leaves out (building a
        # JobSpec for each of ten thousand listed jobs took most of a listing's time)
        stored = row.spec if isinstance(row.spec, dict) else {}
        try:
            return cls._of(row, {**_spec_defaults(), **stored}, position, remaining)
        except (KeyError, TypeError, AttributeError, ValueError):
            # a record the loop set aside as unusable: shown, never a failed listing
            unusable = {**_spec_defaults(), "command": [UNREADABLE]}
            return cls._of(row, unusable, position, remaining)

    @classmethod
    def _of(
        cls,
        row: JobRow,
        spec: dict[str, Any],
        position: int | None,
        remaining: tuple[float, str] | None,
    ) -> JobView:
        return cls(
            id=row.id,
            name=row.name,
            user=row.user,
            status=row.status,
            reason=row.reason,
            position=position,
            priority=row.priority,
            gpus=spec["gpus"],
            gpu_type=spec["gpu_type"],
            job_type=spec["job_type"],
            vc=spec["vc"],
            assigned_gpus=row.gpus,
            command=spec["command"],
            phase=row.phase,
            submit_time=row.submit_time,
            first_start=row.first_start,
            end_time=row.end_time,
            steps=row.steps,
            total_steps=spec["total_steps"],
            throughput=row.throughput,
            loss=row.loss,
            batch_size=row.batch_size,
            grad_noise_scale=row.grad_noise_scale,
            gpu_utilization=row.gpu_utilization,
            gpu_memory_gb=row.gpu_memory_gb,
            checkpoint_step=row.checkpoint_step,
            failures=row.failures,
            preemptions=row.preemptions,
            max_retries=spec["max_retries"],
            exit_code=row.exit_code,
            array_job=spec["array_job"],
            array_index=spec["array_index"],
            dependency={kind: list(ids) for kind, ids in spec["dependency"].items()},
            remaining=None
            if remaining is None
            else RemainingView(seconds=remaining[0], source=remaining[1]),
        )


class AttemptView(BaseModel):
    number: int
    phase: str
    gpus: list[int]
    start_time: float
    end_time: float | None
    pid: int | None
    exit_code: int | None
    signal: int | None
    cause: str | None
    detail: str | None
    steps_start: float
    steps_end: float | None

    @classmethod
    def of(cls, row: AttemptRow) -> AttemptView:
        return cls(
            number=row.number,
            phase=row.phase,
            gpus=row.gpus,
            start_time=row.start_time,
            end_time=row.end_time,
            pid=row.pid,
            exit_code=row.exit_code,
            signal=row.signal,
            cause=row.cause,
            detail=row.detail,
            steps_start=row.steps_start,
            steps_end=row.steps_end,
        )


class EventView(BaseModel):
    id: int
    time: float
    job_id: int | None
    kind: str
    detail: dict[str, Any]

    @classmethod
    def of(cls, row: EventRow) -> EventView:
        return cls(id=row.id, time=row.time, job_id=row.job_id, kind=row.kind, detail=row.detail)


class JobDetail(JobView):
    spec: dict[str, Any] = Field(
        description="as submitted; its env is shown to the job's owner and admins only"
    )
    attempts: list[AttemptView]
    events: list[EventView]
    loss_curve: dict[str, list[float]] | None = Field(
        None, description="(step, loss) points of a job that trains to a target loss"
    )
    progress: dict[str, list[float | None]] | None = Field(
        None,
        description="the heartbeats' history, thinned: times, steps, throughput, loss",
    )
    policy_view: dict[str, str] = Field(
        default_factory=dict,
        description="what the policy thinks of the job (Tiresias' queue, Gavel's share)",
    )


class NodeView(BaseModel):
    name: str
    gpu_type: str
    gpus: int
    gpus_in_use: int
    state: str = Field(
        description="up; draining (drained, its jobs still running), drained; down (lost "
        "by the executor)"
    )
    failures: int
    virtual: bool
    jobs: list[int]
    reason: str | None = Field(
        None, description="why it is drained: an admin's words, failures, a GPU's fault"
    )
    gpu_ids: list[int] = Field(default_factory=list, description="its GPUs' ids")
    gpu_jobs: list[list[int]] = Field(
        default_factory=list,
        description="the jobs on each of its GPUs: its holder, then any job sharing it",
    )

    @classmethod
    def of(cls, row: NodeRow, use: Mapping[int, Sequence[int]], ids: list[int]) -> NodeView:
        """A node from its row, the jobs on each GPU (holder first) and its GPUs' ids."""
        on_gpus = [list(use.get(g, ())) for g in ids]
        busy = any(on_gpus)
        state = row.state
        if state == "drained" and busy:  # (Slurm's DRAINING: jobs still run on it)
            state = "draining"
        return cls(
            gpu_ids=ids,
            gpu_jobs=on_gpus,
            name=row.name,
            gpu_type=row.gpu_type,
            gpus=row.gpus,
            gpus_in_use=sum(1 for jobs in on_gpus if jobs),
            state=state,
            failures=row.failures,
            virtual=bool(row.virtual),
            jobs=sorted({job for jobs in on_gpus for job in jobs}),
            reason=row.reason,
        )


class NodeStateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(None, max_length=500)


class PriorityBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    priority: int = Field(ge=-1000, le=1000)


class HeartbeatBody(BaseModel):
    """What a job reports; every number is bounded so a stored value is one the loop
    and the store can hold (an integer past 64 bits would fail the store's write)."""

    model_config = ConfigDict(allow_inf_nan=False)
    attempt: int = Field(ge=1, le=MAX_ID)
    step: float = Field(ge=0, le=MAX_REPORTED)
    throughput: float | None = Field(None, ge=0, le=MAX_REPORTED)
    throughput_age: float | None = Field(
        None,
        ge=0,
        le=MAX_REPORTED,
        description="seconds since the window the throughput covers began",
    )
    loss: float | None = Field(None, ge=-MAX_REPORTED, le=MAX_REPORTED)
    batch_size: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="global batch size of the last step"
    )
    grad_noise_scale: float | None = Field(
        None,
        ge=0,
        le=MAX_REPORTED,
        description="estimated gradient noise scale, in examples (optional)",
    )
    checkpoint_step: float | None = Field(None, ge=0, le=MAX_REPORTED)
    gpu_memory: float | None = Field(
        None,
        ge=0,
        le=MAX_REPORTED,
        description="peak GPU memory (bytes, per GPU) since the last heartbeat",
    )


class HeartbeatAnswer(BaseModel):
    stop: bool
    why: str | None
    lease_until: float
    batch_size: int | None = Field(
        None, description="the global batch size the policy sets for the job (Pollux), if any"
    )
    memory_fraction: float | None = Field(
        None,
        description="the share of each GPU's memory an opportunistic job may use now (AntMan)",
    )


class Health(BaseModel):
    status: str
    policy: str
    gpus: dict[str, int]
    passes: int
    version: str
    standby_ready: int = Field(0, description="idle standby workers ready for a task job")
    gpu_confinement: str | None = Field(
        None, description="how jobs are kept to their GPUs' device nodes (null: virtual GPUs)"
    )


class HistoryView(BaseModel):
    """One job in the accounting history (Slurm's sacct)."""

    id: int
    name: str
    user: str
    status: str
    gpus: int
    submit_time: float
    first_start: float | None
    end_time: float | None
    wait: float | None = Field(description="seconds from submission to the first start")
    elapsed: float = Field(description="seconds its attempts ran, summed")
    gpu_hours: float = Field(description="GPU-hours its attempts held, summed")
    attempts: int
    preemptions: int
    exit_code: int | None
