"""The service's configuration file (``corral serve --config corral.yaml``).

Example::

    host: 127.0.0.1          # loopback unless you mean to expose the API
    port: 8470
    state_dir: corral-state  # store and logs, private to the service (relative to this file)
    jobs_dir: null           # jobs' own folders; default corral-state-jobs beside it
    store: null              # SQLAlchemy URL; default sqlite in state_dir
    policy: tiresias-las
    policy_options: {queues: 2, thresholds: [600]}
    gpus: auto               # NVIDIA GPUs found by nvidia-smi, or a list:
    #  - {type: V100, count: 2}
    #  - {type: K80, count: 2}
    users:
      - {name: alice, token: "s3cret-a", unix_user: alice}  # as root: jobs run as alice
      - {name: admin, token_sha256: "<hex>", admin: true}

Relative paths are resolved against the directory of the file, so a config
means the same whichever directory the service is started from.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from corral.amounts import parse_memory
from corral.errors import InputError
from corral.model.gpu_names import normalise_gpu_type
from corral.runtime.jobspec.specs import DEFAULT_MAX_ARRAY_SIZE, MAX_ARRAY_SIZE, MAX_SECONDS
from corral.timespan import parse_seconds
from corral.yamlio import load_yaml, validation_error

_VC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def hash_token(token: str) -> str:
    """Tokens are compared by their SHA-256, so configs and the store need not hold them."""
    return hashlib.sha256(token.encode()).hexdigest()


class UserConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    token: str | None = Field(None, min_length=8)
    token_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    admin: bool = False
    unix_user: str | None = Field(
        None,
        min_length=1,
        max_length=32,
        pattern=r"^[A-Za-z_][A-Za-z0-9._-]*\$?$",
        description="Unix account the user's jobs run as (the service must run as root)",
    )

    max_gpus: int | None = Field(
        None,
        ge=0,
        description="GPUs this user's running jobs may hold at once (overrides limits.user_gpus)",
    )
    max_running: int | None = Field(
        None,
        ge=0,
        description="jobs of this user that may run at once (overrides limits.user_running)",
    )
    shares: float = Field(
        1.0, gt=0, le=1e6, description="the user's share of the cluster under fair_share"
    )
    max_weight: float | None = Field(
        None,
        gt=0,
        description="the largest weight this user may give a job (overrides max_user_weight)",
    )

    @model_validator(mode="after")
    def _one_token(self) -> UserConfig:
        if (self.token is None) == (self.token_sha256 is None):
            raise ValueError("give exactly one of token, token_sha256")
        return self

    @property
    def digest(self) -> str:
        return self.token_sha256 or hash_token(self.token or "")


class TimeLimits(BaseModel):
    """Slurm's ``DefaultTime`` and ``MaxTime``: the wall time a job that gives none
    is given, and the most one may ask for (seconds, or 1h30m, HH:MM:SS, D-HH:MM:SS).
    Without them a job that gives no limit holds its GPUs until it ends by itself."""

    model_config = ConfigDict(extra="forbid")
    default_time: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="wall time of a job that gives none"
    )
    max_time: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="the longest wall time a job may ask for"
    )

    @field_validator("default_time", "max_time", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float | None:
        return None if value is None else parse_seconds(value)

    @model_validator(mode="after")
    def _default_within_max(self) -> TimeLimits:
        if None not in (self.default_time, self.max_time) and (
            self.default_time > self.max_time  # type: ignore[operator]
        ):
            raise ValueError("default_time is longer than max_time")
        return self


class Partition(TimeLimits):
    """What a Slurm partition name means here: a virtual cluster, a GPU type, or both
    (a job that names the partition gets them, as if it had asked for them itself),
    and its own time limits (over the VC's and the service's)."""

    model_config = ConfigDict(extra="forbid")
    vc: str | None = Field(None, min_length=1, max_length=64)
    gpu_type: str | None = Field(None, min_length=1, max_length=32)

    @field_validator("gpu_type")
    @classmethod
    def _type(cls, value: str | None) -> str | None:
        return None if value is None else normalise_gpu_type(value)

    @model_validator(mode="after")
    def _says_something(self) -> Partition:
        if self.vc is None and self.gpu_type is None:
            raise ValueError("give the partition a 'vc', a 'gpu_type', or both")
        return self


class GpuGroup(BaseModel):
    """Virtual GPUs of one type (a machine without GPUs runs jobs on the CPU)."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field(min_length=1, max_length=32)
    count: int = Field(ge=1, le=1024)
    node: str | None = Field(None, min_length=1, max_length=128)

    @field_validator("type")
    @classmethod
    def _type(cls, value: str) -> str:
        return normalise_gpu_type(value)


