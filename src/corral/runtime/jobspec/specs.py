"""What a user submits: the job spec, validated before anything is stored.

The same pydantic model checks a YAML file given to ``corral submit``, the
JSON body of ``POST /v1/jobs`` and the flags of ``corral submit --gpus ...``,
so every route refuses a bad spec with the field named and never stores half
of it. The command is an argv list: it is executed directly, never handed to
a shell, so no quoting or injection can change what runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from corral.amounts import parse_memory
from corral.errors import InputError
from corral.model.gpu_names import normalise_gpu_type
from corral.runtime.jobspec.mail_types import mail_types
from corral.runtime.jobspec.warning import WarningSignal, warning_signal
from corral.timespan import parse_begin, parse_seconds
from corral.yamlio import load_yaml, validation_error

RESERVED_ENV_PREFIX = "CORRAL_"
"""Variables the executor sets for every attempt; a spec may not override them."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

MAX_ARGS = 1024
MAX_COMMAND_BYTES = 16 * 1024
"""The command's arguments together (real commands are well under; the kernel's
own limit is about 2 MB, and every listing of the queue carries commands)."""
MAX_ENV_VARS = 256
MAX_ENV_BYTES = 64 * 1024
MAX_PATH = 4096
MAX_SCRIPT_BYTES = 512 * 1024
"""A batch script's text, stored at submission (sbatch's max_script_size is 4 MB; a
request body here is at most 1 MiB)."""
MAX_EXPORT_VARS = 4096
MAX_EXPORT_BYTES = 256 * 1024
"""The submitting shell's environment (``--export``): a conda or module environment is
a few to a few tens of KiB."""
NOT_EXPORTED = (RESERVED_ENV_PREFIX, "SLURM_")
"""Prefixes of the submitting shell's variables a job never inherits: corral and
Slurm set their own for each attempt (a job submitted from inside a job would
otherwise carry its parent's ids and token)."""
MAX_ARRAY_SIZE = 4_000_001
"""The largest ``max_array_size`` a service may set (Slurm's own ceiling for its
MaxArraySize): a spec is checked against it alone, without listing its tasks."""
DEFAULT_MAX_ARRAY_SIZE = 10_001
"""A service's ``max_array_size`` unless its config says: task indices 0-10000."""
MAX_SECONDS = 366 * 86400.0
"""The longest duration or wall time a job may give: a year. Longer values say nothing
a policy can use, and ratios beyond this break the policies' LPs (see JobSpec)."""
MIN_WEIGHT, MAX_WEIGHT = 1e-3, 1e3
"""A job's weight in weighted objectives: a million to one between any two jobs,
which is wider than any share a cluster gives, and keeps every LP well scaled."""
MAX_STEPS = 10**12
MAX_BATCH = 10_000_000
"""The largest global batch size a job may state, or report in a heartbeat."""
"""The most steps (iterations) a job may name."""
_ARRAY = re.compile(r"^\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*$")

DependencyKind = Literal["after", "afterany", "afterok", "afternotok"]
"""Slurm's dependency kinds: after the other job started (or ended without starting),
after it ended, after it succeeded, after it failed."""


def array_limit(text: str) -> int | None:
    """The most tasks of an array that may run at once: ``0-9%2`` -> 2 (None: no limit)."""
    _, sep, limit = text.partition("%")
    if not sep:
        return None
    if not limit.strip().isdigit() or int(limit) < 1:
        raise ValueError(f"'{text}': give the most tasks at once as %N with N >= 1 (0-9%2)")
    return int(limit)


def _array_parts(text: str, max_size: int) -> list[range]:
    """The ranges an array's text names, each checked against ``max_size`` (Slurm's
    MaxArraySize: task indices run from 0 to ``max_size - 1``) before anything is
    listed, so a text naming millions of tasks costs nothing to refuse."""
    array_limit(text)
    text = text.partition("%")[0]
    if not _ARRAY.match(text.replace(" ", "")):
        raise ValueError(f"'{text}' is not an array (e.g. 0-9, 1,3,5 or 0-20:5)")
    parts = []
    for part in text.replace(" ", "").split(","):
        bounds, _, step = part.partition(":")
        lo, _, hi = bounds.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first or (step and int(step) < 1):
            raise ValueError(f"'{part}': give start-end with start <= end and a step >= 1")
        if last >= max_size:
            raise ValueError(
                f"task index {last} is past the largest this service takes, {max_size - 1} "
                f"(max_array_size {max_size}, Slurm's MaxArraySize)"
            )
        parts.append(range(first, last + 1, int(step or 1)))
    return parts


