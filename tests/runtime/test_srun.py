"""``srun`` in a job's script (corral.runtime.execution.srun): the line read as
Slurm reads it, each task's variables, the tasks run and waited for, the exit
status Slurm gives, and what cannot be honoured refused by name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.runtime.execution.executor import SLURM_BIN, slurm_bin
from corral.runtime.execution.srun import Refused, Step, read_line, task_env

ONE_NODE = {"SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_NTASKS_PER_NODE": "1"}


def job_env(**extra: str) -> dict[str, str]:
    return {**ONE_NODE, **extra}


def test_the_line_is_read_as_slurm_reads_it() -> None:
    env = job_env(SLURM_NTASKS_PER_NODE="4")
    assert read_line(["python", "train.py", "-n", "2"], env) == Step(
        ["python", "train.py", "-n", "2"], per_node=4
    )  # (the job's own tasks per node; options after the command are the command's)
    assert read_line(["-n4", "-l", "x"], env) == Step(["x"], per_node=4, label=True)
    assert read_line(["--ntasks=2", "-K", "--", "x"], env).per_node == 2
    assert read_line(["--kill-on-bad-exit=1", "x"], env).kill
    assert read_line(["--ntasks-per-node", "3", "-u", "--cpu-bind=cores", "x"], env).per_node == 3
    two = {"SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_NTASKS_PER_NODE": "1"}
    assert read_line(["-N", "2", "-n", "8", "x"], two).per_node == 4  # (8 over 2 nodes)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--colour", "x"], "does not take --colour"),
        (["-N", "2", "x"], "each of the job's 1 node"),
        (["-n", "3", "x"], None),  # (fine on one node)
        (["--mpi=pmix", "x"], "without an MPI launcher"),
        (["--export=NONE", "x"], "job's environment"),
        (["-n", "2", "--ntasks-per-node", "3", "x"], "disagree"),
        (["-n", "0", "x"], "at least 1"),
        (["-n"], "needs a value"),
        (["-l"], "no command"),
        (["--gpus-per-task=2", "-n", "2", "x"], "needs 4 GPUs; the job has 2"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(argv: list[str], says: str | None) -> None:
    env = job_env(SLURM_JOB_GPUS="3,5")
    if says is None:
        assert read_line(argv, env).per_node == 3
        return
    with pytest.raises(Refused, match=says):
        read_line(argv, env)
    two = {**env, "SLURM_NNODES": "2"}
    with pytest.raises(Refused, match="does not split evenly"):
        read_line(["-n", "3", "x"], two)


def test_each_task_gets_its_rank_and_its_share_of_the_gpus() -> None:
    env = {
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_JOB_GPUS": "4,5,6,7",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    }
    step = read_line(["--gpus-per-task=2", "x"], env)
    first, second = task_env(step, env, 0), task_env(step, env, 1)
    assert (first["SLURM_PROCID"], second["SLURM_PROCID"]) == ("2", "3")  # node 1: ranks 2, 3
    assert (first["SLURM_LOCALID"], second["SLURM_LOCALID"]) == ("0", "1")
    assert first["SLURM_NTASKS"] == "4" and first["SLURM_STEP_NUM_NODES"] == "2"
    assert (first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]) == ("0,1", "2,3")
    assert (first["SLURM_JOB_GPUS"], second["SLURM_JOB_GPUS"]) == ("4,5", "6,7")
    shared = task_env(read_line(["x"], env), env, 1)
    assert shared["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"  # without --gpus-per-task: all, as Slurm


def srun(*argv: str, env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """The shim a job's PATH finds, run as a job's script runs it."""
    assert slurm_bin() == [str(SLURM_BIN)]
    full = {
        **os.environ,
        **env,
        "CORRAL_PYTHON": sys.executable,
        "PATH": os.pathsep.join([str(SLURM_BIN), os.environ["PATH"]]),
    }
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        ["srun", *argv], env=full, capture_output=True, text=True, timeout=60, **kwargs
    )


def test_the_tasks_run_and_srun_exits_with_the_highest_status() -> None:
    env = job_env(SLURM_NTASKS_PER_NODE="3")
    done = srun("-l", "sh", "-c", 'echo "$SLURM_PROCID of $SLURM_NTASKS"', env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["0: 0 of 3", "1: 1 of 3", "2: 2 of 3"]
    failed = srun("sh", "-c", "exit $SLURM_PROCID", env=env)
    assert failed.returncode == 2  # the highest of 0, 1, 2
    signalled = srun("-n", "1", "sh", "-c", "kill -KILL $$", env=env)
    assert signalled.returncode == 128 + signal.SIGKILL
    refused = srun("--colour", "x", env=env)
    assert refused.returncode == 1 and "srun: error:" in refused.stderr
    missing = srun("no-such-program-here", env=env)
    assert missing.returncode == 2 and "no-such-program-here" in missing.stderr


def test_kill_on_bad_exit_stops_the_other_tasks() -> None:
    env = job_env(SLURM_NTASKS_PER_NODE="2")
    began = time.monotonic()
    done = srun("-K", "sh", "-c", '[ "$SLURM_PROCID" = 0 ] && exit 4; sleep 30', env=env)
    assert done.returncode == 4 and time.monotonic() - began < 20


def test_a_stop_sent_to_the_jobs_process_group_reaches_the_tasks_and_srun_waits_for_them(
    tmp_path: Path,
) -> None:
    """As the service stops a job: SIGTERM to the attempt's process group. srun does
    not die first and leave its tasks: it waits for their ends (here, a task that
    saves its work and exits 75, the checkpointed exit) and gives their status."""
    saved = tmp_path / "saved"
    env = {
        **os.environ,
        **job_env(SLURM_NTASKS_PER_NODE="2"),
        "CORRAL_PYTHON": sys.executable,
        "PATH": os.pathsep.join([str(SLURM_BIN), os.environ["PATH"]]),
    }
    task = (
        f'trap "touch {saved}.$SLURM_PROCID; exit 75" TERM; '
        f"touch {tmp_path}/up.$SLURM_PROCID; sleep 30 & wait"
    )
    proc = subprocess.Popen(["srun", "sh", "-c", task], env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"up.{k}").exists() for k in (0, 1)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(20) == 75
    assert (tmp_path / "saved.0").exists() and (tmp_path / "saved.1").exists()


def test_tasks_already_started_are_stopped_when_a_later_one_cannot_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second task cannot start (the user's process limit, say): the first is
    stopped with everything it started, so nothing outlives the srun line."""
    from corral.runtime.execution import srun as srun_module

    real = subprocess.Popen
    started: list[subprocess.Popen[bytes]] = []

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        if started:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        started.append(real(*args, **kwargs))  # type: ignore[call-overload]
        return started[0]

    monkeypatch.setattr(srun_module.subprocess, "Popen", popen)
    step = read_line(["sleep", "30"], job_env(SLURM_NTASKS_PER_NODE="2"))
    began = time.monotonic()
    assert srun_module.run(step, job_env(SLURM_NTASKS_PER_NODE="2")) == 1
    assert started[0].poll() is not None and time.monotonic() - began < 20
