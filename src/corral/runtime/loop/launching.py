"""Launching attempts: the attempt row before the process, the job's environment,
identity, folder and limits."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select

from corral.model.jobs import JobStatus
from corral.runtime.execution.executor import (
    KeeperRequest,
    LaunchRequest,
    free_port,
    write_exit_record,
)
from corral.runtime.execution.identity import job_folder, write_job_script
from corral.runtime.execution.launcher import NOT_STARTED
from corral.runtime.execution.pty_host import host_argv
from corral.runtime.execution.staging import MARK, stage_argv, staged
from corral.runtime.jobspec.config import hash_token
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.job_book import Attempt
from corral.runtime.loop.loop_base import LoopState
from corral.runtime.loop.parking import Parking
from corral.runtime.loop.round_jobs import RoundJobs
from corral.runtime.storage.store import AttemptRow, JobInputRow, JobRow


def slurm_env(
    row: JobRow, spec: JobSpec, number: int, gpus: tuple[int, ...], own: Path
) -> dict[str, str]:
    """The variables a batch script written for Slurm reads (its job and array ids,
    name, submit directory, GPU and task counts), beside corral's own ``CORRAL_*``.

    The job's command runs once on each node (on one machine, once); an ``srun``
    line in it starts ``tasks_per_node`` tasks there (``SLURM_NTASKS_PER_NODE``,
    see :mod:`corral.runtime.execution.srun`), so ``SLURM_NTASKS`` counts them
    over all nodes. The Ray executor gives each rank of a multi-node gang its own
    ``SLURM_PROCID``, ``SLURM_NODEID`` and node counts. ``SLURM_SUBMIT_DIR`` is
    the directory ``corral submit`` ran in, as sbatch records it (a job submitted
    through the API without one: its working directory)."""
    tasks = spec.tasks_per_node or 1
    env = {
        "SLURM_JOB_ID": str(row.id),
        "SLURM_JOBID": str(row.id),
        "SLURM_JOB_NAME": row.name,
        "SLURM_JOB_USER": row.user,
        "SLURM_SUBMIT_DIR": spec.submit_dir or spec.workdir or str(own),
        "SLURM_RESTART_COUNT": str(number - 1),
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1",
        "SLURM_NTASKS": str(tasks),
        "SLURM_NPROCS": str(tasks),
        "SLURM_NTASKS_PER_NODE": str(tasks),
        "SLURM_TASKS_PER_NODE": str(tasks),
        "SLURM_PROCID": "0",
        "SLURM_NODEID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_GPUS_ON_NODE": str(len(gpus)),
        "SLURM_JOB_GPUS": ",".join(str(g) for g in gpus),
        "SLURM_CLUSTER_NAME": "corral",
    }
    if spec.array_index is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(spec.array_job or row.id)
        env["SLURM_ARRAY_TASK_ID"] = str(spec.array_index)
    if spec.cpus is not None:
        env["SLURM_CPUS_PER_TASK"] = str(spec.cpus)
    if spec.vc is not None:
        env["SLURM_JOB_ACCOUNT"] = spec.vc
    return env


def output_path(spec: JobSpec, job: int, user: str, pattern: str | None = None) -> str | None:
    """The job's ``output`` (or another of its paths, ``error``) with Slurm's patterns
    filled in: %j job, %a array index, %A array job, %x name, %u user, %% a percent."""
    pattern = spec.output if pattern is None else pattern
    if pattern is None:
        return None
    values = {
        "j": str(job),
        "a": str(spec.array_index) if spec.array_index is not None else "",
        "A": str(spec.array_job or job),
        "x": spec.name,
        "u": user,
        "%": "%",
    }
    return re.sub(r"%([jaAxu%])", lambda m: values[m.group(1)], pattern)


JOB_MEMORY_SHARE = 0.9
"""Of the host's memory, what the jobs share by their GPUs (the rest: the system and
the service)."""
JOB_MEMORY_LEAST = 2 * 2**30
"""The least a job's default share is, per GPU (a host of many virtual GPUs and little
memory would otherwise starve a framework's import)."""


def host_memory() -> int:
    """Bytes of memory of this host (0: unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return 0


LOW_PRIORITY_NICE = 19
"""OS niceness of a low-priority (opportunistic) job's processes."""