class LimitsConfig(BaseModel):
    """Caps around every policy, as Slurm's QOS and association limits: a job that
    would pass one waits (its reason names the limit) whatever its policy ranks."""

    model_config = ConfigDict(extra="forbid")
    user_gpus: int | None = Field(
        None, ge=0, description="GPUs one user's running jobs may hold (MaxTRESPerUser=gres/gpu)"
    )
    user_running: int | None = Field(
        None, ge=0, description="jobs of one user that may run at once (MaxJobsPerUser)"
    )
    vc_gpus: dict[str, int] = Field(
        default_factory=dict,
        description="virtual cluster (account) -> GPUs its running jobs may hold (GrpTRES)",
    )
    vc_running: dict[str, int] = Field(
        default_factory=dict,
        description="virtual cluster (account) -> jobs of it that may run at once (GrpJobs)",
    )

    @field_validator("vc_gpus", "vc_running")
    @classmethod
    def _per_vc(cls, value: dict[str, int]) -> dict[str, int]:
        for name, cap in value.items():
            if not _VC_NAME.match(name):
                raise ValueError(f"'{name}' is not a valid virtual cluster name")
            if cap < 0:
                raise ValueError(f"the limit of '{name}' must be >= 0")
        return value


class FairShareConfig(BaseModel):
    """Slurm's classic fair share: each user's jobs are ordered against others' by the
    user's recent GPU use (decayed with a half-life) over their shares."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    half_life: float = Field(
        7 * 86400.0, gt=0, description="seconds for past use to count half (PriorityDecayHalfLife)"
    )
    weight: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="priority points a user with no recent use gains "
        "(PriorityWeightFairshare); added to each job's own priority",
    )
    refresh: float = Field(60.0, gt=0, description="seconds between recomputations of the use")

    @field_validator("half_life", "refresh", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float:
        from corral.timespan import parse_seconds

        return parse_seconds(value)


class AuthConfig(BaseModel):
    """How failed tokens are slowed, per client address (see corral.api.auth_guard)."""

    model_config = ConfigDict(extra="forbid")
    failures: int = Field(20, ge=1, description="failed tokens from one address that lock it out")
    window: float = Field(60.0, gt=0, description="seconds over which the failures count")
    backoff_max: float = Field(
        300.0, ge=1, description="the longest lock-out (it doubles from 1 s at each in a row)"
    )


class RetryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backoff: float = Field(5.0, ge=0, description="seconds before the first retry")
    backoff_max: float = Field(600.0, ge=0, description="cap of the doubling back-off")
    batch_retries: int = Field(
        0,
        ge=0,
        le=100,
        description="failed attempts a batch script (corral submit script.sh) is run "
        "again, unless it gives --max-retries: 0, as Slurm never re-runs a failed batch "
        "job (a node's failure requeues it all the same, see node_requeues); other jobs' "
        "default is their spec's max_retries, 2",
    )
    node_requeues: int = Field(
        5,
        ge=0,
        le=1000,
        description="node failures a job is requeued after without using its retries "
        "(Slurm's --requeue and MaxBatchRequeue); later ones count as failures; 0: each counts",
    )


class WorkersConfig(BaseModel):
    """Standby workers (PipeSwitch): processes with PyTorch loaded, for jobs given as tasks."""

    model_config = ConfigDict(extra="forbid")
    standby: int = Field(
        0, ge=0, le=8, description="idle workers kept per GPU (0: off; each holds PyTorch)"
    )
    park: int = Field(
        0,
        ge=0,
        le=8,
        description="preempted jobs using corral.train kept paused per GPU, their state "
        "resident (host memory), so one started again on the same GPUs resumes in place "
        "instead of restarting from its checkpoint (0: off; each holds its process's memory)",
    )
    keep: int = Field(
        0,
        ge=0,
        le=8,
        description="under a policy that plans rounds (hare): jobs per GPU whose state a "
        "round keeper holds in memory between their tasks, so a task neither rebuilds the "
        "model nor reads the state from disk (0: off; needs standby workers; each holds "
        "its job's memory)",
    )
    warm: bool = Field(
        False,
        description="task jobs run in a warm worker per user and GPU that keeps its CUDA "
        "context and memory pool between that user's jobs (PipeSwitch's active-standby "
        "worker), started while that user's jobs wait (never on more GPUs than the user "
        "may hold); a job that starts before its worker is ready starts as before",
    )
    warm_idle: float = Field(
        300.0, gt=0, le=86400, description="seconds a warm worker waits for a job before it ends"
    )
    preload: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="modules a standby worker imports ahead (e.g. sklearn.datasets)",
    )

    @field_validator("preload")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        for name in value:
            if not all(part.isidentifier() for part in name.split(".")):
                raise ValueError(f"'{name}' is not a module name")
        return value


class RayConfig(BaseModel):
    """Where the Ray executor runs jobs (``executor: ray``)."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = Field(
        None,
        description="an existing Ray cluster (host:port of its head, or 'auto'); its "
        "nodes' GPUs and accelerator types are the inventory. Unset: the service starts "
        "a Ray instance on 127.0.0.1 whose resources are the configured gpus",
    )
    virtual_gpus: bool = Field(
        False,
        description="the cluster's GPUs are Ray resources without devices behind them "
        "(jobs get no CUDA_VISIBLE_DEVICES); a local instance's follow 'gpus'",
    )
    namespace: str = Field("corral", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    poll_interval: float = Field(
        2.0, gt=0, description="seconds between checks of which Ray nodes are alive"
    )
    leave_after: float = Field(
        20.0,
        gt=0,
        le=50,
        description="seconds a configured cluster's head may be away before the service "
        "leaves Ray (it joins again when the head answers); under Ray's 60, after which "
        "Ray's driver ends the service's process",
    )


class PrerunConfig(BaseModel):
    """A few iterations on one GPU before a large gang is allocated."""

    model_config = ConfigDict(extra="forbid")
    min_gpus: int = Field(0, ge=0, description="gangs of at least this many GPUs pre-run (0: off)")
    steps: int = Field(3, ge=1)


class CpuJobsConfig(BaseModel):
    """What the service gives jobs of no GPUs (``gpus: 0``, a pipeline's CPU-only
    steps): the CPUs and memory it counts them against."""

    model_config = ConfigDict(extra="forbid")
    cpus: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="CPUs counted out to CPU-only jobs (each holds its --cpus-per-task, 1 "
        "unless given) and to GPU jobs that give --cpus-per-task; unset: the CPUs this "
        "service may use",
    )
    memory: int | None = Field(
        None,
        description="memory counted out to the jobs that give --mem (16G, or MiB); unset: "
        "90% of this host's",
    )

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> int | None:
        return None if value is None else parse_memory(value)


class ServiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    host: str = "127.0.0.1"
    port: int = Field(8470, ge=0, le=65535)
    state_dir: Path = Path("corral-state")
    jobs_dir: Path | None = Field(
        None,
        description="jobs' own folders (working directory, checkpoints), one per job; "
        "default: '<state_dir>-jobs' beside the state directory, never inside it",
    )
    store: str | None = None
    policy: str = "tiresias-las"
    policy_options: dict[str, Any] = Field(default_factory=dict)
    placement: str | None = None
    admission: str | None = Field(
        None,
        description="an admission rule of your own, file.py:Class[key=value,...]: it may "
        "refuse or delay arriving jobs before the policy sees them (see "
        "corral.policies.admission); unset: the policy's own (every job admitted)",
    )
    executor: Literal["local", "ray"] = "local"
    ray: RayConfig = Field(default_factory=RayConfig)
    gpus: Literal["auto"] | list[GpuGroup] = "auto"
    users: list[UserConfig] = Field(min_length=1)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    prerun: PrerunConfig = Field(default_factory=PrerunConfig)
    cpu_jobs: CpuJobsConfig = Field(default_factory=CpuJobsConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    stop_grace: float = Field(30.0, ge=0, description="seconds from SIGTERM to SIGKILL")
    log_limit: int | None = Field(
        2**30,
        ge=4096,
        description="bytes of a job's output its attempt's log keeps (the rest is "
        "discarded, the log saying where it was cut); null: no limit. Logs live in "
        "state_dir, beside the store: one job's output must not fill its disk",
    )
    job_max_processes: int | None = Field(
        10000,
        ge=16,
        description="processes and threads one attempt may have at once (its cgroup's "
        "pids.max: cgroups v2 with the pids controller delegated to the service, or v1's "
        "pids controller mounted and the service root; elsewhere not enforced); null: "
        "no limit",
    )
    job_memory: Literal["auto"] | int | None = Field(
        "auto",
        description="memory per GPU a job that gives no --mem may use, held by its cgroup "
        "where the service has one to give (cgroups v2 delegated, or v1's memory "
        "controller mounted and the service root; never an rlimit): auto, its GPUs' "
        "share of 90% of the host's memory, at least 2G a GPU (Slurm's DefMemPerGPU); "
        "bytes or 16G; null: no limit",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info",
        description="the least level of the service's log lines on stderr: info, a line "
        "per submission, allocation, start, attempt's end, stop, node state change and "
        "user's or admin's request (who, and why); debug adds the loop's bookkeeping; "
        "warning only trouble",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="the service's log lines as text, or one JSON object a line"
    )
    mail_program: Path | None = Field(
        None,
        description="Slurm's MailProg: run as PROGRAM -s SUBJECT USER for the mail jobs ask "
        "for (--mail-type), e.g. /usr/bin/mail; unset: no mail, and --mail-type is refused",
    )
    export_environment: bool = Field(
        True,
        description="jobs start with the environment corral submit ran in, as sbatch's "
        "--export=ALL (its default); false: every job starts with the service's clean "
        "environment plus the variables its spec names (--env), whatever --export says",
    )
    user_log_limit: int | None = Field(
        None,
        ge=4096,
        description="bytes of ended attempts' logs kept per user (checked every 10 "
        "minutes: the oldest are emptied, saying so, past it); null: no limit",
    )
    archive_after: float | None = Field(
        None,
        ge=3600,
        description="ended jobs older than this (e.g. 30d) move out of the hot tables, "
        "once an hour: corral history still shows them, corral show says they were "
        "archived (their attempts and events are not kept); null: never",
    )
    signal_lead_max: float = Field(
        120.0,
        ge=0,
        le=3600,
        description="seconds at most a preemption or suspension by corral waits after "
        "sending a job's --signal warning before its SIGTERM (the job asked for SECS; "
        "the warning before the time limit is sent SECS ahead whatever this says)",
    )
    pause_grace: float = Field(
        2.0,
        ge=0,
        description="seconds a job using corral.train has to pause at an iteration "
        "boundary (time-slicing) before its processes are stopped where they are",
    )
    heartbeat_timeout: float = Field(
        300.0, gt=0, description="a job that heartbeated, then fell silent this long, is hung"
    )
    heartbeat_interval: float = Field(5.0, gt=0, description="seconds between a job's heartbeats")
    gpu_poll: float = Field(
        5.0,
        ge=0,
        le=3600,
        description="seconds between reads of real GPUs' health and use from the driver "
        "(NVIDIA's management library; 0: never)",
    )
    tick: float = Field(0.5, gt=0, le=60, description="longest sleep of the scheduler loop")
    drain_after: int = Field(3, ge=1, description="node failures in a row before a node drains")
    max_user_priority: int = Field(
        0, description="highest priority a non-admin may give a job (admins: any)"
    )
    max_user_weight: float = Field(
        1.0,
        gt=0,
        description="largest weight a non-admin may give a job (admins: any): a weight is "
        "a share under the weighted policies (gavel's), so above 1 it takes from others",
    )
    allow_exclusive: bool = Field(
        True,
        description="users may submit --exclusive jobs (a whole node each; quotas and fair "
        "share count the GPUs a job asks for, not the node it holds); false: admins only",
    )
    max_array_size: int = Field(
        DEFAULT_MAX_ARRAY_SIZE,
        ge=1,
        le=MAX_ARRAY_SIZE,
        description="Slurm's MaxArraySize: an array's task indices run from 0 to one less "
        "than this, and a job waits for at most this many others (an array named in a "
        "dependency counts each of its tasks)",
    )
    max_jobs_per_user: int = Field(
        10000, ge=1, description="jobs a user may have not yet ended (Slurm's MaxSubmitJobs)"
    )
    require_reachable_python: bool = Field(
        True,
        description="refuse to start when a mapped unix_user cannot run this service's "
        "Python (jobs given as tasks, stage commands and corral.train need it); false: "
        "start anyway and refuse such jobs of that user at submission",
    )
    disk_floor: int = Field(
        256 * 2**20,
        ge=0,
        description="bytes free under which, on the disk of state_dir or jobs_dir, new "
        "launches wait (none fails) until there is room (256M, 1G or bytes)",
    )
    disk_warn: int = Field(
        2**30, ge=0, description="bytes free under which a line warns of a filling disk"
    )
    disk_reserve: int = Field(
        64 * 2**20,
        ge=0,
        description="bytes kept in a file in state_dir while its disk fills, let go when "
        "it is full so the store can still write (0: none)",
    )
    socket: Path | None = Field(
        None,
        description="a Unix socket the API also answers on, for callers on this host: "
        "the kernel says who calls (SO_PEERCRED), so no token is needed and no lock-out "
        "applies; the caller is the user whose unix_user has their uid (root, and the "
        "service's own uid: the first admin). Made mode 0666: any local user may call, "
        "as themselves. e.g. /run/corral/corral.sock",
    )
    max_connections: int = Field(
        1024,
        ge=16,
        description="API connections open at once; past it the one idle longest is "
        "closed (none idle: the new one is answered 503). Kept below the open-file "
        "limit, which the service raises to its hard limit at start",
    )
    max_connections_per_address: int = Field(
        256,
        ge=1,
        description="API connections open at once from one client address (past it, "
        "that address's connection idle longest is closed)",
    )
    request_timeout: float = Field(
        20.0,
        gt=0,
        le=3600,
        description="seconds a connection has to send a whole request after it opens "
        "or is answered; idle and half-sent connections are closed after it",
    )
    auth: AuthConfig = Field(
        default_factory=AuthConfig, description="lock-out of addresses that send wrong tokens"
    )
    private_data: bool = Field(
        True,
        description="users see only their own jobs' commands, environments, stage commands "
        "and paths; others' jobs show their name, owner, state and resources (Slurm's "
        "PrivateData=jobs, narrower); admins see all. On by default: commands carry secrets",
    )
    limits: LimitsConfig = Field(
        default_factory=LimitsConfig,
        description="per-user and per-VC caps on GPUs held and jobs running, around any policy",
    )
    fair_share: FairShareConfig = Field(
        default_factory=FairShareConfig,
        description="order users' jobs by their recent use over their shares (off by default)",
    )
    api_url: str | None = Field(None, description="URL jobs use to reach the API (default: listen)")
    default_duration: float = Field(
        3600.0,
        gt=0,
        description="expected run time of a job that gives none and whose owner has no "
        "finished jobs yet (policies that rank by work left read it)",
    )
    vcs: dict[str, float] | None = Field(
        None,
        description="virtual clusters and their GPU quotas (philly, hived); jobs name one "
        "with 'vc'. Unset: every VC a job names gets an equal share",
    )
    partitions: dict[str, Partition] = Field(
        default_factory=dict,
        description="Slurm partition names jobs may give (sbatch -p) -> the virtual "
        "cluster and/or GPU type each stands for; a job naming another is refused",
    )
    time_limits: TimeLimits = Field(
        default_factory=TimeLimits,
        description="default_time and max_time of every job (Slurm's DefaultTime and "
        "MaxTime); a partition's or a VC's own are applied as well",
    )
    vc_time_limits: dict[str, TimeLimits] = Field(
        default_factory=dict,
        description="virtual cluster -> its default_time and max_time (as a QOS's MaxWall)",
    )

    @field_validator(
        "disk_floor", "disk_warn", "disk_reserve", "user_log_limit", "job_memory", mode="before"
    )
    @classmethod
    def _bytes(cls, value: Any) -> Any:
        """Bytes, or an amount as Slurm writes one (``256M``, ``1G``)."""
        if isinstance(value, str) and value != "auto" and not value.strip().isdigit():
            return parse_memory(value) * 2**20
        return value

    @field_validator("vc_time_limits")
    @classmethod
    def _vc_names(cls, value: dict[str, TimeLimits]) -> dict[str, TimeLimits]:
        for name in value:
            if not _VC_NAME.match(name):
                raise ValueError(f"'{name}' is not a valid virtual cluster name")
        return value

    @field_validator("policy_options")
    @classmethod
    def _known_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """A misspelled option is refused here, at its line, not ignored or left for the
        policy to trip over at start."""
        from corral.errors import CorralError
        from corral.policies import POLICIES, options_of, policy_key, unknown_option

        policy = policy_key(str(info.data.get("policy", "")))
        try:
            accepted = options_of(policy)
            known = policy in POLICIES
        except CorralError as exc:  # a policy given as module:Class that does not load
            raise ValueError(str(exc)) from None
        if known or accepted:
            for option in value:
                if option not in accepted:
                    raise ValueError(unknown_option(policy, option, accepted))
        from corral.policies import checked_options

        try:
            return checked_options(policy, value)
        except CorralError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("default_duration", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float:
        from corral.timespan import parse_seconds

        return parse_seconds(value)

    @field_validator("archive_after", mode="before")
    @classmethod
    def _age(cls, value: Any) -> float | None:
        from corral.timespan import parse_seconds

        return None if value is None else parse_seconds(value)

    @field_validator("vcs")
    @classmethod
    def _vcs(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("name at least one virtual cluster, or leave vcs out")
        for name, gpus in value.items():
            if not _VC_NAME.match(name):
                raise ValueError(f"'{name}' is not a valid virtual cluster name")
            if not gpus >= 0 or gpus == float("inf"):
                raise ValueError(f"quota of '{name}' must be a number of GPUs >= 0")
        return value

    @model_validator(mode="after")
    def _executor_settings(self) -> ServiceConfig:
        if self.executor == "ray" and self.workers.standby:
            raise ValueError("workers.standby: standby workers run with the local executor only")
        if self.executor == "ray" and self.workers.park:
            raise ValueError("workers.park: parked jobs run with the local executor only")
        if self.workers.keep and not self.workers.standby:
            raise ValueError(
                "workers.keep: round keepers start in standby workers; set workers.standby too"
            )
        if self.executor == "ray" and self.ray.address and self.gpus != "auto":
            raise ValueError(
                "gpus: with ray.address the GPUs are the Ray cluster's; leave gpus out"
            )
        return self

    @model_validator(mode="after")
    def _known_partitions(self) -> ServiceConfig:
        """A partition's name is one a job may give, and its VC one this service has."""
        for name, partition in self.partitions.items():
            if not _VC_NAME.match(name):
                raise ValueError(f"partitions: '{name}' is not a valid partition name")
            if self.vcs is not None and partition.vc is not None and partition.vc not in self.vcs:
                have = ", ".join(self.vcs)
                raise ValueError(
                    f"partitions: '{name}' names virtual cluster '{partition.vc}', which is "
                    f"not in vcs (there are {have})"
                )
        return self

    @field_validator("placement", "admission")
    @classmethod
    def _made_at_start(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A placement strategy or admission rule (one of your own: file.py:Class) is
        imported and made here, so a wrong name, path or option is said at its line
        at start, not at the first job."""
        if value is None:
            return value
        from corral.errors import CorralError
        from corral.placement.registry import make_placement
        from corral.policies.admission import make_admission

        try:
            make_placement(value) if info.field_name == "placement" else make_admission(value)
        except CorralError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _admission_with_gangs(self) -> ServiceConfig:
        from corral.policies import policy_key
        from corral.policies.rounds.planners import ROUND_PLANNERS

        if self.admission is not None and policy_key(self.policy) in ROUND_PLANNERS:
            raise ValueError(f"policy '{self.policy}' plans rounds: it takes no admission rule")
        return self

    @model_validator(mode="after")
    def _runnable_policy(self) -> ServiceConfig:
        from corral.policies import live_refusal

        reason = live_refusal(self.policy, self.policy_options)
        if reason is not None:
            raise ValueError(reason)
        return self

    @model_validator(mode="after")
    def _unique_users(self) -> ServiceConfig:
        names = [u.name for u in self.users]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"user names must be unique: {', '.join(twice)} appear twice")
        digests = [u.digest for u in self.users]
        shared = sorted({u.name for u in self.users if digests.count(u.digest) > 1})
        if shared:
            raise ValueError(f"users {', '.join(shared)} have the same token; give each its own")
        return self

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite:///{self.state_dir / 'corral.db'}"

    @property
    def job_root(self) -> Path:
        return self.jobs_dir or self.state_dir.with_name(f"{self.state_dir.name}-jobs")

    @property
    def url(self) -> str:
        return self.api_url or f"http://{self.host}:{self.port}"


def load_config(path: str | Path) -> ServiceConfig:
    """The service config from YAML; errors name the file, the line and the field."""
    path = Path(path)
    if not path.exists():
        raise InputError(str(path), None, None, "no such config file")
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        raise InputError(str(path), 1, None, "a config is a mapping (policy, gpus, users, ...)")
    try:
        config = ServiceConfig.model_validate(dict(doc))
    except ValidationError as exc:
        raise validation_error(str(path), doc, exc) from None
    base = path.resolve().parent
    if not config.state_dir.is_absolute():
        config.state_dir = base / config.state_dir
    if config.jobs_dir is not None and not config.jobs_dir.is_absolute():
        config.jobs_dir = base / config.jobs_dir
    if config.socket is not None and not config.socket.is_absolute():
        config.socket = base / config.socket
    state, jobs = config.state_dir.resolve(), config.job_root.resolve()
    if jobs == state or jobs.is_relative_to(state) or state.is_relative_to(jobs):
        raise InputError(
            str(path), None, "jobs_dir", "jobs' folders must be outside the state directory"
        )
    return config
