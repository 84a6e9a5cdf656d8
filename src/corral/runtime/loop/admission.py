"""Admission: the rules a job must pass to be queued, and the rows it is queued as.

Why here, beside the loop, and not in the API: the loop re-reads every stored
record with its own validator (:mod:`corral.runtime.loop.records`), and one
record it cannot read must never be stored by submission (a job that
names a large array was once expanded past the dependency limit and then failed
every pass). With both in the runtime, submission checks what it adds (an
array's tasks, the tasks a dependency on an array stands for) by the very rules
the loop reads it with. The API parses requests and turns a :class:`Refused`
into its HTTP answer; the fault-schedule tests admit jobs through this module
directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from corral.errors import CorralError
from corral.policies import POLICIES, policy_key
from corral.runtime.execution.identity import RunAs, usable_folder
from corral.runtime.jobspec.config import ServiceConfig, UserConfig
from corral.runtime.jobspec.mail_types import wanted
from corral.runtime.jobspec.specs import (
    DependencyKind,
    JobSpec,
    array_indices,
    array_limit,
    check_array,
)
from corral.runtime.loop.cpu_jobs import cpu_capacity
from corral.runtime.loop.loop_base import NOT_ENDED
from corral.runtime.loop.records import HELD_REASONS, spec_fault
from corral.runtime.loop.round_policy import plans_rounds
from corral.runtime.storage.store import (
    ArchivedJobRow,
    JobInputRow,
    JobRow,
    Store,
    encoded_with,
    in_chunks,
)
from corral.timespan import span

FORBIDDEN = 403
INVALID = 422
TOO_MANY = 429


@dataclass(frozen=True)
class Admitted:
    """A job just queued: its first row (an array's first task, whose id is the
    array's) and every task's id and index, in order."""

    first: JobRow
    ids: list[int]
    indices: list[int | None]

    def rows(self) -> Iterator[tuple[int, str, dict[str, Any], str]]:
        """(id, user, stored spec, name) of each task."""
        for job, index in zip(self.ids, self.indices, strict=True):
            yield job, self.first.user, {**self.first.spec, "array_index": index}, self.first.name


class Refused(Exception):
    """A submission that breaks a rule: what is wrong, the field at fault (None for
    the request as a whole) and the HTTP status the API answers with."""

    def __init__(self, message: str, field: str | None = None, status: int = INVALID) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status
        self.where: tuple[str | int, ...] = (field,) if field is not None else ()
        """The field's place in the request body (a batch puts the job's index first)."""

    def in_batch(self, k: int) -> Refused:
        """The same refusal, placed at the ``k``-th job of a batched submission."""
        out = Refused(self.message if self.where else f"jobs[{k}]: {self.message}", self.field)
        out.status = self.status
        out.where = ("jobs", k, *self.where) if self.where else ()
        return out


def resolved(path: str, field: str) -> Path:
    """``path`` with its links followed; refused for a loop of links or a path too long."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as exc:
        raise Refused(f"{path} cannot be resolved ({exc})", field) from None


def stored_spec(spec: JobSpec) -> JobSpec:
    """``spec`` as it will be stored, read back by the loop's own validator: what
    corral adds at submission must pass it too, or one record could fail every pass."""
    read, where, why = spec_fault(spec.model_dump(mode="json"))
    if read is None:
        if where == "dependency":
            why += " (an array named in a dependency stands for all its tasks)"
        raise Refused(why, where or "spec")
    return read


def check_round_job(spec: JobSpec, policy: str) -> None:
    """Under a policy that plans rounds, a job runs as rounds: it must be given as a
    task, in whole rounds."""
    if spec.task is None:
        raise Refused(
            f"policy {policy} runs jobs as rounds of tasks: give the job as a task "
            "(task: {factory: module:function, steps: N}), not as a command",
            "task",
        )
    per_round = spec.round_steps()
    if spec.task.steps % per_round:
        raise Refused(
            f"{spec.task.steps} is not a whole number of rounds of {per_round} mini-batches "
            "(task.round_steps; unset, one per GPU asked)",
            "task.steps",
        )
    if spec.dependency:
        raise Refused(f"not yet supported for jobs run as rounds ({policy})", "dependency")