class Launching:
    """Starting the processes the plan placed once their GPUs are free."""

    def __init__(self, loop: LoopState, parking: Parking, rounds: RoundJobs) -> None:
        self.loop = loop
        self.parking = parking
        self.rounds = rounds
        self.warm_cap: Callable[[str], int | None] = lambda user: None
        """The user's cap on warm workers (the GPUs they may hold; None: none), which a
        cold start's worker for next time keeps to as warming ahead does."""

    def launch_ready(self, now: float) -> None:
        for job, gpus in list(self.loop.book.placed.items()):
            with self.loop.handling(job, "launching it"):
                self._launch_one(job, gpus, now)

    def _launch_one(self, job: int, gpus: tuple[int, ...], now: float) -> None:
        """Launch a placed job once its GPUs are free (a parked one is resumed in place)."""
        book = self.loop.book
        rec = book[job]
        if self.parking.parked(job):  # see runtime.parking
            assert rec.attempt is not None
            self.parking.restart_parked(rec.attempt, gpus, now)
            return
        host = rec.packed_on  # a packed guest shares its host's GPUs
        if rec.attempt is not None or any(self.loop.holders.get(g, host) != host for g in gpus):
            return
        if host is not None and self._guest_leaving(job, host):
            return
        book.launched(job)
        self._launch(job, gpus, now)

    def _default_memory(self, gpus: int) -> int | None:
        """Bytes of memory a job on ``gpus`` GPUs may use when it gives none: its GPUs'
        share of the host's memory (``job_memory``: auto), as Slurm's DefMemPerGPU."""
        setting = self.loop.config.job_memory
        if setting is None:
            return None
        if setting != "auto":
            return int(setting) * gpus
        total, host = len(self.loop.slots) or 1, host_memory()
        if not host:
            return None
        return int(max(host * JOB_MEMORY_SHARE / total, JOB_MEMORY_LEAST) * max(gpus, 1))

    def _guest_leaving(self, job: int, host: int) -> bool:
        """Whether another guest packed on ``host`` was stopped and has not exited
        yet: a new guest waits for it, so that no GPU runs a job the plan took
        off it beside the one it put there (the jobs of a time-sliced group
        stay, taking turns)."""
        attempts = self.loop.attempts
        return any(
            other != job and on == host and (a := attempts.get(other)) is not None and a.stop
            for other, on in self.loop.book.packed_on.items()
        )

    def _launch(self, job: int, gpus: tuple[int, ...], now: float) -> None:
        config = self.loop.config
        token = secrets.token_urlsafe(24)
        with self.loop.store.session() as s:
            row = s.get(JobRow, job)
            assert row is not None
            spec = self.loop.spec_of(row)
            number = (s.scalar(select(func.count()).where(AttemptRow.job_id == job)) or 0) + 1
            folder = config.state_dir / "jobs" / str(job) / f"attempt-{number}"
            att = AttemptRow(
                job_id=job,
                number=number,
                phase=row.phase,
                gpus=list(gpus),
                start_time=now,
                dir=str(folder),
                token_sha256=hash_token(token),
                steps_start=row.checkpoint_step or 0.0,
            )
            s.add(att)
            s.flush()
            attempt_id = att.id
            rec = self.loop.book[job]
            note, rec.start_note = rec.start_note, None  # how it runs (Opportunistic, Shared)
            row.status, row.gpus, row.reason = JobStatus.RUNNING, list(gpus), note
            rec.preempted = False
            row.last_heartbeat = None
            if row.first_start is None:
                row.first_start = now
                self.loop.metrics.wait_seconds.observe(max(now - row.submit_time, 0.0))
            rec.reason = note
            self.rounds.round_task_started(s, row, now)
            self.loop.store.event(s, "start", job, attempt=number, gpus=list(gpus), phase=row.phase)
            env = self._env(row, spec, number, gpus, folder, token)
            run_as = self.loop.identities.get(row.user)
            inputs = s.get(JobInputRow, spec.array_job or job)  # (once for an array)
            script = None if inputs is None else inputs.script
            exported = None
            if inputs is not None and config.export_environment:
                exported = inputs.environment
        a = Attempt(job, attempt_id, number, row.phase, None, gpus, folder, now, spec.wall_time)
        a.warning, a.batch_script = spec.warning(), spec.script_path is not None
        rec.attempt = a
        rec.share_changed = now
        i = self.loop.live.index.get(job)
        if i is not None:  # no progress before its process has started (a switch cost)
            self.loop.live.progress_from(i, self.loop.rel(now) + rec.startup)
        host = rec.packed_on
        if host is None:
            for g in gpus:
                self.loop.holders[g] = job
        elif (partner := self.loop.book.get(host)) is not None:
            partner.share_changed = now
        folder.mkdir(parents=True, exist_ok=True)
        try:
            own = job_folder(self.loop.config, job, run_as)
            if spec.round_of is not None:  # its job's folder holds the rounds' state
                job_folder(self.loop.config, spec.round_of.job, run_as)
            command = spec.command
            if script is not None and spec.script_path in command[1:]:  # as submitted
                copy = write_job_script(own, script, run_as)
                k = command.index(spec.script_path, 1)
                command = [*command[:k], str(copy), *command[k + 1 :]]
            if spec.interactive:  # on a terminal its owner attaches to (corral alloc)
                command = host_argv(sys.executable, str(own), command)
            if spec.stage:  # its inputs are staged first, unless staged already
                command = stage_argv(sys.executable, own / MARK, spec.stage, spec.command)
            a.ref = self.loop.executor.launch(
                LaunchRequest(
                    command,
                    env,
                    spec.workdir or str(own),
                    self.loop.slots_of(gpus),
                    folder,
                    a.log,
                    run_as=run_as,
                    cpus=spec.cpus_held() or None,
                    memory=spec.memory * 2**20 if spec.memory else None,
                    output=output_path(spec, job, row.user),
                    error=output_path(spec, job, row.user, spec.error) if spec.error else None,
                    warm_argv=spec.warm_argv(),
                    warm_most=self.warm_cap(row.user),
                    nice=LOW_PRIORITY_NICE if rec.low_priority is not None else None,
                    keeper=self._keeper_request(spec, gpus),
                    log_limit=self.loop.config.log_limit,
                    pids=self.loop.config.job_max_processes,
                    memory_default=self._default_memory(len(gpus)),
                    base_env=exported,
                )
            )
        except Exception as exc:  # one job's launch never fails the pass: its attempt ends
            write_exit_record(folder, NOT_STARTED, f"cannot launch: {type(exc).__name__}: {exc}")
            return
        how = getattr(self.loop.executor, "started_how", {}).pop(a.ref.pid, None)
        with self.loop.store.session() as s:
            stored = s.get(AttemptRow, attempt_id)
            if stored is not None:
                stored.pid, stored.pid_start = a.ref.pid, a.ref.pid_start
            if how is not None:  # warm, or cold and why (workers.warm)
                self.loop.store.event(s, "started", job, attempt=number, how=how)

    def _keeper_request(self, spec: JobSpec, gpus: tuple[int, ...]) -> KeeperRequest | None:
        """For a task of a round with ``workers.keep`` on: the keeper that may hold its
        job on its GPU (the executor starts one if there is none)."""
        keep = self.loop.config.workers.keep
        if not keep or spec.round_of is None or len(gpus) != 1:
            return None
        job, gpu = spec.round_of.job, gpus[0]
        socket = self.loop.config.job_root / str(job) / "rounds" / f"keeper-{gpu}.sock"
        folder = self.loop.config.state_dir / "jobs" / str(job) / f"keeper-{gpu}"
        return KeeperRequest(job, gpu, spec.keeper_argv(socket), socket, folder, keep)

    def prestage(self, job: int) -> None:
        """Start staging a waiting job's inputs ahead of its start (Liquid's
        pre-scheduling): its stage command alone, as its user, without GPUs. The
        attempt that starts it later finds the inputs staged (or waits for this)."""
        rec = self.loop.book.get(job)
        if rec is None or rec.staging is not None or not self.loop.executor.runs_without_gpus:
            return  # (on Ray the attempt stages its inputs itself)
        with self.loop.store.session() as s:
            row = s.get(JobRow, job)
            if row is None or row.status != JobStatus.PENDING or rec.spec is None:
                return
            spec = rec.spec
            user = row.user
            run_as = self.loop.identities.get(user)
        if not spec.stage:
            return
        own = job_folder(self.loop.config, job, run_as)
        if staged(own / MARK, spec.stage):
            return
        folder = self.loop.config.state_dir / "jobs" / str(job) / "staging"
        shutil.rmtree(folder, ignore_errors=True)  # a record of an earlier try is stale
        env = dict(spec.env)
        env.update(CORRAL_JOB_ID=str(job), CORRAL_JOB_DIR=str(own), CORRAL_USER=user)
        argv = stage_argv(sys.executable, own / MARK, spec.stage, None)
        cwd = spec.workdir or str(own)
        try:
            ref = self.loop.executor.launch(
                LaunchRequest(argv, env, cwd, (), folder, folder / "log.txt", run_as=run_as)
            )
        except OSError as exc:
            with self.loop.store.session() as s:
                self.loop.store.event(s, "prestage_failed", job, error=str(exc))
            return
        rec.staging = (ref, folder)
        with self.loop.store.session() as s:
            self.loop.store.event(s, "prestage", job)

    def poll_staging(self) -> None:
        """Note the early stagings that ended (their mark tells the attempt)."""
        for job, (ref, folder) in list(self.loop.book.having("staging").items()):
            record = self.loop.executor.poll(ref, folder)
            if record is None:
                continue
            self.loop.book[job].staging = None
            with self.loop.store.session() as s:
                self.loop.store.event(s, "prestaged", job, exit_code=record.exit_code)

    def _env(
        self,
        row: JobRow,
        spec: JobSpec,
        number: int,
        gpus: tuple[int, ...],
        folder: Path,
        token: str,
    ) -> dict[str, str]:
        base = self.loop.config.job_root / str(row.id)
        checkpoints = base / ("prerun" if row.phase == "prerun" else "checkpoint")
        slots = self.loop.slots_of(gpus)
        env = dict(spec.env)
        env.update(
            CORRAL_JOB_ID=str(row.id),
            CORRAL_JOB_NAME=row.name,
            CORRAL_USER=row.user,
            CORRAL_ATTEMPT=str(number),
            CORRAL_JOB_DIR=str(base),
            CORRAL_CHECKPOINT_DIR=str(checkpoints),
            CORRAL_RANK="0",
            CORRAL_LOCAL_RANK="0",
            CORRAL_WORLD_SIZE="1",
            CORRAL_MASTER_ADDR="127.0.0.1",
            CORRAL_MASTER_PORT=str(free_port()),
            CORRAL_NUM_GPUS=str(len(gpus)),
            CORRAL_NODE_GPUS=str(len(gpus)),  # (one node here; a Ray rank gets its node's)
            CORRAL_GPU_IDS=",".join(str(g) for g in gpus),
            CORRAL_GPU_TYPES=",".join(s.gpu_type for s in slots),
            CORRAL_VIRTUAL_GPUS="1" if all(s.device is None for s in slots) else "0",
            CORRAL_API_URL=self.loop.config.url,
            CORRAL_JOB_TOKEN=token,
            CORRAL_HEARTBEAT_INTERVAL=str(self.loop.config.heartbeat_interval),
            CORRAL_LEASE_SECONDS=str(self.loop.config.heartbeat_timeout),
        )
        env.update(slurm_env(row, spec, number, gpus, base))
        if gpus:  # (a Ray rank is told its own node)
            env["SLURMD_NODENAME"] = self.loop.slots[gpus[0]].node
        elif (node := self._cpu_node()) is not None:  # a CPU-only job: this host's
            env["SLURMD_NODENAME"] = node
        if spec.total_steps is not None:
            env["CORRAL_TOTAL_STEPS"] = str(spec.total_steps)
        if spec.array_index is not None:
            env["CORRAL_ARRAY_INDEX"] = str(spec.array_index)
            env["CORRAL_ARRAY_JOB_ID"] = str(spec.array_job or row.id)
        if row.phase == "prerun":
            env["CORRAL_PRERUN_STEPS"] = str(self._prerun_steps(spec))
        if row.parent is not None:  # a task of a round: the job's folder is shared
            env["CORRAL_ROUND_DIR"] = str(self.loop.config.job_root / str(row.parent))
        rec = self.loop.book.peek(row.id)
        if rec.batch_size is not None:  # its policy tunes its batch size
            env["CORRAL_BATCH_SIZE"] = str(rec.batch_size)
        if rec.low_priority is not None:  # an opportunistic job: leaves GPU memory to owners
            env["CORRAL_GPU_MEMORY_FRACTION"] = f"{rec.low_priority:g}"
        return env

    def _cpu_node(self) -> str | None:
        """The node a CPU-only job runs on: the first usable one (all are this host)."""
        usable = self.loop.usable
        for slot in self.loop.slots:
            if slot.id >= len(usable) or usable[slot.id]:
                return slot.node
        return None

    def _prerun_steps(self, spec: JobSpec) -> int:
        if spec.prerun_steps:
            return spec.prerun_steps
        return self.loop.config.prerun.steps