def check_array(text: str, max_size: int = MAX_ARRAY_SIZE) -> None:
    """Raise ValueError when ``text`` is not an array of indices below ``max_size``."""
    _array_parts(text, max_size)


def array_indices(text: str, max_size: int = DEFAULT_MAX_ARRAY_SIZE) -> list[int]:
    """Task indices of an array: ``0-9``, ``1,3,5``, ``0-20:5`` (start-end:step), with
    ``%N`` (at most N at once, Slurm's throttle) allowed at the end; every index below
    ``max_size`` (so an array has at most that many tasks)."""
    out: set[int] = set()
    for part in _array_parts(text, max_size):
        out.update(part)
    return sorted(out)


def dependency_parts(text: str) -> tuple[dict[str, list[int]], bool, bool]:
    """Slurm's ``--dependency``: the jobs to wait for by kind, whether any one met
    condition is enough (``?`` between conditions, Slurm's OR; ``,`` is AND and the two
    do not mix), and whether the job is a ``singleton`` (it waits for the earlier jobs
    of its name and user to end)."""
    text = text.replace(" ", "")
    if "?" in text and "," in text:
        raise ValueError(f"'{text}': use ',' (all of) or '?' (any of) between conditions, not both")
    words = text.split("?" if "?" in text else ",")
    singleton = "singleton" in words
    rest = ",".join(w for w in words if w != "singleton")
    return (parse_dependency(rest) if rest else {}), "?" in text, singleton


def parse_dependency(text: str) -> dict[str, list[int]]:
    """Slurm's ``--dependency`` form: ``afterok:12:13,after:9`` (see
    :func:`dependency_parts` for ``?`` and ``singleton``)."""
    out: dict[str, list[int]] = {}
    for part in text.replace(" ", "").replace("?", ",").split(","):
        kind, *ids = part.split(":")
        if kind not in DependencyKind.__args__ or not ids:  # type: ignore[attr-defined]
            raise ValueError(
                f"'{part}' is not a dependency (e.g. afterok:12, after:9:10, afterany:7)"
            )
        try:
            out.setdefault(kind, []).extend(int(i) for i in ids)
        except ValueError:
            raise ValueError(f"'{part}': job ids are numbers") from None
    return out


TASK_RUNNER = ["python", "-m", "corral.train.run_task"]
"""The command of a job given as a task (``python`` is the service's own)."""
ROUND_RUNNER = ["python", "-m", "corral.train.rounds"]
"""The command of one task of a round (policies that plan rounds: hare)."""
WARM_MODULES = (TASK_RUNNER[2], ROUND_RUNNER[2])
"""Runners a standby worker has loaded: a job whose command is one starts warm."""
KEEPER_MODULE = "corral.train.round_keeper"
"""What holds a job run as rounds between its tasks (started by the executor)."""


class TaskSpec(BaseModel):
    """A job given as a task factory (see :mod:`corral.train.task`): it can start in a
    standby worker and be switched warm."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    factory: str = Field(
        max_length=200,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$",
        description="module:function building the task, e.g. corral.examples.tasks:digits",
    )
    steps: int = Field(ge=1, le=10**12, description="steps in all")
    kwargs: dict[str, str | int | float | bool] = Field(
        default_factory=dict, max_length=64, description="keyword arguments of the factory"
    )
    round_steps: int | None = Field(
        None,
        ge=1,
        le=10**6,
        description="under a policy that plans rounds (hare): mini-batches per round, one "
        "optimiser update each, shared among the round's tasks (unset: one per GPU asked)",
    )

    @model_validator(mode="after")
    def _whole_rounds(self) -> TaskSpec:
        if self.round_steps is not None and self.steps % self.round_steps:
            raise ValueError(
                f"steps ({self.steps}) must be a whole number of rounds of "
                f"round_steps ({self.round_steps})"
            )
        return self

    @field_validator("kwargs")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not key.isidentifier():
                raise ValueError(f"'{key}' is not a keyword argument name")
        return value

    def argv(self) -> list[str]:
        """The task runner's arguments (after ``python -m corral.train.run_task``)."""
        out = [self.factory, "--steps", str(self.steps)]
        for key, value in self.kwargs.items():
            out += ["--kw", f"{key}={json.dumps(value)}"]
        return out


