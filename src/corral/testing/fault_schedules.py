"""Deterministic simulation testing of the live loop: random schedules of inputs
and faults, from a seed, run against the real loop, store and policy in
virtual time, with the loop's invariants checked after every step.

A schedule is a list of timed operations: submissions (valid ones, and ones a
hostile user would try: refused specs, arrays, dependencies on arrays, held
jobs), cancels, suspends, resumes, holds, releases and priority changes, records written
behind the loop's back, heartbeats with extreme values, an operator's
``kill -9`` of a job's process, nodes that fail and come back, a full disk
under the store, ``kill -9`` of the service itself (the loop is dropped and
rebuilt from the store, its jobs' processes running on) and jumps of the
clock. After the last operation every node comes back, held jobs are let go,
and the loop runs until every job has ended.

Invariants, checked after every step:

- no GPU is held by two attempts (two, for a policy that packs jobs), in the
  store and among the processes;
- an attempt's row exists before its process (checked at each launch);
- no process outlives its attempt: each live process has an open attempt;
- the loop's own view agrees with the store: its attempts are the open
  attempt rows, and every job it shows running has one;
- no pass fails (outside a full disk), and a restart always succeeds;
- once the inputs stop, every job ends (a job whose dependency can never be
  met may wait, as Slurm's do, but says so).

:func:`run_schedule` gives the first violation (or None); :func:`shrink`
removes operations from a failing schedule while it still fails, so that
what is printed is short. The same seed always gives the same schedule and
the same run.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from fastapi import HTTPException
from pydantic import ValidationError
from sqlalchemy import event, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from starlette.requests import Request

from corral.api import bulk as bulk_routes
from corral.api import cluster as cluster_routes
from corral.api import jobs as routes
from corral.api.common import Context
from corral.api.limits import MAX_REPORTED
from corral.api.views import HeartbeatBody, PriorityBody
from corral.model.status import TRANSITIONS
from corral.runtime.execution.executor import ProcessRef
from corral.runtime.execution.identity import RunAs
from corral.runtime.jobspec.config import (
    CpuJobsConfig,
    FairShareConfig,
    GpuGroup,
    LimitsConfig,
    RetryConfig,
    ServiceConfig,
    UserConfig,
    WorkersConfig,
)
from corral.runtime.jobspec.specs import MAX_BATCH, JobSpec
from corral.runtime.loop.admission import Admission, Refused
from corral.runtime.loop.round_policy import plans_rounds
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import (
    ILLEGAL_SEEN,
    STRICT_TRANSITIONS_ENV,
    AttemptRow,
    JobRow,
    NodeRow,
    Store,
)
from corral.testing.oracle import Oracle
from corral.testing.virtual import VirtualClock, VirtualExecutor, VirtualProcess

USERS = ("alice", "bob")
BOB_GPUS = 6
WARM_IDLE = 20.0
"""Seconds an idle warm worker waits for a job of its user before it ends."""
"""bob's GPU limit (a user's limit, as ``max_gpus`` in the config)."""
CAPPED_VC = "prod"
"""The virtual cluster (Slurm's account) whose running jobs may hold at most
:data:`CAPPED_VC_GPUS` GPUs and be at most :data:`CAPPED_VC_RUNNING` at once."""
CAPPED_VC_GPUS = 3
CAPPED_VC_RUNNING = 2
ENDED = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}
DRAIN_LIMIT = 3000.0
"""Virtual seconds the loop has, once the inputs stop, to end every job."""


@dataclass(frozen=True)
class Op:
    """One operation of a schedule: at ``at`` virtual seconds from its start."""

    at: float
    kind: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"{self.at:7.2f}s {self.kind} {' '.join(map(repr, self.args))}".rstrip()


@dataclass
class Violation:
    """A broken invariant: what, and when (the operation it followed, if any)."""

    what: str
    at: float
    after: Op | None = None

    def __str__(self) -> str:
        where = f" after [{self.after}]" if self.after is not None else ""
        return f"at {self.at:.2f}s{where}: {self.what}"


class ServiceKilled(BaseException):
    """``kill -9`` of the service at a boundary inside a pass (a BaseException: no
    handler of the loop's catches it, as none runs once a process is killed)."""


class Boundaries:
    """The points inside a pass (or a recovery) where the harness acts: before and
    after each store commit, and at each call into the executor (before a launch,
    after it before its pid is stored, before a signal). An armed action runs at the
    ``k``-th such point from when it was armed; one action at a time."""

    WRITABLE = frozenset({"after commit", "launch", "launched", "signal"})
    """Points where no transaction of the loop is open: where the API's writes land."""
    KINDS = WRITABLE | {"before commit"}
    """Every kind of point (a crash may come at any)."""

    def __init__(self, store: Store) -> None:
        self.live = False
        self.busy = False
        self.armed: tuple[int, frozenset[str] | None, Callable[[str], None]] | None = None
        sessions = store._sessions
        event.listen(sessions, "before_commit", lambda _s: self.hit("before commit"))
        event.listen(sessions, "after_commit", lambda _s: self.hit("after commit"))

    def arm(self, k: int, action: Callable[[str], None], where: frozenset[str] | None) -> None:
        self.armed = (k, where, action)

    def hit(self, where: str) -> None:
        if not self.live or self.busy or self.armed is None:
            return
        k, kinds, action = self.armed
        if kinds is not None and where not in kinds:
            return
        if k > 1:
            self.armed = (k - 1, kinds, action)
            return
        self.armed = None
        self.busy = True
        try:
            action(where)
        finally:
            self.busy = False


class Broken(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


# ------------------------------------------------------------------ schedules
def _command(rng: random.Random) -> list[str]:
    kind = rng.choices(["sleep", "train", "false", "crash", "hang"], [5, 4, 1, 1, 1])[0]
    if kind == "sleep":
        return ["sleep", str(rng.choice([1, 2, 5, 10, 20]))]
    if kind == "train":
        steps = rng.choice([50, 200, 600])
        extra = ["exclusive"] if rng.random() < 0.3 else []
        return ["train", str(steps), str(rng.choice([10, 50])), *extra]
    if kind == "crash":
        return ["crash", str(rng.choice([0, 1, 3]))]
    return [kind]


def _spec(rng: random.Random, earlier: int) -> dict[str, Any]:
    """A job spec a user might send: mostly valid, some refused, some hostile."""
    spec: dict[str, Any] = {"command": _command(rng), "gpus": rng.choice([1, 1, 1, 2, 4, 0])}
    if spec["gpus"] == 0:  # a CPU-only step, of one CPU or of more
        spec["cpus"] = rng.choice([1, 1, 2, 3])
    if spec["command"] == ["hang"]:
        spec["wall_time"] = rng.choice([5.0, 20.0])  # else it would rightly run for ever
    roll = rng.random()
    if roll < 0.08:
        spec["array"] = rng.choice(["0-3", "0-20%2", "1-5"])
    elif roll < 0.16 and earlier:
        kind = rng.choice(["afterok", "afterany", "afternotok"])
        spec["dependency"] = f"{kind}:{rng.randint(1, earlier)}"
    elif roll < 0.20:
        spec["hold"] = True
    elif roll < 0.24:  # refused: more GPUs than there are, a bad value, a stray field
        spec.update(rng.choice([{"gpus": 64}, {"priority": 10**6}, {"gpus": -1}, {"bogus": 1}]))
    elif roll < 0.27 and earlier:  # a dependency past the last job: refused
        spec["dependency"] = f"afterok:{earlier + 50}"
    if rng.random() < 0.2:
        spec["max_retries"] = rng.choice([0, 1, 3])
    if rng.random() < 0.1:
        spec["priority"] = rng.choice([-5, 5])
    return spec


CORRUPTIONS: list[tuple[str, Any]] = [
    ("spec", {"command": []}),
    ("spec", {"command": ["sleep", "1"], "gpus": "many"}),
    ("gpus", [99, 100]),
    ("priority", float("nan")),
    ("status", "BOGUS"),
    ("request", "explode"),
    ("submit_time", float("inf")),
    ("failures", -3),
    ("phase", "nowhere"),
]
"""Values written straight into a job's row, behind the loop's back."""


def make_schedule(
    seed: int,
    length: int = 40,
    span: float = 120.0,
    holds: bool = True,
    inside: bool = True,
    pressure: bool = True,
    wider: bool = True,
) -> list[Op]:
    """``length`` operations over ``span`` virtual seconds, from ``seed``; ``holds``
    adds holds and releases, ``inside`` crashes, races and faults inside passes,
    ``pressure`` crowds, the store's faults and operations aimed at what runs when
    they come, ``wider`` gangs over nodes, jobs of a capped virtual cluster, jobs run
    as rounds, fair share, a begin time met before the clock steps back and bob's
    task jobs in warm workers past his cap and a throttled array's task suspended
    and resumed, each from a stream of its own (the rest
    of the schedule is the same without them)."""
    rng = random.Random(seed)
    ops: list[Op] = []
    submitted = 0
    kinds = [
        ("submit", 12),
        ("cancel", 2),
        ("suspend", 1),
        ("resume", 1),
        ("priority", 1),
        ("kill_process", 1),
        ("fail_node", 1),
        ("return_node", 1),
        ("restart", 1),
        ("disk_full", 1),
        ("clock_jump", 1),
        ("heartbeat", 1),
        ("corrupt", 1),
    ]
    names, weights = zip(*kinds, strict=True)
    times = sorted(rng.uniform(0, span) for _ in range(length))
    for at in times:
        kind = rng.choices(names, weights)[0]
        pick = rng.randint(1, max(submitted, 1))
        if kind == "submit":
            ops.append(Op(round(at, 2), kind, (rng.choice(USERS), _spec(rng, submitted))))
            submitted += 1
        elif kind in ("cancel", "suspend", "resume"):
            ops.append(Op(round(at, 2), kind, (pick,)))
        elif kind == "priority":
            ops.append(Op(round(at, 2), kind, (pick, rng.choice([-10, 0, 10]))))
        elif kind in ("fail_node", "return_node"):
            ops.append(Op(round(at, 2), kind, (rng.randrange(2),)))
        elif kind == "kill_process":
            ops.append(Op(round(at, 2), kind, (rng.randrange(1000),)))
        elif kind == "disk_full":
            ops.append(Op(round(at, 2), kind, (rng.choice([1.0, 5.0, 15.0]),)))
        elif kind == "clock_jump":
            ops.append(Op(round(at, 2), kind, (rng.choice([5.0, 60.0, 600.0]),)))
        elif kind == "heartbeat":
            ops.append(Op(round(at, 2), kind, (rng.randrange(1000), rng.random() < 0.5)))
        elif kind == "corrupt":
            ops.append(Op(round(at, 2), kind, (pick, rng.randrange(len(CORRUPTIONS)))))
        else:
            ops.append(Op(round(at, 2), kind))
    # holds and releases (scontrol hold/release) from a stream of their own, so the
    # rest of each seed's schedule is what it was before they were added
    extra = random.Random(f"holds-{seed}")
    for _ in range(max(length // 8, 1) if holds else 0):
        at = round(extra.uniform(0, span), 2)
        ops.append(
            Op(at, extra.choice(["hold", "release"]), (extra.randint(1, max(submitted, 1)),))
        )
    if inside:
        ops += _inside(random.Random(f"inside-{seed}"), max(length // 4, 1), span, submitted)
    if pressure:
        ops += _pressure(random.Random(f"pressure-{seed}"), max(length // 8, 1), span)
    if wider:
        ops += _wider(random.Random(f"wider-{seed}"), max(length // 8, 1), span)
        ops += _at_the_caps(random.Random(f"caps-{seed}"), max(length // 20, 1), span)
        ops += _begun_then_back(random.Random(f"begun-{seed}"), span)
        ops += _warm_past_the_cap(random.Random(f"warm-{seed}"), span)
        ops += _throttled_return(random.Random(f"throttle-{seed}"), span)
    ops.sort(key=lambda op: op.at)
    return ops


def _inside(rng: random.Random, count: int, span: float, submitted: int) -> list[Op]:
    """Operations from a stream of their own (the rest of a seed's schedule is the same
    with or without them): the service killed inside a pass, the API's requests landing
    inside one, executor faults, heartbeats late or from an earlier attempt, pids
    reused, the clock stepping back, and submissions of the features the main stream
    leaves out (wall times to time out, singletons, begin times, exclusive nodes)."""
    ops: list[Op] = []
    kinds = [
        ("crash", 4),
        ("race", 8),
        ("executor_fault", 3),
        ("beat_replay", 2),
        ("pid_reuse", 1),
        ("clock_back", 1),
        ("feature", 3),
        ("drain_node", 1),
        ("cancel_stopping", 2),
        ("suspend_running", 2),
    ]
    names, weights = zip(*kinds, strict=True)
    for _ in range(count):
        at = round(rng.uniform(0, span), 2)
        kind = rng.choices(names, weights)[0]
        pick = rng.randint(1, max(submitted, 1))
        if kind == "crash":  # at the k-th boundary of any kind, or of one kind
            where = rng.choice([None, None, *sorted(Boundaries.KINDS)])
            ops.append(Op(at, kind, (rng.randint(1, 12 if where is None else 3), where)))
        elif kind == "race":
            request = rng.choice(["cancel", "cancel", "hold", "release", "suspend", "resume",
                                  "priority", "submit"])  # fmt: skip
            arg: Any = pick
            if request == "submit":
                arg = (rng.choice(USERS), _spec(rng, submitted))
            elif request == "priority":
                arg = (pick, rng.choice([-10, 10]))
            where = rng.choice([None, "after commit", "after commit", "launch", "signal"])
            other = rng.randint(1, max(submitted, 1))  # a request pending already
            ops.append(Op(at, kind, (rng.randint(1, 4), where, request, arg, other)))
        elif kind == "executor_fault":
            fault = rng.choice(
                ["launch_fails", "ignores_term", "slow_term", "record_missing", "record_corrupt"]
            )
            ops.append(Op(at, kind, (fault, rng.choice([1.0, 2.5, 6.0]))))
        elif kind == "beat_replay" or kind in ("cancel_stopping", "suspend_running"):
            ops.append(Op(at, kind, (rng.randrange(1000),)))
        elif kind == "drain_node":
            ops.append(Op(at, kind, (rng.randrange(2), rng.choice([5.0, 30.0]))))
        elif kind == "clock_back":
            ops.append(Op(at, kind, (rng.choice([0.5, 3.0, 30.0]),)))
        elif kind == "feature":
            user, spec = _feature(rng, submitted)
            ops.append(Op(at, "submit", (user or rng.choice(USERS), spec)))
        else:
            ops.append(Op(at, kind))
    return ops


def _pressure(rng: random.Random, count: int, span: float) -> list[Op]:
    """Operations from a stream of their own that make what is rare common: a crowd
    of one size at once (so that jobs queue, pack and take turns), a drain of the
    busiest node, a cancel of a packed job whose checkpoint takes seconds, a job
    with a begin time (first in line where new jobs are), a restart
    while a job is paused, and the store's faults (busy, failing reads, slow
    commits, a lost acknowledgement, a dropped connection). Which job or node they
    touch is read when they come, from what runs then."""
    ops: list[Op] = []
    kinds = [("crowd", 3), ("drain_busy", 2), ("cancel_packed", 2), ("restart_paused", 2),
             ("store_fault", 3), ("requeue_running", 1), ("begin_later", 2)]  # fmt: skip
    names, weights = zip(*kinds, strict=True)
    for _ in range(count):
        at = round(rng.uniform(0, span), 2)
        kind = rng.choices(names, weights)[0]
        if kind == "crowd":
            seconds = rng.choice([6, 15, 30])
            wall = rng.choice([None, None, seconds * 0.6, seconds * 3.0])
            size, n, train = rng.choice([1, 2]), rng.choice([4, 6, 9]), rng.random() < 0.5
            ops.append(Op(at, kind, (size, n, seconds, wall, train)))
        elif kind == "begin_later":  # a new job, first in line under LAS, not to start yet
            spec = {"command": ["sleep", "3"], "gpus": 1, "begin_in": rng.choice([10, 40])}
            ops.append(Op(at, "submit", (rng.choice(USERS), spec)))
        elif kind == "drain_busy":
            ops.append(Op(at, kind, (rng.choice([5.0, 20.0, 60.0]),)))
        elif kind in ("cancel_packed", "requeue_running"):
            ops.append(Op(at, kind, (rng.randrange(1000), rng.choice([0.5, 2.0, 5.0]))))
        elif kind == "store_fault":
            fault = rng.choice(list(StoreFaults.KINDS))
            ops.append(Op(at, kind, (fault, rng.choice([0.5, 3.0, 12.0]))))
        else:
            ops.append(Op(at, kind))
    return ops


def _wider(rng: random.Random, count: int, span: float) -> list[Op]:
    """Operations from a stream of their own for what the others never make: a gang
    over both nodes (``nodes: 2``), a job of the virtual cluster whose GPUs and
    running jobs are capped (:data:`CAPPED_VC`), a job given as a task (run as
    rounds of one-GPU tasks under a policy that plans rounds, as one process under
    the others), a waiting job held, suspended and then resumed (it must stay off
    the GPUs while held), and fair share turned on from the start (one seed in
    three)."""
    ops: list[Op] = []
    if rng.random() < 1 / 3:
        ops.append(Op(0.0, "fair_share", (rng.choice([1, 20]),)))
    kinds = [("gang", 2), ("capped_vc", 3), ("rounds", 2), ("resume_held", 2)]
    names, weights = zip(*kinds, strict=True)
    for _ in range(count):
        at = round(rng.uniform(0, span), 2)
        kind = rng.choices(names, weights)[0]
        if kind == "resume_held":
            ops.append(Op(at, kind, (rng.randrange(1000), rng.choice([1.0, 5.0]))))
            continue
        work = str(rng.choice([2, 6, 12]))
        spec: dict[str, Any]
        if kind == "gang":
            gpus = rng.choice([2, 4])
            spec = {"command": ["sleep", work], "gpus": gpus, "nodes": 2}
            if rng.random() < 0.5:
                spec["tasks_per_node"] = gpus // 2
        elif kind == "capped_vc":
            spec = {"command": _command(rng), "gpus": rng.choice([1, 1, 2]), "vc": CAPPED_VC}
            if spec["command"] == ["hang"]:
                spec["wall_time"] = 5.0
        else:
            steps = rng.choice([10, 30])
            spec = {"command": ["python", "-m", "corral.train.run_task"],
                    "gpus": rng.choice([1, 2]),
                    "task": {"factory": "corral.examples.tasks:digits", "steps": steps,
                             "round_steps": 10}}  # fmt: skip
        n = rng.choice([1, 1, 2])
        ops += [Op(at, "submit", (rng.choice(USERS), spec)) for _ in range(n)]
    return ops


def _at_the_caps(rng: random.Random, count: int, span: float) -> list[Op]:
    """Operations that press on a cap at the instant it matters, from a stream of
    their own: three one-GPU jobs of the capped virtual cluster at once (its GPU cap
    lets three run, its running cap two), or a job of bob's that ignores SIGTERM at
    its wall time with a second one waiting behind it (while the first leaves, its
    GPUs still count against his cap: the second may not start until it is gone)."""
    ops: list[Op] = []
    for _ in range(count):
        at = round(rng.uniform(0, span), 2)
        if rng.random() < 0.5:
            spec = {"command": ["sleep", str(rng.choice([6, 12]))], "gpus": 1, "vc": CAPPED_VC}
            ops += [Op(at, "submit", (rng.choice(USERS), dict(spec))) for _ in range(3)]
        else:
            leaving = {"command": ["hang"], "gpus": 4, "wall_time": rng.choice([2.0, 4.0])}
            behind = {"command": ["sleep", str(rng.choice([2, 6]))], "gpus": rng.choice([3, 4])}
            ops += [Op(at, "submit", ("bob", leaving)), Op(at, "submit", ("bob", behind))]
    return ops


def _begun_then_back(rng: random.Random, span: float) -> list[Op]:
    """From a stream of its own: a crowd takes every GPU, a one-GPU job given a begin
    time a few seconds ahead waits behind it, and once its begin time has passed the
    host's clock steps back 30 s, before the crowd is done: by the clock the job's
    begin time is ahead again, and it must wait for it again (as under Slurm, whose
    ``--begin`` is compared with the clock at each start). Meanwhile cancels of jobs
    then live land inside passes that read another request, just after the read."""
    at = round(rng.uniform(0, span * 0.8), 2)
    begin_in = rng.choice([3, 6])
    waits = {"command": ["sleep", "3"], "gpus": 1, "begin_in": begin_in}
    # (a quiet pass commits twice before it reads the requests, and once as it reads
    # them: a cancel landing just after that read is in the window; a busier pass
    # commits more before it)
    races = [
        Op(round(at + 2 + 1.5 * n, 2), "race", (k, "after commit", "cancel", rng.randrange(99), 1))
        for n, k in enumerate((3, 4, 5))
    ]
    return [
        Op(at, "crowd", (1, 9, 30, None, False)),
        Op(round(at + 1, 2), "submit", (rng.choice(USERS), waits)),
        *races,
        Op(round(at + 1 + begin_in + rng.choice([2.0, 8.0]), 2), "clock_back", (30.0,)),
    ]


def _warm_past_the_cap(rng: random.Random, span: float) -> list[Op]:
    """From a stream of its own: bob's one-GPU task jobs (which start in warm
    workers) beside jobs of his that hold GPUs, more of them than his GPU cap lets
    run: warming ahead and the workers his cold starts leave must together stay on
    at most as many GPUs as he may hold."""
    at = round(rng.uniform(0, span * 0.8), 2)
    holding = rng.choice([2, 4, 6])
    tasks = rng.choice([4, 8])
    sleep = {"command": ["sleep", str(rng.choice([6, 20]))], "gpus": 1, "array": f"0-{holding - 1}"}
    task = {"command": ["python", "-m", "corral.train.run_task"], "gpus": 1,
            "array": f"0-{tasks - 1}",
            "task": {"factory": "corral.examples.tasks:digits", "steps": 10}}  # fmt: skip
    return [Op(at, "submit", ("bob", sleep)), Op(round(at + 1, 2), "submit", ("bob", task))]


def _throttled_return(rng: random.Random, span: float) -> list[Op]:
    """From a stream of its own: a throttled array one of whose running tasks is
    suspended and resumed while another task of its array has taken its place
    (see :meth:`World._op_throttled_return`)."""
    at = round(rng.uniform(0, span * 0.8), 2)
    return [Op(at, "throttled_return", (rng.choice([2.0, 6.0]),))]


def _feature(rng: random.Random, earlier: int) -> tuple[str | None, dict[str, Any]]:
    """A job using what the main stream leaves out: a wall time it may outrun, a
    singleton, a begin time, an exclusive node, a throttled array, a dependency on a
    job that fails, a job of bob's that leaves slowly near his GPU cap; with its user
    where it matters (None: any)."""
    work = rng.choice([2, 6, 12])
    spec: dict[str, Any] = {"command": ["sleep", str(work)], "gpus": rng.choice([1, 2])}
    which = rng.choice(
        ["wall", "wall", "singleton", "begin", "exclusive", "array", "afterok", "on_failing",
         "near_cap"]
    )  # fmt: skip
    if which == "on_failing":  # resolved at submission: the last job whose command fails
        spec["after_failing"] = rng.choice(["afterok", "afternotok", "afterany"])
    elif which == "near_cap":  # ignores SIGTERM at its wall time: killed after the grace
        return "bob", {"command": ["hang"], "gpus": 4, "wall_time": rng.choice([2.0, 4.0])}
    if which == "wall":
        spec["wall_time"] = rng.choice([work / 2, work * 2.0])
    elif which == "singleton":
        spec["singleton"] = True
    elif which == "begin":
        spec["begin_in"] = rng.choice([3, 20])  # seconds after its submission
    elif which == "exclusive":
        spec["exclusive"] = True
    elif which == "array":
        spec["array"] = rng.choice(["0-5%1", "0-7%3"])
    elif which == "afterok" and earlier:
        spec["dependency"] = f"afterok:{rng.randint(1, earlier)}"
    return None, spec


# ---------------------------------------------------------------- the world
def service_config(folder: Path, policy: str) -> ServiceConfig:
    """Two nodes of four GPUs (V100 and K80), four CPUs for the jobs that count them,
    two users and an admin, warm workers, short timers."""
    options: dict[str, Any] = {"round": 5.0} if policy.startswith("gavel") else {}
    return ServiceConfig(
        state_dir=folder,
        jobs_dir=folder / "jobs",  # (inside the world's folder: gone with it)
        policy=policy,
        policy_options=options,
        gpus=[GpuGroup(type="V100", count=4), GpuGroup(type="K80", count=4)],
        users=[
            UserConfig(name="alice", token="alice-token-0123456789"),
            UserConfig(name="bob", token="bob-token-0123456789ab", max_gpus=BOB_GPUS),
            UserConfig(name="root", token="root-token-0123456789a", admin=True),
        ],
        stop_grace=3.0,
        heartbeat_interval=1.0,
        heartbeat_timeout=10.0,
        tick=1.0,
        retry=RetryConfig(backoff=1.0, backoff_max=8.0),
        cpu_jobs=CpuJobsConfig(cpus=4, memory="16G"),  # (the same on every machine)
        limits=LimitsConfig(
            vc_gpus={CAPPED_VC: CAPPED_VC_GPUS}, vc_running={CAPPED_VC: CAPPED_VC_RUNNING}
        ),
        workers=WorkersConfig(warm=True, warm_idle=WARM_IDLE),
    )


def identities(folder: Path) -> dict[str, RunAs]:
    """Each user's jobs run as a Unix user of their own name (the service's uid, so
    that no test needs root: the virtual executor tells them apart by name)."""
    gid = os.getgid()
    return {name: RunAs(name, os.getuid(), gid, (gid,), str(folder)) for name in USERS}


class InjectedFault(Exception):
    """The store's trouble as the harness makes it (told apart from the loop's own)."""


def injected(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it was raised from) is the harness's store fault."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, InjectedFault) or isinstance(getattr(exc, "orig", None), InjectedFault):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class StoreFaults:
    """The store's faults, in virtual time. Spans: ``full`` (every write fails, as on a
    full disk), ``locked`` (every statement fails: another process holds the
    database), ``read_fails`` (reads fail: an I/O error), ``slow`` (each commit takes
    ``delay`` seconds). Once: ``dropped`` (the next statement finds its connection
    gone, as when PostgreSQL restarts) and ``lost_ack`` (the next commit of the loop's
    is made, and its caller told it failed). The harness's own reads are spared
    (:meth:`spared`)."""

    KINDS: ClassVar[dict[str, str]] = {
        "full": "span", "locked": "span", "read_fails": "span", "slow": "span",
        "dropped": "once", "lost_ack": "once",
    }  # fmt: skip

    def __init__(self, store: Store) -> None:
        self.kind = "full"
        self.until = -1.0
        self.delay = 0.0
        self.once: str | None = None
        self.fired = 0
        """Faults raised so far (a pass that meets one may fail)."""
        self._spared = 0
        self.clock: Callable[[], float] = lambda: 0.0
        self.advance: Callable[[float], None] = lambda _s: None
        self.loop_live: Callable[[], bool] = lambda: False
        self.on_fire: Callable[[], None] = lambda: None
        event.listen(store.engine, "before_cursor_execute", self._check)
        event.listen(store._sessions, "before_commit", self._commit)
        event.listen(store._sessions, "after_commit", self._acknowledged)

    @property
    def on(self) -> bool:
        """Whether a span of store faults is under way."""
        return self.clock() < self.until and self.kind != "slow"

    @property
    def full(self) -> bool:
        return self.clock() < self.until and self.kind == "full"

    def start(self, kind: str, seconds: float) -> None:
        if self.KINDS[kind] == "once":
            self.once = kind
        else:
            self.kind, self.until = kind, self.clock() + seconds
            self.delay = min(seconds, 2.0) / 4 if kind == "slow" else 0.0

    @contextmanager
    def spared(self) -> Iterator[None]:
        """The harness's own reads and writes: no fault meets them."""
        self._spared += 1
        try:
            yield
        finally:
            self._spared -= 1

    def _fire(self, what: str, statement: str = "") -> NoReturn:
        self.fired += 1
        self.on_fire()
        raise OperationalError(statement, None, InjectedFault(what))

    def _check(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if self._spared:
            return
        if self.once == "dropped":
            self.once = None
            self._fire("server closed the connection unexpectedly", statement)
        if self.clock() >= self.until:
            return
        writes = statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
        if self.kind == "full" and writes:
            self._fire("database or disk is full", statement)
        if self.kind == "locked":
            self._fire("database is locked", statement)
        if self.kind == "read_fails" and not writes:
            self._fire("disk I/O error", statement)

    def _commit(self, _session: Any) -> None:
        if not self._spared and self.kind == "slow" and self.clock() < self.until:
            self.advance(self.delay)

    def _acknowledged(self, _session: Any) -> None:
        if not self._spared and self.once == "lost_ack" and self.loop_live():
            self.once = None
            self._fire("the connection was lost before the commit was acknowledged")


class _Front:
    """The loop as the API's routes see it in virtual time: everything it offers,
    except that a route never waits for a pass (one thread runs both here)."""

    def __init__(self, loop: Scheduler) -> None:
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)

    def after_a_pass(self, *args: Any, **kwargs: Any) -> None:
        return None

    def notify(self) -> None:
        return None


@dataclass
class World:
    """The loop under test and everything around it."""

    policy: str
    folder: Path
    config: ServiceConfig = field(init=False)
    store: Store = field(init=False)
    clock: VirtualClock = field(init=False)
    executor: VirtualExecutor = field(init=False)
    scheduler: Scheduler = field(init=False)
    disk: StoreFaults = field(init=False)
    passes: int = 0
    refused: int = 0
    ended: dict[int, str] = field(default_factory=dict)
    """Jobs seen ended -> how: a job ends once, and stays so."""
    tampered: set[int] = field(default_factory=set)
    """Jobs whose record was written behind the loop's back."""

    def __post_init__(self) -> None:
        self.config = service_config(self.folder, self.policy)
        self.store = Store(self.config.store_url)
        self.clock = VirtualClock(1_800_000_000.0)
        self.store.clock = self.clock
        self.executor = VirtualExecutor(self.config, self.clock, self.store)
        self.executor.on_launch = self._launched
        self.disk = StoreFaults(self.store)
        self.disk.clock = self.clock
        self.disk.advance = self.clock.advance
        self.disk.on_fire = self._store_fault_met
        self.illegal: list[str] = []
        self.crowded: list[str] = []
        """Launches onto GPUs already running as many processes as they take."""
        # the checks raise here, as under the test suite: a status change outside the
        # life cycle, or a phase change outside the loop's table, is never just logged
        self._strict = os.environ.get(STRICT_TRANSITIONS_ENV)
        os.environ[STRICT_TRANSITIONS_ENV] = "1"
        ILLEGAL_SEEN.clear()
        event.listen(JobRow.status, "set", self._status_set)
        self.oracle = Oracle(
            self._broken,
            tick=self.config.tick,
            grace=self.config.stop_grace,
            node_requeues=self.config.retry.node_requeues,
            user_gpus={u.name: u.max_gpus for u in self.config.users if u.max_gpus},
            cpus=self.config.cpu_jobs.cpus,
            vc_gpus=dict(self.config.limits.vc_gpus),
            vc_running=dict(self.config.limits.vc_running),
        )
        self.executor.on_checkpoint = self.oracle.saved
        self.oracle.parent_of = self._parent_of
        self.oracle.node_of = {slot.id: slot.node for slot in self.executor.slots()}
        self.oracle.rounds_live = plans_rounds(self.policy)
        self.bounds = Boundaries(self.store)
        self.disk.loop_live = lambda: self.bounds.live
        self.executor.on_call = self.bounds.hit
        self.executor.beat_route = self._beat
        self.crashes = 0
        self.races = 0
        self.watches: list[tuple[float, Callable[[], bool]]] = []
        """(until, act): operations waiting for their moment (:meth:`_when`)."""
        self.resumes: list[tuple[float, str]] = []
        """(when, node): drained nodes the admin resumes then."""
        self.scheduler = self._start()

    def _start(self) -> Scheduler:
        """The service starts: its loop recovers from the store. On a full disk
        it cannot yet; it is started again (as its supervisor would) until it
        can, and nothing is scheduled meanwhile."""
        scheduler = Scheduler(self.config, self.store, self.executor, clock=self.clock)
        scheduler.identities = identities(self.folder)
        self.oracle.restarts.append(self.clock())
        try:
            self.bounds.live = True
            try:
                scheduler.recover()
            finally:
                self.bounds.live = False
        except ServiceKilled:  # killed again while recovering: started again
            self.crashes += 1
            self.executor = self.executor.restarted()
            return self._start()
        except Exception as exc:
            if not (self.disk.on or injected(exc)):
                raise Broken(f"the service cannot start: {type(exc).__name__}: {exc}") from exc
            scheduler.resync_due = True
        return scheduler

    # -------------------------------------------------------------- checks
    @staticmethod
    def _broken(what: str) -> NoReturn:
        raise Broken(what)

    def _status_set(self, row: JobRow, new: Any, old: Any, _initiator: Any) -> None:
        """Every status the service writes, checked against the life-cycle table."""
        if row.id is None or row.id in self.tampered or new == old:
            return
        if old in TRANSITIONS and new not in TRANSITIONS[old]:
            self.illegal.append(f"job {row.id} went from {old} to {new}")

    def _launched(self, process: VirtualProcess) -> None:
        """At each launch: its attempt's row is in the store already."""
        with self.disk.spared():
            self._launch_checked(process)

    def _launch_checked(self, process: VirtualProcess) -> None:
        with self.store.session() as s:
            row = s.scalars(
                select(AttemptRow).where(
                    AttemptRow.job_id == process.job, AttemptRow.number == process.attempt
                )
            ).first()
            owner = s.scalar(select(JobRow.user).where(JobRow.id == process.job))
        if row is None or row.end_time is not None:
            raise Broken(f"job {process.job} attempt {process.attempt} launched without its row")
        who = process.request.run_as
        if who is None or who.name != owner:
            self.crowded.append(
                f"job {process.job} of {owner} was launched as "
                f"{'the service' if who is None else who.name}"
            )
        most = 2 if self.scheduler.policy.shares_gpus else 1
        # a launch is a moment no pass's end would show. (A time slice's members are
        # launched together and paused but the turn's by the end of the same pass: the
        # check after the pass sees them.)
        sliced = self.scheduler.sharing.taking_turns(process.job)
        for g in () if sliced else process.gpus:
            beside = [
                p.job
                for p in self.executor.running()
                if p is not process and not p.paused and g in p.gpus
            ]
            if len(beside) >= most:  # (raised at the next check, not into the loop's call)
                self.crowded.append(
                    f"job {process.job} launched onto GPU {g}, where the processes of jobs "
                    f"{sorted(beside)} run"
                )
        if any(slot.node in self.executor.down for slot in process.request.gpus):
            self.oracle.aim(process.job, "launched onto a failed node")
        self.oracle.back_at[(process.job, process.attempt)] = self.oracle.back
        if process.rate:
            self.oracle.launched(process.job, process.attempt, process.done * process.rate)

    def check(self) -> None:
        """The invariants that hold after every step, and the oracle's rules (read
        past any fault of the store's: the harness sees what is stored)."""
        with self.disk.spared():
            self._check()

    def _check(self) -> None:
        if self.illegal:
            raise Broken(self.illegal[0])
        if self.crowded:
            raise Broken(self.crowded[0])
        if ILLEGAL_SEEN:
            raise Broken(ILLEGAL_SEEN[0])
        if self.scheduler.book.illegal:
            raise Broken(f"the job book: {self.scheduler.book.illegal[0]}")
        sharing = self.scheduler.policy.shares_gpus
        most = 2 if sharing else 1
        with self.store.session() as s:
            open_rows = list(s.scalars(select(AttemptRow).where(AttemptRow.end_time.is_(None))))
            statuses = dict(s.execute(select(JobRow.id, JobRow.status)).all())
        now = self.clock()
        for job, fault in self.executor.met:
            self.oracle.aim(job, fault)
        self.executor.met.clear()
        for p in self.executor.processes.values():
            if p.foreign and p.signalled:
                raise Broken(f"the service signalled pid {p.pid}, another's process now "
                             f"(signals {p.signalled})")  # fmt: skip
        paused = {(p.job, p.attempt): p.paused_for(now) for p in self.executor.processes.values()}
        with self.store.session() as s:
            self.oracle.check_step(s, now, self.tampered, paused)
        holders: dict[int, list[int]] = {}
        for row in open_rows:
            if row.job_id in self.tampered:
                continue  # (its record was written behind the loop's back: set aside)
            for g in row.gpus or []:
                holders.setdefault(int(g), []).append(row.job_id)
        attempts = self.scheduler.attempts
        # a time-sliced group's paused members wait their turn off the GPU; while a failed
        # pass has cost the loop its memory (and the store may refuse the ends it saw),
        # the processes say which run
        running = {p.job for p in self.executor.running() if not p.paused}
        for g, jobs in holders.items():
            if self.scheduler.resync_due:
                active = [j for j in jobs if j in running]
            else:
                active = [j for j in jobs if not ((a := attempts.get(j)) is not None and a.paused)]
            if len(active) > most:
                raise Broken(f"GPU {g} held by the open attempts of jobs {sorted(jobs)}")
        on_gpu: dict[int, list[int]] = {}
        open_keys = {(r.job_id, r.number) for r in open_rows}
        for p in self.executor.running():
            for g in p.gpus:
                if not p.paused:
                    on_gpu.setdefault(g, []).append(p.job)
            if (p.job, p.attempt) not in open_keys:
                raise Broken(
                    f"job {p.job} attempt {p.attempt}'s process runs, but its attempt "
                    f"has ended (job {statuses.get(p.job)})"
                )
        for g, jobs in on_gpu.items():
            if len(jobs) > most:
                raise Broken(f"GPU {g} runs the processes of jobs {sorted(jobs)}")
        self._check_warm()
        for job, status in statuses.items():
            was = self.ended.get(job)
            if was is not None and status != was and job not in self.tampered:
                raise Broken(f"job {job} ended {was}, and is now {status}")
            if status in ENDED:
                self.ended.setdefault(job, status)
        if self.scheduler.resync_due:
            return  # a pass failed on the store: its next step recovers from the store
        loop = {(job, a.number) for job, a in self.scheduler.attempts.items()}
        if loop != open_keys:
            raise Broken(
                f"the loop's attempts {sorted(loop)} are not the store's open ones "
                f"{sorted(open_keys)}"
            )
        for job, status in statuses.items():
            if status == "RUNNING" and job not in self.scheduler.attempts:
                if self._runs_as_rounds(job):
                    continue  # (its tasks have the attempts)
                raise Broken(f"job {job} shows RUNNING with no attempt in the loop")
        self._check_book(statuses)

    def _check_warm(self) -> None:
        """Warm workers: a job starts only in a worker of its own user on its own GPU,
        and a user never has workers on more GPUs than the user may hold."""
        for job, (user, gpu), gpus in self.executor.warm_starts:
            p = self.oracle.promises.get(job) or self.oracle.promises.get(
                self._parent_of(job) or -1
            )
            owner = p.user if p is not None else None
            if user != owner or gpu not in gpus:
                raise Broken(
                    f"job {job} of {owner} on GPUs {list(gpus)} started in the warm worker "
                    f"of {user} on GPU {gpu}"
                )
        self.executor.warm_starts.clear()
        for user, cap in self.oracle.user_gpus.items():
            have = self.executor.warm_count(user)
            if have > cap:
                where = sorted(gpu for who, gpu in self.executor.warm if who == user)
                raise Broken(
                    f"{user} has warm workers on {have} GPUs {where}, more than the "
                    f"{cap} GPUs {user} may hold"
                )

    def _parent_of(self, job: int) -> int | None:
        with self.disk.spared(), self.store.session() as s:
            return s.scalar(select(JobRow.parent).where(JobRow.id == job))

    def _runs_as_rounds(self, job: int) -> bool:
        """Whether ``job`` was given as a task to a policy that plans rounds."""
        p = self.oracle.promises.get(job)
        return p is not None and p.spec.task is not None and self.oracle.rounds_live

    def _check_book(self, statuses: dict[int, str]) -> None:
        """The loop's book agrees with the policy's state and the store: it holds every
        live job it has seen, and forgets every job that is over (nothing kept for
        ever about ended jobs)."""
        book, seen = self.scheduler.book, self.scheduler.seen
        problems = book.check()
        if problems:
            raise Broken(f"the job book: {problems[0]}")
        for job, status in statuses.items():
            if job in self.tampered:
                continue
            rec = book.get(job)
            if status not in ENDED and job <= seen and rec is None:
                raise Broken(f"job {job} is {status} in the store, and the loop has forgotten it")
            if rec is not None and status in ENDED and rec.attempt is None:
                raise Broken(f"job {job} ended {status}; the loop still keeps it ({rec.phase})")

    # ------------------------------------------------------------- driving
    def step(self) -> None:
        """One pass, handled as the service's thread handles it."""
        before, faults = self.scheduler.errors, self.scheduler.faults
        full, fired = self.disk.on, self.disk.fired
        began = self.clock()
        self.oracle.passes += 1
        number = self.oracle.passes
        try:
            self.bounds.live = True
            try:
                self.scheduler.step()
            finally:
                self.bounds.live = False
        except ServiceKilled:
            # kill -9 inside the pass: a new service, with a new executor that knows of
            # processes only what it can read (pid files, exit records, the table)
            self.crashes += 1
            self.executor = self.executor.restarted()
            self.scheduler = self._start()
            self.passes += 1
            return
        except Exception as exc:
            if not (full or injected(exc)):
                raise Broken(f"a pass failed: {type(exc).__name__}: {exc}") from exc
            # as run() does: the next step resyncs from the store once it works
        else:
            sch = self.scheduler
            if sch.errors == before and sch.faults == faults and not sch.resync_due:
                self.oracle.good_passes.append((number, began, self.clock()))
                self.oracle.good_back[number] = self.oracle.back
        self.passes += 1
        full = full or self.disk.on or self.disk.fired > fired  # the store's trouble met
        if self.scheduler.errors > before and not full:
            raise Broken(f"a pass failed ({self.scheduler.errors - before} error(s) counted)")
        if self.scheduler.faults > faults and not full:
            raise Broken(f"the loop failed on one job (set aside): {self.scheduler.last_fault}")

    def next_step(self, limit: float) -> float:
        """When the service's thread would next run a pass: at its tick, its
        wake-up or turn, or when a process ends (an exit wakes it)."""
        now = self.clock()
        soonest = now + max(self.scheduler.sleep_for(), 0.01)
        end = self.executor.next_end()
        if end is not None:
            soonest = min(soonest, max(end, now + 0.01))
        return min(soonest, limit)

    def run_until(self, limit: float) -> None:
        while self.clock() < limit:
            self.clock.now = self.next_step(limit)
            self.step()
            self.check()
            if self.watches:
                self._watch()
                self.check()
            if self.resumes:
                self._resume_due(self.clock())

    # ---------------------------------------------------------- operations
    def apply(self, op: Op) -> None:
        getattr(self, f"_op_{op.kind}")(*op.args)

    def _user(self, name: str) -> UserConfig:
        return next(u for u in self.config.users if u.name == name)

    def _op_submit(self, user: str, raw: dict[str, Any]) -> None:
        if "begin_in" in raw:  # a begin time, from the virtual time of its submission
            raw = {**raw, "begin": self.clock() + raw["begin_in"]}
            del raw["begin_in"]
        if "after_failing" in raw:  # on the last job whose command fails, if any
            kind = raw.pop("after_failing")
            failing = [
                j for j, p in self.oracle.promises.items() if p.command in ("false", "crash")
            ]
            if failing:
                raw = {**raw, "dependency": f"{kind}:{max(failing)}"}
        sch = self.scheduler
        admission = Admission(
            self.config,
            self.store,
            sch.cluster.gpus_by_type,
            sch.identities,
            lambda: [(node.gpu_type, node.gpus) for node in sch.cluster.nodes],
        )
        try:
            spec = JobSpec(**raw)
            spec = admission.check(spec, self._user(user))
            with self.store.session() as s:
                admission.check_quota(s, self._user(user), 1)
                admitted = admission.admit(s, spec, self._user(user))
                s.execute(  # the virtual time of submission, as the API's clock would say
                    update(JobRow)
                    .where(JobRow.id >= admitted.first.id)
                    .values(submit_time=self.clock())
                )
                made = list(admitted.rows())
            self.oracle.submitted(made, self.clock())
        except (ValidationError, Refused, ValueError):
            self.refused += 1
        except OperationalError as exc:
            if not (self.disk.on or injected(exc)):
                raise
            self.refused += 1  # the API answers 507 (503: the store is busy)

    def _request(self, job: int, action: str, **values: Any) -> bool:
        """Ask the loop ``action`` for ``job`` through the API's own route, as the job's
        owner; True when the route stored it (False: refused, as a 409 or 404 is)."""
        with self.disk.spared(), self.store.session() as s:
            owner = s.scalar(select(JobRow.user).where(JobRow.id == job))
        user = next((u for u in self.config.users if u.name == owner), None)
        if user is None:
            return False
        ctx = Context(self.config, self.store, _Front(self.scheduler))  # type: ignore[arg-type]
        try:
            if action == "priority":
                routes.set_priority(ctx, job, PriorityBody(priority=values["priority"]), user)
            else:
                getattr(routes, action)(ctx, job, user)
        except (HTTPException, Refused):
            return False
        except OperationalError as exc:
            if not (self.disk.on or injected(exc)):
                raise
            return False
        return True

    def _beat(self, process: VirtualProcess, body: dict[str, Any]) -> None:
        """A training process's heartbeat, through the API's heartbeat route with its
        attempt's token (a full disk: the route answers 507, and the beat is lost)."""
        token = process.request.env.get("CORRAL_JOB_TOKEN", "")
        scope = {"type": "http", "headers": [(b"authorization", f"Bearer {token}".encode())]}
        ctx = Context(self.config, self.store, _Front(self.scheduler))  # type: ignore[arg-type]
        with contextlib.suppress(HTTPException, OperationalError):
            routes.heartbeat(ctx, process.job, HeartbeatBody(**body), Request(scope))

    def _op_cancel(self, job: int) -> None:
        mine = [p for p in self.executor.processes.values() if p.job == job]
        last = max(mine, key=lambda p: p.attempt, default=None)
        ended = last.attempt if last is not None and last.ended is not None else None
        if self._request(job, "cancel"):
            self.oracle.cancel_asked(job, self.clock(), ended)

    def _op_suspend(self, job: int) -> None:
        self._request(job, "suspend")

    def _op_resume(self, job: int) -> None:
        self._request(job, "resume")

    def _op_cancel_stopping(self, pick: int) -> None:
        """A user cancels a job whose stop is under way (it timed out, or is being
        preempted or suspended, and has not gone yet), as one does when it lingers."""
        stopping = sorted(j for j, a in self.scheduler.attempts.items() if a.stop is not None)
        if stopping:
            self._op_cancel(stopping[pick % len(stopping)])

    def _op_resume_held(self, pick: int, after: float) -> None:
        """A job that waits is held, then suspended, and ``after`` seconds later its
        user resumes it: it must stay held (PENDING, off the GPUs) until released
        (the drain releases it)."""
        with self.disk.spared(), self.store.session() as s:
            waiting = list(
                s.scalars(
                    select(JobRow.id)
                    .where(JobRow.status == "PENDING", JobRow.held.is_(None))
                    .order_by(JobRow.id)
                )
            )
        if not waiting:
            return
        job = waiting[pick % len(waiting)]
        self._op_hold(job)
        due: list[float] = []

        def next_step() -> bool:  # (one request at a time: each once the last is done)
            with self.disk.spared(), self.store.session() as s:
                row = s.execute(
                    select(JobRow.status, JobRow.held, JobRow.request).where(JobRow.id == job)
                ).one()
            if row.request is not None:
                return False
            if row.held is None or row.status in ENDED:
                return True  # (it started before the hold came: nothing to do)
            if row.status == "PENDING" and not due:
                self._op_suspend(job)
                due.append(self.clock() + after)
                return False
            if not due:  # (held, and not waiting: suspended by another request, or
                return False  # starting; the hold comes to it first)
            if self.clock() < due[0]:
                return False
            self._op_resume(job)
            return True

        self._when(next_step)

    def _op_throttled_return(self, after: float) -> None:
        """alice submits four 20-s tasks of one GPU throttled to two at a time
        (``%2``); once two run, one is suspended, and ``after`` seconds later its
        user resumes it, while a third task of its array has taken its place: it
        must wait for one of them to end (its dependencies were met at its first
        start, but its throttle counts it again)."""
        known = set(self.oracle.promises)
        self._op_submit("alice", {"command": ["sleep", "20"], "gpus": 1, "array": "0-3%2"})
        tasks = sorted(set(self.oracle.promises) - known)
        suspended: list[tuple[int, float]] = []  # (the task, when to resume it)

        def next_step() -> bool:
            if not suspended:
                attempts = self.scheduler.attempts
                running = [j for j in tasks if j in attempts and attempts[j].stop is None]
                if len(running) < 2:
                    return not tasks  # (refused: nothing to do)
                self._op_suspend(running[0])
                suspended.append((running[0], self.clock() + after))
                return False
            job, due = suspended[0]
            if self.clock() < due:
                return False
            self._op_resume(job)
            return True

        self._when(next_step)

    def _op_suspend_running(self, pick: int) -> None:
        """A user suspends a job that runs (the drain resumes it)."""
        running = sorted(j for j, a in self.scheduler.attempts.items() if a.stop is None)
        if running:
            self._op_suspend(running[pick % len(running)])

    def _op_crowd(
        self, gpus: int, n: int, seconds: float, wall: float | None, train: bool = False
    ) -> None:
        """alice submits ``n`` tasks of one size at once (an array), and half as many
        four seconds later: more than the GPUs free, they queue, and a sharing policy
        packs them (training jobs, whose throughput it measures) and makes them take
        turns (with a wall time, some time out while they do)."""
        command = ["train", f"{seconds * 10:g}", "10"] if train else ["sleep", f"{seconds:g}"]
        spec: dict[str, Any] = {"command": command, "gpus": gpus, "array": f"0-{n - 1}"}
        if train:  # a model of its own: pairs of it are judged apart from others'
            spec["job_type"] = "crowd"
        if wall is not None:
            spec["wall_time"] = wall
        self._op_submit("alice", spec)
        # a second wave once the first runs (and, training, has reported its speed):
        # those wait for GPUs running one job each, to be packed there or take turns
        second = self.clock() + 4.0
        again = {**spec, "array": f"0-{max(n // 2, 1) - 1}"}

        def later() -> bool:
            if self.clock() < second:
                return False
            self._op_submit("alice", again)
            return True

        self._when(later)

    def _op_drain_busy(self, seconds: float) -> None:
        """An admin drains the node running the most processes (packed and
        time-sliced ones among them), and resumes it ``seconds`` later."""
        nodes = self.executor.nodes()
        busy = [0] * len(nodes)
        for p in self.executor.running():
            for slot in p.request.gpus:
                busy[nodes.index(slot.node)] += 1
        self._op_drain_node(max(range(len(nodes)), key=lambda k: (busy[k], -k)), seconds)

    WATCH = 60.0
    """Seconds an operation aimed at a moment (a packed job, a paused one) waits for it."""

    def _when(self, ready: Callable[[], bool]) -> None:
        """Run ``ready`` now and after each step until it says it has acted, or for
        :attr:`WATCH` seconds."""
        if not ready():
            self.watches.append((self.clock() + self.WATCH, ready))

    def _watch(self) -> None:
        now = self.clock()
        self.watches = [(until, f) for until, f in self.watches if now < until and not f()]

    def _stoppable(self, pick: int, packed_only: bool = False) -> tuple[int, VirtualProcess] | None:
        """A running job (a packed one where there is one) and its process."""
        attempts, packed = self.scheduler.attempts, self.scheduler.book.packed_on
        live = {p.job: p for p in self.executor.running() if not p.foreign}
        jobs = sorted(j for j, a in attempts.items() if a.stop is None and j in live)
        guests = [j for j in jobs if j in packed]
        sharing = self.scheduler.sharing
        both_run = [j for j in guests if not sharing.taking_turns(j)]  # packed, not sliced
        chosen = both_run if packed_only else both_run or guests or jobs
        if not chosen:
            return None
        job = chosen[pick % len(chosen)]
        return job, live[job]

    def _op_cancel_packed(self, pick: int, delay: float) -> None:
        """A user cancels a job packed beside another (when one is, within a minute),
        whose checkpoint takes ``delay`` seconds after SIGTERM: its GPUs are not free
        until it has gone; and submits it again. (A policy that never packs: any
        running job.)"""
        packs = self.scheduler.policy.shares_gpus

        def ready() -> bool:
            found = self._stoppable(pick, packed_only=packs)
            if found is None:
                return False
            job, process = found
            process.term_delay = max(process.term_delay, delay)
            self._op_cancel(job)
            # and submits it again at once (as after a mistake in its arguments): a
            # job of its size waits while the GPUs it leaves are still in use
            with self.disk.spared(), self.store.session() as s:
                row = s.get(JobRow, job)
                user, spec = (row.user, dict(row.spec)) if row is not None else ("", {})
            kept = ("command", "gpus", "job_type", "wall_time")
            again: dict[str, Any] = {k: spec[k] for k in kept if k in spec}
            if user and again:
                self._op_submit(user, again)
            return True

        self._when(ready)

    def _op_requeue_running(self, pick: int, delay: float) -> None:
        """A user requeues a running job (``scontrol requeue``), whose checkpoint takes
        ``delay`` seconds: it leaves, waits again and runs again (not counted as a
        retry)."""
        found = self._stoppable(pick)
        if found is None:
            return
        job, process = found
        with self.disk.spared(), self.store.session() as s:
            owner = s.scalar(select(JobRow.user).where(JobRow.id == job))
        user = next(u for u in self.config.users if u.name == owner)
        process.term_delay = max(process.term_delay, delay)
        ctx = Context(self.config, self.store, _Front(self.scheduler))  # type: ignore[arg-type]
        try:
            bulk_routes.act_on_many(ctx, "requeue", bulk_routes.Selection(ids=[job]), user)
        except HTTPException:
            pass
        except OperationalError as exc:
            if not (self.disk.on or injected(exc)):
                raise

    def _op_restart_paused(self) -> None:
        """``kill -9`` of the service while a job is paused (time-sliced or suspended),
        when one is within a minute: the new one must know how long it was, for its
        wall time."""

        def ready() -> bool:
            if any(p.paused for p in self.executor.running()):
                self._op_restart()
                return True
            return False

        self._when(ready)

    def _op_crash(self, k: int, where: str | None = None) -> None:
        """``kill -9`` of the service at the ``k``-th boundary inside the passes to come
        (of kind ``where``: before or after a commit, before or after a launch, before a
        signal; None: of any kind)."""

        def kill(at: str) -> None:
            raise ServiceKilled(at)

        self.bounds.arm(k, kill, None if where is None else frozenset({where}))

    def _op_race(self, k: int, where: str | None, request: str, arg: Any, other: int = 0) -> None:
        """An API request landing inside a pass: at the ``k``-th point of the passes to
        come where no transaction of the loop is open (of kind ``where``), with another
        user's request (a priority, as it was) stored just before that pass. The jobs
        asked of are picked among those not ended (when they land): a race on a job
        long over says little."""
        if other and (job := self._unended(other)) is not None:
            self._op_priority(job, 0)

        def land(_where: str) -> None:
            self.races += 1
            if request == "submit":
                self._op_submit(*arg)
                return
            pick = arg[0] if request == "priority" else arg
            job = self._unended(pick)
            if job is None:
                return
            if request == "priority":
                self._op_priority(job, arg[1])
            else:
                getattr(self, f"_op_{request}")(job)

        self.bounds.arm(k, land, Boundaries.WRITABLE if where is None else frozenset({where}))

    def _unended(self, pick: int) -> int | None:
        """The ``pick``-th job (cyclically) of those not ended, or None."""
        with self.disk.spared(), self.store.session() as s:
            ids = list(
                s.scalars(select(JobRow.id).where(JobRow.status.not_in(ENDED)).order_by(JobRow.id))
            )
        return ids[pick % len(ids)] if ids else None

    def _op_executor_fault(self, fault: str, seconds: float) -> None:
        """The next launch raises, ignores SIGTERM or takes seconds to leave after it,
        or the next process to end leaves no exit record, or a corrupt one."""
        self.executor.faults[fault] = seconds

    def _op_beat_replay(self, pick: int) -> None:
        """A heartbeat sent earlier arrives again: late, duplicated, out of order, or
        from an attempt that has ended."""
        sent = self.executor.sent
        if not sent:
            return
        process, body = sent[pick % len(sent)]
        self._beat(process, body)

    def _op_pid_reuse(self) -> None:
        self.executor.reuse_pid()

    def _op_clock_back(self, seconds: float) -> None:
        """The host's clock steps backwards (an NTP correction)."""
        self.oracle.aim_live([p.job for p in self.executor.running()], "the clock stepped back")
        self.oracle.unsteady.append((self.clock() - seconds, self.clock() + self.config.tick))
        self.oracle.back += seconds
        self.clock.now -= seconds
        self.executor.clock_stepped_back(seconds)

    def _op_drain_node(self, node: int, seconds: float) -> None:
        """An admin drains a node (through the API's route), and resumes it ``seconds``
        later."""
        name = self.executor.nodes()[node]
        if self._node_state(name, "drain"):
            now = (self.oracle.passes, self.oracle.back)
            self.oracle.drains.update({s.id: now for s in self.executor.slots() if s.node == name})
            self.resumes.append((self.clock() + seconds, name))

    def _node_state(self, name: str, action: str) -> bool:
        """Drain or resume a node as the admin does (the route's code); True when done."""
        admin = next(u for u in self.config.users if u.admin)
        ctx = Context(self.config, self.store, _Front(self.scheduler))  # type: ignore[arg-type]
        route = cluster_routes.drain if action == "drain" else cluster_routes.resume_node
        try:
            route(ctx, name, admin, None)
        except HTTPException:
            return False
        except OperationalError as exc:
            if not (self.disk.on or injected(exc)):
                raise
            return False
        if action == "resume":
            for s in self.executor.slots():
                if s.node == name:
                    self.oracle.drains.pop(s.id, None)
        return True

    def _resume_drained(self) -> None:
        """The admin resumes every drained node: those drained by hand, and those the
        loop drained after node failures in a row (as Slurm's, they wait for an admin;
        a job that fails at once may have the loop drain one again in the drain)."""
        with self.disk.spared(), self.store.session() as s:
            drained = list(s.scalars(select(NodeRow.name).where(NodeRow.state == "drained")))
        self.resumes = [(self.clock(), name) for name in drained]
        self._resume_due()

    def _resume_due(self, until: float | None = None) -> None:
        """The admin resumes the nodes drained whose time has come (all: ``until`` None)."""
        due = [(t, n) for t, n in self.resumes if until is None or t <= until]
        for item in due:
            if self._node_state(item[1], "resume"):
                self.resumes.remove(item)

    def _op_hold(self, job: int) -> None:
        self._request(job, "hold")

    def _op_release(self, job: int) -> None:
        if self._request(job, "release"):
            self.oracle.release_asked(job, self.clock())

    def _op_priority(self, job: int, priority: int) -> None:
        self._request(job, "priority", priority=priority)

    def _live(self, pick: int) -> VirtualProcess | None:
        live = sorted(self.executor.running(), key=lambda p: p.pid)
        return live[pick % len(live)] if live else None

    def _op_kill_process(self, pick: int) -> None:
        process = self._live(pick)
        if process is not None:  # an operator's kill -9: the loop did not ask for it
            self.oracle.aim(process.job, "its process was killed by an operator")
            self.executor.signal(ProcessRef(process.pid, process.start), signal.SIGKILL)

    def _op_fail_node(self, node: int) -> None:
        name = self.executor.nodes()[node]
        self.oracle.aim_live(
            [p.job for p in self.executor.running() if any(g.node == name for g in p.request.gpus)],
            f"{name} failed under it",
        )
        self.executor.fail_node(name)

    def _op_return_node(self, node: int) -> None:
        self.executor.return_node(self.executor.nodes()[node])

    def _op_fair_share(self, weight: int) -> None:
        """The operator turns fair share on (a restart with the new config): a short
        half-life and refresh, so that the users' factors move within a schedule."""
        conf = FairShareConfig(enabled=True, weight=weight, half_life=120.0, refresh=5.0)
        self.config = self.config.model_copy(update={"fair_share": conf})
        self._op_restart()

    def _op_restart(self) -> None:
        """``kill -9`` of the service: the loop's memory is lost, processes run on.
        What the new loop recovers from the store must be what the old one held."""
        before = None if self.scheduler.resync_due else self._book()
        self.scheduler = self._start()
        after = None if self.scheduler.resync_due else self._book()
        if before is not None and after is not None and before != after:
            raise Broken(f"the loop held {before}; recovery from the store gives {after}")

    def _book(self) -> dict[int, tuple[int, tuple[int, ...]]]:
        """The loop's attempts in flight: job -> (attempt, GPUs)."""
        return {job: (a.number, tuple(a.gpus)) for job, a in self.scheduler.attempts.items()}

    def _op_disk_full(self, seconds: float) -> None:
        # its heartbeats cannot be kept meanwhile: a training job may be taken for hung
        self.oracle.aim_live([p.job for p in self.executor.running()], "a full disk")
        self.oracle.unsteady.append((self.clock(), self.clock() + seconds + self.config.tick))
        self.disk.start("full", seconds)

    def _op_store_fault(self, kind: str, seconds: float) -> None:
        """The store in trouble: busy, failing reads or slow commits for ``seconds``,
        or once a dropped connection or a commit whose acknowledgement is lost."""
        if StoreFaults.KINDS[kind] == "span":
            if kind != "slow":  # heartbeats cannot be kept meanwhile
                self.oracle.aim_live([p.job for p in self.executor.running()], f"store {kind}")
            self.oracle.unsteady.append(
                (self.clock(), self.clock() + seconds + 2 * self.config.tick)
            )
        self.disk.start(kind, seconds)

    def _store_fault_met(self) -> None:
        """A fault met: the pass it fails is done again, a tick later."""
        now = self.clock()
        self.oracle.unsteady.append((now, now + 2 * self.config.tick))

    def _op_clock_jump(self, seconds: float) -> None:
        self.oracle.aim_live([p.job for p in self.executor.running()], "a clock jump")
        self.oracle.unsteady.append((self.clock(), self.clock() + seconds + self.config.tick))
        self.clock.advance(seconds)

    def _op_heartbeat(self, pick: int, high: bool) -> None:
        """The largest (or smallest) figures a heartbeat may carry, for a running job."""
        process = self._live(pick)
        if process is None or self.disk.on:
            return
        self.oracle.aim(process.job, "a heartbeat with extreme figures")
        figure = float(MAX_REPORTED) if high else 0.0
        batch = MAX_BATCH if high else None
        with self.disk.spared(), self.store.session() as s:
            row = s.get(JobRow, process.job)
            if row is not None:
                row.steps = int(figure)
                row.throughput = figure
                row.throughput_since = self.clock() - 1.0
                row.last_heartbeat = self.clock()
                row.batch_size = batch
                row.grad_noise_scale = figure

    def _op_corrupt(self, job: int, which: int) -> None:
        name, value = CORRUPTIONS[which]
        if self.disk.on:
            return
        self.tampered.add(job)
        # a round's task corrupted fails its job's round: a fault aimed at the job too
        self.oracle.aim(job, "a record written behind the loop's back")
        try:  # (the loop's faults are not the outsider's: a dropped connection still
            # pending waits for the loop's next statement)
            with self.disk.spared(), self.store.session() as s:
                s.execute(update(JobRow).where(JobRow.id == job).values({name: value}))
        except IntegrityError:
            pass  # the database itself refuses it (NaN where NULL is not allowed)

    # --------------------------------------------------------------- drain
    def drain(self) -> None:
        """The inputs stop: the disk is freed, nodes come back, the service is
        restarted once (recovery must agree with the loop), held jobs go, and
        every job must end."""
        self.disk.until, self.disk.once = -1.0, None
        self.watches.clear()
        for node in list(self.executor.down):
            self.executor.return_node(node)
        self._resume_drained()
        self.run_until(self.clock() + 2 * self.config.tick)
        self._op_restart()
        limit = self.clock() + DRAIN_LIMIT
        while self.clock() < limit:
            with self.store.session() as s:  # an admin lets held jobs go
                held = or_(JobRow.status == "SUSPENDED", JobRow.held.is_not(None))
                released = []
                for row in s.scalars(select(JobRow).where(held)):
                    if row.request is None:
                        row.request = "release"
                        released.append(row.id)
            for job in released:
                self.oracle.release_asked(job, self.clock())
            self._resume_drained()  # (the loop may drain a node again meanwhile)
            self.run_until(min(self.clock() + 60.0, limit))
            if not self.waiting():
                with self.store.session() as s:
                    self.oracle.check_end(s, self.tampered)
                return
        raise Broken(f"jobs never ended: {self.waiting()}")

    def waiting(self) -> dict[int, str]:
        """Jobs not ended, except those whose dependency can never be met."""
        with self.store.session() as s:
            rows = s.execute(
                select(JobRow.id, JobRow.status, JobRow.reason).where(JobRow.status.not_in(ENDED))
            ).all()
        return {
            job: f"{status} ({reason})"
            for job, status, reason in rows
            if reason != "DependencyNeverSatisfied"
        }

    def close(self) -> None:
        event.remove(JobRow.status, "set", self._status_set)
        if self._strict is None:
            os.environ.pop(STRICT_TRANSITIONS_ENV, None)
        else:
            os.environ[STRICT_TRANSITIONS_ENV] = self._strict
        self.store.dispose()


@contextmanager
def world(policy: str, folder: Path | None = None) -> Iterator[World]:
    with tempfile.TemporaryDirectory(prefix="corral-sim-") as scratch:
        w = World(policy, folder or Path(scratch))
        try:
            yield w
        finally:
            w.close()


@dataclass
class Result:
    """How a schedule's run went: the first invariant it broke (None: none), and
    the passes the loop made."""

    violation: Violation | None
    passes: int
    crashes: int = 0
    """Times the service was killed inside a pass or a recovery."""
    races: int = 0
    """API requests that landed inside a pass."""


def play(policy: str, ops: list[Op], folder: Path | None = None) -> Result:
    """Run ``ops`` against a fresh loop, checking the invariants after every step."""
    with world(policy, folder) as w:
        start = w.clock()
        last: Op | None = None
        try:
            w.check()
            for op in ops:
                w.run_until(start + op.at)
                last = op
                w.apply(op)
                w.check()
            w.drain()
        except Broken as exc:
            return Result(
                Violation(exc.what, w.clock() - start, last), w.passes, w.crashes, w.races
            )
        except Exception as exc:  # the harness's own trouble counts too: it is the loop's
            what = f"{type(exc).__name__}: {exc}"
            return Result(Violation(what, w.clock() - start, last), w.passes, w.crashes, w.races)
        return Result(None, w.passes, w.crashes, w.races)


def run_schedule(policy: str, ops: list[Op], folder: Path | None = None) -> Violation | None:
    """The first invariant ``ops`` breaks, or None."""
    return play(policy, ops, folder).violation


def run_seed(
    policy: str, seed: int, length: int = 40, holds: bool = True, inside: bool = True
) -> Violation | None:
    """The first invariant the schedule of ``seed`` breaks, or None."""
    return run_schedule(policy, make_schedule(seed, length, holds=holds, inside=inside))


def shrink(policy: str, ops: list[Op], budget: int = 200) -> list[Op]:
    """A shorter schedule that still breaks an invariant: operations are dropped,
    in halves and then one by one, while the run still fails (at most
    ``budget`` runs)."""
    runs = 0
    chunk = max(len(ops) // 2, 1)
    while chunk >= 1 and runs < budget:
        k, changed = 0, False
        while k < len(ops) and runs < budget:
            candidate = ops[:k] + ops[k + chunk :]
            runs += 1
            if candidate and run_schedule(policy, candidate) is not None:
                ops, changed = candidate, True
            else:
                k += chunk
        if not changed:
            chunk //= 2
    return ops
