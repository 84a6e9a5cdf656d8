"""Batch scripts written for Slurm mean here what they mean under Slurm: sbatch's
time formats (a bare number is minutes), and the ``SLURM_*`` variables a script
reads (job and array ids, name, submit directory, GPU and task counts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import InputError
from corral.runtime.jobspec.directives import script_fields
from corral.runtime.jobspec.specs import JobSpec
from corral.timespan import parse_seconds, slurm_seconds
from tests.runtime.virtual_loop import virtual_loop


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1", 60.0),  # minutes, as sbatch reads a bare number
        ("90", 5400.0),
        ("2:30", 180.0),  # minutes:seconds, rounded up to whole minutes as Slurm keeps them
        ("0:05", 60.0),
        ("1:00:00", 3600.0),
        ("1-0", 86400.0),  # days-hours
        ("1-12", 129600.0),
        ("2-01:30", 178200.0),  # days-hours:minutes
        ("1-00:00:01", 86460.0),
        ("0", None),  # Slurm: no time limit
        ("0:00:00", None),
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_slurms_time_formats(text: str, seconds: float | None) -> None:
    assert slurm_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "1-2-3", "-5", "1.5"])
def test_what_is_not_a_slurm_time_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        slurm_seconds(text)


def test_corrals_own_durations_also_take_slurms_day_form() -> None:
    assert parse_seconds("1-12:00:00") == 129600.0
    assert parse_seconds("90") == 90.0  # corral's own options: a bare number is seconds


def test_an_sbatch_time_means_what_sbatch_means(tmp_path: Path) -> None:
    def wall(line: str) -> float | None:
        script = tmp_path / "job.sh"
        script.write_text(f"#!/bin/bash\n#SBATCH --gpus 1\n{line}\nsrun python train.py\n")
        return JobSpec.model_validate(script_fields(script)).wall_time

    assert wall("#SBATCH --time=1") == 60.0
    assert wall("#SBATCH -t 1-00:00:00") == 86400.0
    assert wall("#SBATCH --time=30:00") == 1800.0
    assert wall("#SBATCH --time=UNLIMITED") is None
    assert wall("#CORRAL --time 1-12:00:00") == 129600.0


@pytest.mark.parametrize(
    ("line", "option"),
    [
        ("#SBATCH --time=soon", "--time"),
        ("#CORRAL --time later", "--time"),
        ("#SBATCH --mem=lots", "--mem"),
        ("#SBATCH --begin=tomorrow", "--begin"),
    ],
)
def test_a_bad_time_or_amount_is_refused_with_its_file_line_and_option(
    tmp_path: Path, line: str, option: str
) -> None:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --gpus 1\n{line}\necho\n")
    with pytest.raises(InputError, match=rf"job.sh:3: field '{option}'"):
        script_fields(script)


def test_every_job_gets_the_variables_a_slurm_script_reads(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path, v100s=4)
    workdir = str(tmp_path)
    plain = loop.queue(name="bert", command=["sleep", "50"], gpus=2, cpus=3, workdir=workdir)
    task = loop.queue(
        "bob", name="sweep", command=["sleep", "50"], gpus=1, array_index=7, array_job=41
    )
    loop.run(1)
    env = {p.job: p.request.env for p in loop.executor.processes.values()}
    mine = env[plain]
    assert mine["SLURM_JOB_ID"] == mine["SLURM_JOBID"] == str(plain)
    assert (mine["SLURM_JOB_NAME"], mine["SLURM_JOB_USER"]) == ("bert", "alice")
    assert mine["SLURM_SUBMIT_DIR"] == workdir
    assert (mine["SLURM_GPUS_ON_NODE"], mine["SLURM_CPUS_PER_TASK"]) == ("2", "3")
    assert len(mine["SLURM_JOB_GPUS"].split(",")) == 2
    assert (mine["SLURM_NTASKS"], mine["SLURM_PROCID"], mine["SLURM_NNODES"]) == ("1", "0", "1")
    assert mine["SLURM_RESTART_COUNT"] == "0" and "SLURM_ARRAY_TASK_ID" not in mine
    theirs = env[task]
    assert (theirs["SLURM_ARRAY_JOB_ID"], theirs["SLURM_ARRAY_TASK_ID"]) == ("41", "7")
    loop.close()