def with_whole_arrays(
    s: Session, dependency: Mapping[DependencyKind, list[int]], known: dict[int, JobRow]
) -> dict[DependencyKind, list[int]]:
    """As Slurm reads it, an array's job id (its first task's) stands for every task."""
    out: dict[DependencyKind, list[int]] = {}
    for kind, ids in dependency.items():
        expanded: set[int] = set()
        for job in ids:
            expanded.add(job)
            first = known[job]
            if first.spec.get("array_job") == job:
                siblings = s.execute(
                    select(JobRow.id, JobRow.spec).where(
                        JobRow.user == first.user,
                        JobRow.id > job,
                        JobRow.submit_time <= first.submit_time + 60,
                    )
                )
                expanded |= {r.id for r in siblings if r.spec.get("array_job") == job}
        out[kind] = sorted(expanded)
    return out


@dataclass
class Admission:
    """The service's admission rules over its configuration, store and cluster."""

    config: ServiceConfig
    store: Store
    gpus_by_type: Callable[[], dict[str, int]] = dict
    """The cluster's GPUs by type, now (an executor's cluster may grow)."""
    identities: Mapping[str, RunAs] = field(default_factory=dict)
    """Service user -> the Unix user their jobs run as (when the service maps them)."""
    node_gpus: Callable[[], list[tuple[str, int]]] = list
    """Each node's GPU type and count, now (for jobs that ask for a node layout)."""

    def check_priority(self, priority: int, user: UserConfig) -> None:
        """Raising priority is the operators' lever (as in Slurm): users may only lower it."""
        if priority > self.config.max_user_priority and not user.admin:
            raise Refused(
                f"priority {priority} is above {self.config.max_user_priority}, the most a "
                "user may set; ask an admin",
                status=FORBIDDEN,
            )

    def check_weight(self, weight: float, user: UserConfig) -> None:
        """A job's weight is its share under the weighted policies: as with priority,
        users may lower theirs, and raise it only as far as the config allows."""
        most = user.max_weight if user.max_weight is not None else self.config.max_user_weight
        if weight > most and not user.admin:
            setting = "max_weight" if user.max_weight is not None else "max_user_weight"
            raise Refused(
                f"weight {weight:g} is above {most:g}, the most {user.name} may set "
                f"({setting}); ask an admin",
                "weight",
                status=FORBIDDEN,
            )

    def partition(self, spec: JobSpec) -> JobSpec:
        """The spec with what its partition stands for here (sbatch -p): the partition's
        virtual cluster and GPU type, as if the job had asked for them itself. A
        partition this service does not name, or one at odds with the job's own
        ``vc``/``gpu_type``, is refused (never run elsewhere than asked)."""
        name = spec.partition
        if name is None:
            return spec
        known = self.config.partitions
        part = known.get(name)
        if part is None:
            have = (
                f"there are {', '.join(sorted(known))}"
                if known
                else "this service names none ('partitions' in its config); leave it out"
            )
            raise Refused(f"no partition '{name}' here ({have})", "partition")
        for field_name, given, means in (
            ("vc", spec.vc, part.vc),
            ("gpu_type", spec.gpu_type, part.gpu_type),
        ):
            if given is not None and means is not None and given != means:
                raise Refused(
                    f"partition '{name}' means {field_name} {means}; the job asks for {given}",
                    field_name,
                )
        return spec.model_copy(
            update={"vc": part.vc or spec.vc, "gpu_type": part.gpu_type or spec.gpu_type}
        )

    def time_limit(self, spec: JobSpec) -> JobSpec:
        """The spec with its wall time as the time limits say (Slurm's DefaultTime and
        MaxTime): the partition's, the VC's and the service's maximum all hold, and
        a job over one is refused, naming it; a job that gives no wall time gets the
        most specific default (partition, then VC, then the service's), else the
        tightest maximum (as Slurm gives a partition's MaxTime), capped by it."""
        config = self.config
        levels = [
            (f"partition '{spec.partition}'", config.partitions.get(spec.partition or "")),
            (f"virtual cluster '{spec.vc}'", config.vc_time_limits.get(spec.vc or "")),
            ("this service", config.time_limits),
        ]
        given = [(where, limits) for where, limits in levels if limits is not None]
        maxima = [(limits.max_time, where) for where, limits in given if limits.max_time]
        tightest = min(maxima, default=None)
        if spec.wall_time is not None:
            if tightest is not None and spec.wall_time > tightest[0]:
                raise Refused(
                    f"asks for a wall time of {span(spec.wall_time)}; the most is "
                    f"{span(tightest[0])} (max_time of {tightest[1]})",
                    "wall_time",
                )
            return spec
        default = next((lim.default_time for _, lim in given if lim.default_time), None)
        if default is None and tightest is None:
            return spec
        chosen = min(x for x in (default, tightest and tightest[0]) if x is not None)
        return spec.model_copy(update={"wall_time": chosen})

    def check(self, spec: JobSpec, user: UserConfig) -> JobSpec:
        """What a job spec must satisfy on this service (its cluster, its state folder);
        the spec to admit (its partition read, see :meth:`partition`; its wall time
        given by the time limits, see :meth:`time_limit`)."""
        config = self.config
        spec = self.time_limit(self.partition(spec))
        if spec.script is not None and "max_retries" not in spec.model_fields_set:
            # a batch script is not run again when it fails, as Slurm's is not
            spec = spec.model_copy(update={"max_retries": config.retry.batch_retries})
        self.check_priority(spec.priority, user)
        self.check_weight(spec.weight, user)
        if spec.array is not None:
            try:
                check_array(spec.array, config.max_array_size)
            except ValueError as exc:
                raise Refused(str(exc), "array") from None
        self.check_dependency_count(sum(len(ids) for ids in spec.dependency.values()))
        if spec.exclusive and not config.allow_exclusive and not user.admin:
            raise Refused(
                "--exclusive jobs are for admins on this service (allow_exclusive: false); "
                "submit without it",
                status=FORBIDDEN,
            )
        by_type = self.gpus_by_type()
        if by_type:
            if spec.gpu_type is not None and spec.gpu_type not in by_type:
                have = ", ".join(by_type)
                raise Refused(f"no {spec.gpu_type} GPUs here (there are {have})", "gpu_type")
            limit = by_type[spec.gpu_type] if spec.gpu_type else sum(by_type.values())
            if spec.gpus > limit:
                kind = f"{spec.gpu_type} " if spec.gpu_type else ""
                raise Refused(
                    f"asks for {spec.gpus} GPUs; the cluster has {limit} {kind}GPUs", "gpus"
                )
        if spec.gpus == 0:
            self.check_cpu_only(spec)
        elif spec.nodes is not None:
            self.check_layout(spec)
        if config.vcs is not None and spec.vc is not None and spec.vc not in config.vcs:
            have = ", ".join(config.vcs)
            raise Refused(f"no virtual cluster '{spec.vc}' here (there are {have})", "vc")
        who = self.identities.get(user.name)
        runs_as = f"'{who.name}'" if who is not None else "the service's user"
        if who is not None and not who.runs_python and (spec.stage or spec.task):
            raise Refused(
                f"{runs_as} cannot run this service's Python, which stage commands and jobs "
                "given as tasks need (require_reachable_python is off); ask the operator",
                "stage" if spec.stage else "task",
            )
        state_dir = config.state_dir.resolve()
        if spec.workdir is not None:
            where = resolved(spec.workdir, "workdir")
            if not usable_folder(spec.workdir, who):  # as the job's user: no oracle of others'
                raise Refused(
                    f"{spec.workdir} is not a folder {runs_as} can enter (or it is missing)",
                    "workdir",
                )
            if where.is_relative_to(state_dir):
                raise Refused("jobs may not run inside the service's state_dir", "workdir")
        for name in ("array_index", "array_job", "array_limit"):
            if getattr(spec, name) is not None:
                raise Refused("set by corral for the tasks of an array; give 'array'", name)
        if spec.round_of is not None:
            raise Refused("set by corral for the tasks of a job run as rounds", "round_of")
        if plans_rounds(config.policy):
            check_round_job(spec, config.policy)
        for name in ("output", "error"):
            path = getattr(spec, name)
            if path is None:
                continue
            # (opened by the job's process as its user; a folder missing or not theirs
            # fails the job at its start, saying so, as under Slurm)
            if resolved(path, name).is_relative_to(state_dir):
                raise Refused(f"a job's {name} may not go inside the state_dir", name)
        if spec.error is not None and config.executor == "ray":
            raise Refused(
                "the Ray executor keeps a job's stderr with its output; leave 'error' out",
                "error",
            )
        if spec.interactive:
            spec = self.check_interactive(spec, who is None or who.runs_python)
        if spec.mail_type and wanted(spec.mail_type) and config.mail_program is None:
            raise Refused(
                "this service sends no mail (its config sets no mail_program); submit "
                "without --mail-type",
                "mail_type",
            )
        return spec

    def check_interactive(self, spec: JobSpec, runs_python: bool) -> JobSpec:
        """An interactive allocation: one process on a terminal of the service's host,
        run once (a lost terminal is not retried), never an array or rounds; its
        terminal's host is the service's Python, run as the job's user."""
        if self.config.executor != "local":
            raise Refused(
                "interactive allocations need the local executor (a terminal on another "
                "node of a Ray cluster cannot be reached yet)",
                "interactive",
            )
        if spec.array is not None or spec.task is not None or spec.stage:
            field = "array" if spec.array is not None else ("task" if spec.task else "stage")
            raise Refused("an interactive allocation runs one command: no " + field, field)
        if spec.output is not None or spec.error is not None:
            raise Refused("an interactive allocation's output is its terminal", "output")
        if not runs_python:
            raise Refused(
                "the job's user cannot run this service's Python, which holds an interactive "
                "allocation's terminal",
                "interactive",
            )
        return spec.model_copy(update={"max_retries": 0})

    def check_cpu_only(self, spec: JobSpec) -> None:
        """A job of no GPUs runs on this host's CPUs (see runtime.loop.cpu_jobs): not
        under the Ray executor, and never asking more than the service counts out."""
        if self.config.executor != "local":
            raise Refused(
                "the Ray executor runs a job's processes on its GPUs' nodes: a CPU-only job "
                "(gpus: 0) needs the local executor; ask for a GPU",
                "gpus",
            )
        cpus, memory = cpu_capacity(self.config)
        if spec.cpus_held() > cpus:
            raise Refused(
                f"asks for {spec.cpus_held()} CPUs; this service gives CPU-only jobs {cpus}",
                "cpus",
            )
        if spec.memory is not None and spec.memory * 2**20 > memory:
            raise Refused(
                f"asks for {spec.memory} MiB; this service gives jobs {memory // 2**20} MiB",
                "memory",
            )

    def check_layout(self, spec: JobSpec) -> None:
        """A job that asks for so many nodes (sbatch --nodes) gets exactly them, or is
        refused: under a policy that may move, resize or share a job's GPUs the layout
        could not be kept, and a layout no set of the cluster's nodes offers would
        wait for ever (Slurm: "Requested node configuration is not available")."""
        name = self.config.policy
        nodes = spec.nodes or 1
        if plans_rounds(name):
            raise Refused(
                f"under policy {name} jobs run as rounds of tasks placed one by one; "
                "leave 'nodes' out",
                "nodes",
            )
        try:
            cls = POLICIES[policy_key(name)]
        except (KeyError, CorralError):
            cls = None
        if cls is not None and not (
            cls.node_layouts and not (cls.elastic or cls.resizes or cls.shares_gpus)
        ):
            doing = (
                "may change a job's number of GPUs"
                if cls.elastic or cls.resizes
                else "may run a job on GPUs another job holds"
                if cls.shares_gpus
                else "places jobs in its own cells"
            )
            raise Refused(
                f"policy {name} {doing}, so a node layout cannot be kept; leave 'nodes' out",
                "nodes",
            )
        per_node = spec.gpus // nodes
        layout = self.node_gpus()
        if not layout:
            return  # (no cluster known yet: the loop's placement still keeps the layout)
        fitting = sum(
            1
            for gpu_type, count in layout
            if count >= per_node and spec.gpu_type in (None, gpu_type)
        )
        if fitting < nodes:
            kind = f"{spec.gpu_type} " if spec.gpu_type else ""
            raise Refused(
                f"asks for {nodes} nodes with {per_node} {kind}GPUs each; the cluster has "
                f"{fitting} such node{'' if fitting == 1 else 's'}",
                "nodes",
            )

    def check_dependency_count(self, count: int) -> None:
        """A job waits for at most ``max_array_size`` others (so for any one array)."""
        most = self.config.max_array_size
        if count > most:
            raise Refused(
                f"a job waits for at most {most} others (max_array_size; each task of an "
                "array named counts as one)",
                "dependency",
            )

    def tasks(self, spec: JobSpec) -> list[int | None]:
        """The array's task indices (checked against this service's max_array_size),
        or one None for a job that is not an array."""
        if not spec.array:
            return [None]
        try:
            return list(array_indices(spec.array, self.config.max_array_size))
        except ValueError as exc:
            raise Refused(str(exc), "array") from None

    def check_quota(self, s: Session, user: UserConfig, more: int) -> None:
        """Refuse when ``more`` jobs would pass the user's max_jobs_per_user."""
        # (the states not ended, named: an index's ranges, where "not ended" read them all)
        queued = s.scalar(
            select(func.count()).where(JobRow.user == user.name, JobRow.status.in_(NOT_ENDED))
        )
        if (queued or 0) + more > self.config.max_jobs_per_user:
            raise Refused(
                f"{user.name} has {queued} jobs not yet ended; {more} more would "
                f"pass {self.config.max_jobs_per_user}, the most allowed (max_jobs_per_user)",
                status=TOO_MANY,
            )

    def admit(self, s: Session, spec: JobSpec, user: UserConfig) -> Admitted:
        """Queue a checked job (its array's tasks, if any) in session ``s``."""
        indices = self.tasks(spec)
        prerun = spec.prerun_steps
        if prerun is None:
            rule = self.config.prerun
            prerun = rule.steps if rule.min_gpus and spec.gpus >= rule.min_gpus else 0
        wanted = sorted({i for group in spec.dependency.values() for i in group})
        if wanted:
            known = {
                r.id: r
                for chunk in in_chunks(wanted)
                for r in s.scalars(select(JobRow).where(JobRow.id.in_(chunk)))
            }
            missing = [i for i in wanted if i not in known]
            if missing:
                archived = s.get(ArchivedJobRow, missing[0])
                if archived is not None:  # (Slurm too refuses a job its controller forgot)
                    raise Refused(
                        f"job {missing[0]} ended {archived.status} long ago and was archived; "
                        "a job can no longer depend on it",
                        "dependency",
                    )
                raise Refused(f"no job {missing[0]}", "dependency")
            whole = with_whole_arrays(s, spec.dependency, known)
            self.check_dependency_count(sum(len(ids) for ids in whole.values()))
            spec = spec.model_copy(update={"dependency": whole})
        limit = array_limit(spec.array) if spec.array else None
        base = stored_spec(
            spec.model_copy(
                update={
                    "array": None,
                    "array_index": indices[0],
                    "array_limit": limit,
                    "script": None,
                    "export_env": None,
                }
            )
        )
        first = JobRow.queued(base, user.name, spec.priority, "Submitted")
        first.phase = "prerun" if prerun else "main"
        if spec.hold:
            first.held, first.reason = "user", HELD_REASONS["user"]  # PENDING, as Slurm shows it
        s.add(first)
        s.flush()  # (the first alone, for its id: the array's id)
        if spec.script is not None or spec.export_env is not None:
            # the script and environment, stored once for every task
            s.add(JobInputRow(job_id=first.id, script=spec.script, environment=spec.export_env))
        ids = [first.id]
        if spec.array:
            first.spec = {**first.spec, "array_job": first.id}
        if len(indices) > 1:  # the other tasks differ in their index alone (valid if the
            # first is): inserted in statements of many rows each, their ids returned
            shared = {
                "name": first.name,
                "user": first.user,
                "status": first.status,
                "reason": first.reason,
                "priority": first.priority,
                "submit_time": first.submit_time,
                "phase": first.phase,
                "held": first.held,
            }
            specs = encoded_with(first.spec, "array_index", indices[1:])
            params = [{**shared, "spec": spec} for spec in specs]
            # (a statement's rows take their ids in the order of its values, and its
            # statements run in order: sorted, the ids pair with the indices; asking
            # the driver to return them in that order costs a statement per row)
            jobs = JobRow.table()  # (the table itself: the ORM's bulk path costs 4x more)
            ids += sorted(s.connection().scalars(insert(jobs).returning(jobs.c.id), params))
        self.store.events(s, "submitted", ids, by=user.name, gpus=spec.gpus)
        return Admitted(first, ids, indices)
