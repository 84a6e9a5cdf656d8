"""A private one-node Slurm, for running corral beside Slurm itself on one machine
(the side-by-side benchmark, and the test that runs the same batch scripts under
both).

Nothing is installed here: where Slurm's programs are present (Debian's
``slurm-wlm``), :func:`private_slurm` sets one up in a folder: slurmctld and
slurmd on loopback ports, no munge (``auth/none``), one node with ``gpu:N`` (the
GPUs are stand-in files: slurmd counts GPUs by file) that runs jobs as this
user, ``cons_tres`` and backfill, no accounting; both daemons stop on leaving.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.runtime.execution.executor import free_port
from corral.testing.service_process import wait_for

SLURM_PROGRAMS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
NODE = "corralside"


def missing_slurm() -> str | None:
    """Why a private Slurm cannot be set up here (None: it can)."""
    absent = [p for p in SLURM_PROGRAMS if shutil.which(p) is None]
    if absent:
        return f"Slurm's programs are not installed ({', '.join(absent)} missing: slurm-wlm)"
    return None


@dataclass
class PrivateSlurm:
    """A running private Slurm: the environment its commands need, and probes."""

    env: dict[str, str]
    user: str
    folder: Path
    seen: set[str] = field(default_factory=set)

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        return done.stdout if done.returncode == 0 else ""

    def live_jobs(self) -> int:
        """How many of the user's jobs (an array's tasks each) have not ended."""
        return len(self.run("squeue", "-h", "-r", "-u", self.user, "-o", "%i").split())

    def finished_jobs(self) -> list[dict[str, Any]]:
        """Every job slurmctld still remembers (it keeps ended ones for MinJobAge):
        name, array index (None outside arrays), state and exit code."""
        out = []
        for line in self.run("scontrol", "show", "job", "-o").splitlines():
            fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
            if "JobId" not in fields:
                continue
            index = fields.get("ArrayTaskId")
            status, _, sig = fields.get("ExitCode", "0:0").partition(":")
            out.append(
                {
                    "id": int(fields["JobId"]),
                    "name": fields.get("JobName", ""),
                    "index": int(index) if index not in (None, "", "N/A") else None,
                    "state": fields.get("JobState", ""),
                    "exit_code": 128 + int(sig) if sig and int(sig) else int(status),
                }
            )
        return out


TUNED = "SchedulerParameters=bf_interval=1,sched_min_interval=0,batch_sched_delay=0"
"""Scheduler parameters a site tunes for short jobs: backfill every second, and no
minimum wait between scheduling passes or before starting batch jobs."""


def config_text(
    folder: Path, user: str, gpus: int, spool: Path, extra: tuple[str, ...] = ()
) -> str:
    """slurm.conf for a one-node Slurm of ``gpus`` GPUs in ``folder``, its spool in
    ``spool``, with ``extra`` lines (such as :data:`TUNED`)."""
    return "\n".join(
        [
            *extra,
            f"ClusterName={NODE}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "AuthType=auth/none",
            "CredType=cred/none",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            f"StateSaveLocation={folder / 'state'}",
            f"SlurmdSpoolDir={spool}",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd.pid'}",
            f"SlurmctldLogFile={folder / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'slurmd.log'}",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "MaxJobCount=100000",
            "MaxArraySize=10001",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            f"NodeName={NODE} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={gpus} "
            f"Gres=gpu:{gpus} State=UNKNOWN",
            f"PartitionName=main Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@contextlib.contextmanager
def private_slurm(
    folder: Path, gpus: int = 8, extra: tuple[str, ...] = ()
) -> Iterator[PrivateSlurm]:
    """A one-node Slurm of our own in ``folder``, on loopback ports, stopped on leaving.
    Its spool is a short folder of its own in the system's temp folder: each batch
    step makes a Unix socket there, and a path over 108 bytes fails every launch
    ("launch failed requeued held"), which a test's deep temp folder can reach."""
    folder.mkdir(parents=True)
    (folder / "state").mkdir()
    spool = Path(tempfile.mkdtemp(prefix="slurm-"))
    user = getpass.getuser()
    conf = folder / "slurm.conf"
    conf.write_text(config_text(folder, user, gpus, spool, extra))
    devices = folder / "dev"  # (stand-ins for /dev/nvidia*: slurmd counts GPUs by file)
    devices.mkdir()
    for k in range(gpus):
        (devices / f"gpu{k}").touch()
    (folder / "gres.conf").write_text(
        f"AutoDetect=off\nNodeName={NODE} Name=gpu File={devices}/gpu[0-{gpus - 1}]\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    quiet: dict[str, Any] = {
        "env": env,
        "cwd": folder,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
    }
    daemons = [  # (their logs go to the files the config names)
        subprocess.Popen(["slurmctld", "-D", "-f", str(conf)], **quiet),
        subprocess.Popen(["slurmd", "-D", "-N", NODE, "-f", str(conf)], **quiet),
    ]
    try:
        slurm = PrivateSlurm(env, user, folder)

        def idle() -> bool:
            return slurm.run("sinfo", "-h", "-o", "%t").strip() in ("idle", "mix")

        wait_for(idle, 60, "the private Slurm's node to be idle")
        yield slurm
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()
        shutil.rmtree(spool, ignore_errors=True)