class RoundOf(BaseModel):
    """Which job and round a task of a round belongs to (set by corral)."""

    model_config = ConfigDict(extra="forbid")

    job: int = Field(ge=1)
    round: int = Field(ge=0)
    part: int = Field(ge=0)
    parts: int = Field(ge=1)
    rounds: int = Field(ge=1)


MAX_DEPENDENCIES = MAX_ARRAY_SIZE
"""Jobs one job's stored spec may wait for, an array's tasks each counted (an array's
id stands for all its tasks, Slurm's afterok:ARRAYID). A service holds dependencies
to its own ``max_array_size`` at submission; this bound is the most any may set."""


class JobSpec(BaseModel):
    """A training job as its owner describes it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field("job", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    command: list[str] = Field(
        min_length=1,
        max_length=MAX_ARGS,
        description="argv; run directly, never by a shell (unset for a task: its runner)",
    )
    task: TaskSpec | None = Field(
        None, description="the job as a task factory, startable in a standby worker"
    )
    stage: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_ARGS,
        description="argv that stages the job's inputs (copies data to local disk), run "
        "once before its command; under liquid, ahead of time while the job waits",
    )
    gpus: int = Field(
        1,
        ge=0,
        le=4096,
        strict=True,
        description="GPUs of the gang (0: a CPU-only job, placed by the service beside "
        "GPU jobs on CPUs and memory, never shown to the policy)",
    )
    nodes: int | None = Field(
        None,
        ge=1,
        le=1024,
        strict=True,
        description="nodes the gang spans exactly, gpus/nodes on each (sbatch --nodes "
        "with --gpus-per-node); unset: the policy's placement chooses",
    )
    tasks_per_node: int | None = Field(
        None,
        ge=1,
        le=1024,
        strict=True,
        description="processes an srun line in the job's script starts on each node "
        "(sbatch --ntasks-per-node, or --ntasks over the nodes); unset: 1",
    )
    gpu_type: str | None = Field(
        None, max_length=32, description="run only on this GPU type (any when unset)"
    )
    job_type: str = Field(
        "generic", min_length=1, max_length=64, description="throughput-profile key"
    )
    priority: int = Field(0, ge=-1000, le=1000, description="higher runs first among equals")
    weight: float = Field(
        1.0,
        ge=MIN_WEIGHT,
        le=MAX_WEIGHT,
        description=f"weight in weighted objectives ({MIN_WEIGHT:g} to {MAX_WEIGHT:g})",
    )
    max_retries: int = Field(2, ge=0, le=100, description="failed attempts retried")
    wall_time: float | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="seconds (or 1h30m, HH:MM:SS) per attempt, at most a year",
    )
    duration: float | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="expected run time (seconds, 1h30m or HH:MM:SS; at most a year), for "
        "policies that rank by work left; unset: wall_time, else an estimate from the "
        "owner's finished jobs",
    )
    vc: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="virtual cluster (Slurm's account, Kueue's queue) whose quota it uses",
    )
    partition: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Slurm's partition (sbatch -p): the service's 'partitions' config "
        "maps each name to a virtual cluster, a GPU type, or both",
    )
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV_VARS)
    export_env: dict[str, str] | None = Field(
        None,
        max_length=MAX_EXPORT_VARS,
        description="the submitting shell's environment, the job's base environment "
        "(sbatch --export; corral submit sends it unless --export=NONE): env is "
        "applied over it; CORRAL_* and SLURM_* variables are dropped. Stored once per "
        "submission, not shown in the job's spec",
    )
    script: str | None = Field(
        None,
        max_length=MAX_SCRIPT_BYTES,
        description="a batch script's text as submitted: the job runs this copy (written "
        "to its folder at each start), not the file at script_path, which may change "
        "or go. Stored once per submission, printed by 'corral show --script'",
    )
    script_path: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="where the script was when submitted: the word of command that names "
        "it, replaced by the stored copy when the job starts",
    )
    interactive: bool = Field(
        False,
        description="an interactive allocation (corral alloc, corral run --pty): its "
        "command runs on a pseudo-terminal its owner attaches to through the service; "
        "it ends when the command exits, at its time limit or on cancel, and is never "
        "preempted or suspended",
    )
    signal: str | None = Field(
        None,
        max_length=32,
        description="sbatch's --signal=[B:]SIG[@SECS]: SIG sent SECS (60 unless given) "
        "before the time limit, and before corral's own preemptions and suspends (which "
        "wait up to signal_lead_max for it), to the batch script's shell alone with B:, "
        "else to the job's other processes (all of a job given as a command)",
    )
    mail_type: list[str] | None = Field(
        None,
        max_length=8,
        description="sbatch's --mail-type: BEGIN, END, FAIL, REQUEUE, TIME_LIMIT, ALL, NONE, "
        "ARRAY_TASKS (each task's mail; else one for the whole array), sent through the "
        "service's mail_program",
    )
    mail_user: str | None = Field(
        None,
        max_length=254,
        pattern=r"^[A-Za-z0-9._%+][A-Za-z0-9._%+-]*(@[A-Za-z0-9.-]+)?$",
        description="who gets the mail (sbatch's --mail-user; unset: the job's user)",
    )
    submit_dir: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="the directory corral submit ran in (SLURM_SUBMIT_DIR); unset: the "
        "working directory",
    )
    workdir: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="working directory (an absolute path; default: the job's own folder)",
    )
    cpus: int | None = Field(
        None, ge=1, le=4096, description="CPUs (Slurm's --cpus-per-task; unset: no limit)"
    )
    memory: int | None = Field(
        None, description="memory in MiB, or 16G, 512M (Slurm's --mem; unset: no limit)"
    )
    total_steps: int | None = Field(
        None, ge=1, le=MAX_STEPS, description="steps to the end (for progress)"
    )
    model: str | None = Field(
        None,
        max_length=64,
        description="the model it trains, when the performance model knows it (bert, cifar10 "
        "or resnet18, deepspeech2, imagenet or resnet50, ncf, yolov3): goodput policies "
        "then model its throughput",
    )
    batch_size: int | None = Field(
        None,
        ge=1,
        le=MAX_BATCH,
        description="its global batch size (goodput policies may tune it)",
    )
    target_loss: float | None = Field(
        None,
        gt=0,
        le=1e12,
        description="the job trains until its loss reaches this: its work left is predicted "
        "from the loss curve its heartbeats report (Optimus' fit)",
    )
    prerun_steps: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="iterations of a 1-GPU pre-run first (0: none; unset: config)",
    )
    dependency: dict[DependencyKind, list[int]] = Field(
        default_factory=dict,
        description="jobs to wait for, as Slurm's --dependency: {afterok: [12], after: [9]}, "
        "or its text (afterok:12,after:9; afterok:12?afternotok:13; singleton)",
    )
    dependency_any: bool = Field(
        False,
        description="start when any one dependency is met (Slurm's '?'), not all of them",
    )
    singleton: bool = Field(
        False,
        description="wait until the earlier jobs of the same name and user have ended "
        "(Slurm's --dependency singleton)",
    )
    begin: float | None = Field(
        None,
        ge=0,
        le=1e12,
        description="not before this time (Unix time; sbatch's --begin)",
    )
    hold: bool = Field(
        False, description="submitted held: it waits until released (sbatch -H, corral release)"
    )
    requeue: bool = Field(
        True,
        description="queue the job again when its node fails (false: sbatch --no-requeue, "
        "it ends FAILED instead)",
    )
    exclusive: bool = Field(
        False,
        description="its nodes run no other job while it runs (sbatch --exclusive): it "
        "starts only on nodes with no job, and their other GPUs stay unused meanwhile",
    )
    array: str | None = Field(
        None,
        max_length=200,
        description="submit one task per index (0-9, 1,3,5, 0-20:5); each task sees "
        "CORRAL_ARRAY_INDEX",
    )
    array_index: int | None = Field(None, ge=0, description="set by corral: this task's index")
    array_job: int | None = Field(None, ge=1, description="set by corral: the array's first job")
    array_limit: int | None = Field(
        None, ge=1, description="set by corral: at most this many of the array's tasks at once"
    )
    round_of: RoundOf | None = Field(
        None, description="set by corral: the job and round this task belongs to"
    )
    output: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="file for the job's output instead of the service's log (absolute; "
        "%j job id, %a array index, %A array job, %x name, %u user)",
    )
    error: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="file for the job's standard error apart from its output (sbatch's "
        "--error; absolute, with the patterns output takes)",
    )

    @model_validator(mode="before")
    @classmethod
    def _task_command(cls, data: Any) -> Any:
        """A task needs no command: its runner is the command."""
        if isinstance(data, dict) and data.get("command") is None and data.get("task"):
            task = TaskSpec.model_validate(data["task"])
            data = {**data, "command": [*TASK_RUNNER, *task.argv()]}
            data.setdefault("total_steps", task.steps)
        return data

    def warm_argv(self) -> list[str] | None:
        """The runner module and its arguments when this job may start in a standby
        worker (not when it stages inputs first: that runs as its own program)."""
        if self.stage or len(self.command) < 3 or self.command[:2] != ["python", "-m"]:
            return None
        return self.command[2:] if self.command[2] in WARM_MODULES else None

    def round_argv(self, round_: int, part: int) -> list[str]:
        """The command of task ``part`` of round ``round_`` of this job (given as a task)."""
        assert self.task is not None
        parts, per_round = self.gpus, self.round_steps()
        out = [*ROUND_RUNNER, self.task.factory, "--round", str(round_), "--part", str(part)]
        out += ["--parts", str(parts), "--round-steps", str(per_round)]
        out += ["--rounds", str(self.rounds())]
        for key, value in self.task.kwargs.items():
            out += ["--kw", f"{key}={json.dumps(value)}"]
        return out

    def keeper_argv(self, socket: Path) -> list[str]:
        """The round keeper's module and arguments for this task's job (a task of a
        round): the task's own arguments (the keeper ignores its round and part)."""
        assert self.round_of is not None and self.command[:3] == ROUND_RUNNER
        return [KEEPER_MODULE, *self.command[3:], "--socket", str(socket)]

    def round_steps(self) -> int:
        """Mini-batches per round, when run as rounds (unset: one per GPU asked)."""
        return (self.task.round_steps if self.task else None) or self.gpus

    def rounds(self) -> int:
        """Rounds in all, when run as rounds (its steps over the mini-batches per round)."""
        assert self.task is not None
        return max(1, self.task.steps // self.round_steps())

    @field_validator("command", "stage")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value[0].strip():
            raise ValueError("the program (first element) is empty")
        if any("\x00" in part for part in value):
            raise ValueError("arguments may not contain NUL bytes")
        size = sum(len(part.encode()) + 1 for part in value)
        if size > MAX_COMMAND_BYTES:
            raise ValueError(
                f"the command is {size} bytes; the most is {MAX_COMMAND_BYTES} "
                "(put long arguments in a file the job reads)"
            )
        return value

    @field_validator("workdir", "output", "error", "script_path", "submit_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and ("\x00" in value or not value.startswith("/")):
            raise ValueError("give an absolute path")
        return value

    @field_validator("dependency")
    @classmethod
    def _dependency(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        ids = [i for group in value.values() for i in group]
        if len(ids) > MAX_DEPENDENCIES:
            raise ValueError(
                f"a job waits for at most {MAX_DEPENDENCIES} others (each task of an array "
                "named counts as one)"
            )
        if any(not 1 <= i < 2**63 for i in ids):
            raise ValueError("job ids are positive")
        return {kind: sorted(set(group)) for kind, group in value.items() if group}

    @model_validator(mode="after")
    def _cpu_only(self) -> JobSpec:
        """A job without GPUs (``gpus: 0``) runs one process group on one node, on CPUs
        and memory the service accounts: what only GPUs mean is refused for it."""
        if self.gpus:
            return self
        given = [
            name
            for name, bad in (
                ("nodes", (self.nodes or 1) > 1),
                ("gpu_type", self.gpu_type is not None),
                ("task", self.task is not None),
                ("prerun_steps", bool(self.prerun_steps)),
                ("exclusive", self.exclusive),
            )
            if bad
        ]
        if given:
            raise ValueError(
                f"{given[0]}: a CPU-only job (gpus: 0) runs on one node's CPUs, beside GPU "
                f"jobs; leave {given[0]} out or ask for GPUs"
            )
        return self

    def cpus_held(self) -> int:
        """The CPUs the job is counted as holding: its --cpus-per-task; a CPU-only job
        that gives none holds one (Slurm's default), a GPU job's are not counted."""
        return self.cpus or (0 if self.gpus else 1)

    @model_validator(mode="after")
    def _even_layout(self) -> JobSpec:
        if self.nodes is not None and self.gpus % self.nodes:
            raise ValueError(
                f"nodes: {self.gpus} GPUs do not split evenly over {self.nodes} nodes "
                "(give gpus as nodes x GPUs per node)"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _dependency_text(cls, data: Any) -> Any:
        """A dependency given as Slurm's text sets the OR and singleton flags too."""
        if isinstance(data, dict) and isinstance(data.get("dependency"), str):
            ids, any_of, singleton = dependency_parts(data["dependency"])
            data = {**data, "dependency": ids}
            if any_of:
                data["dependency_any"] = True
            if singleton:
                data["singleton"] = True
        return data

    @field_validator("begin", mode="before")
    @classmethod
    def _begin(cls, value: Any) -> Any:
        return None if value is None else parse_begin(value)

    @field_validator("array")
    @classmethod
    def _array(cls, value: str | None) -> str | None:
        if value is not None:
            check_array(value)  # (the service's own max_array_size is checked at submission)
        return value

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> int | None:
        return None if value is None else parse_memory(value)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        from corral.perf.pollux_models import MODEL_ALIASES, POLLUX_MODELS, pollux_model

        if pollux_model(value) is None:
            known = ", ".join([*POLLUX_MODELS, *MODEL_ALIASES])
            raise ValueError(f"no performance model for '{value}' (known: {known})")
        return value.strip().lower()

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, value: str | None) -> str | None:
        return None if value is None or not value.strip() else normalise_gpu_type(value)

    @field_validator("wall_time", "duration", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float | None:
        return None if value is None else parse_seconds(value)

    @field_validator("mail_type", mode="before")
    @classmethod
    def _mail_type(cls, value: Any) -> Any:
        if isinstance(value, str):
            return mail_types(value)
        if isinstance(value, list):
            return mail_types(",".join(map(str, value)))
        return value

    @field_validator("signal")
    @classmethod
    def _signal(cls, value: str | None) -> str | None:
        if value is None:
            return None
        warning = warning_signal(value)
        import signal as signals

        name = signals.Signals(warning.number).name.removeprefix("SIG")
        return f"{'B:' if warning.batch else ''}{name}@{warning.lead:g}"

    def warning(self) -> WarningSignal | None:
        """The job's ``--signal``, read (None: none asked)."""
        return None if self.signal is None else warning_signal(self.signal)

    @field_validator("export_env", mode="before")
    @classmethod
    def _exported(cls, value: Any) -> Any:
        """The shell's own CORRAL_* and SLURM_* variables are not the job's."""
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if not str(k).startswith(NOT_EXPORTED)}
        return value

    @field_validator("export_env")
    @classmethod
    def _export_env(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        for key, text in value.items():
            if not key or "=" in key or "\x00" in key or "\x00" in text:
                raise ValueError(f"'{key[:64]}' is not a variable a process can be given")
        size = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in value.items())
        if size > MAX_EXPORT_BYTES:
            raise ValueError(
                f"the exported environment is {size} bytes; the most is {MAX_EXPORT_BYTES} "
                "(submit with --export=NONE, or a list of the variables the job needs)"
            )
        return value

    @field_validator("script")
    @classmethod
    def _script(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("a script may not contain NUL bytes")
        return value

    @model_validator(mode="after")
    def _script_named(self) -> JobSpec:
        if self.script is not None and (
            self.script_path is None or self.script_path not in self.command[1:]
        ):
            raise ValueError(
                "script: give script_path too, the word of command that names the script "
                "(after its interpreter)"
            )
        return self

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_NAME.match(key):
                raise ValueError(f"'{key}' is not a valid variable name")
            if key.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"'{key}': {RESERVED_ENV_PREFIX}* variables are set by corral")
            if "\x00" in value[key]:
                raise ValueError(f"'{key}': values may not contain NUL bytes")
        size = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in value.items())
        if size > MAX_ENV_BYTES:
            raise ValueError(f"the environment is {size} bytes; the most is {MAX_ENV_BYTES}")
        return value


def load_job_spec(path: str | Path) -> JobSpec:
    """A job spec from YAML; errors name the file, the line and the field."""
    doc = load_yaml(path)
    source = str(path)
    if not isinstance(doc, dict):
        raise InputError(source, 1, None, "a job spec is a mapping (name, command, gpus, ...)")
    if isinstance(doc.get("command"), str):
        line = doc.line_of("command") if hasattr(doc, "line_of") else None
        raise InputError(
            source, line, "command", "give the command as a list (argv), e.g. [python, train.py]"
        )
    try:
        return JobSpec.model_validate(dict(doc))
    except ValidationError as exc:
        raise validation_error(source, doc, exc) from None
