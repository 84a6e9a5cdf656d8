"""Batch scripts written for Slurm (``tests/fixtures/sbatch``: an array, one process
per GPU started by ``srun``, a failing step, Slurm's time formats, a dependency,
the submitting shell's environment with its PATH and exported functions under each
``--export``, a script edited or deleted after submission, a working directory
with output relative to it, a failure that is not run again, a limit in whole
minutes, memory per GPU, a CPU-only step) submitted as their authors would (``corral submit
script.sh`` from the folder they are in), each ending as under Slurm, with the
same exit code and the same output files. Where Slurm's own programs are
installed, the same scripts run under a private one-node Slurm too (``sbatch``),
and both give the same results."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.testing.service_process import ServiceProcess, wait_for
from corral.testing.slurm import missing_slurm, private_slurm
from tests.runtime.harness import TERMINAL, TOKENS

SCRIPTS = Path(__file__).parents[1] / "fixtures" / "sbatch"


@dataclass(frozen=True)
class Ended:
    """How a job ended, in the words both schedulers share."""

    ok: bool
    exit_code: int


@dataclass
class Results:
    """What a scheduler made of the folder's scripts: each job's end, by name (an
    array's tasks as NAME_INDEX), the ids outputs name, and the output files."""

    ended: dict[str, Ended]
    ids: dict[str, int]
    outputs: dict[str, str]


CLEAN_ENDS = ("env", "export-none", "export-list", "module", "edited", "deleted")
CLEAN_ENDS += ("chdir", "minute", "nolimit", "mem", "cpu-only")


def expected(ids: dict[str, int]) -> Results:
    array, first = ids["sweep"], ids["first"]
    return Results(
        ended={
            **{f"sweep_{k}": Ended(True, 0) for k in range(3)},
            "per-gpu": Ended(True, 0),
            "fails": Ended(False, 3),
            "first": Ended(True, 0),
            "second": Ended(True, 0),
            **{name: Ended(True, 0) for name in CLEAN_ENDS},
            "once": Ended(False, 1),
        },
        ids=ids,
        outputs={
            **{
                f"sweep-{array}_{k}.out": f"task {k} of array {array}, job sweep\n"
                for k in range(3)
            },
            "per-gpu.out": "0: rank 0 of 2, local 0\n1: rank 1 of 2, local 1\ndone with 2 tasks\n",
            "fails.out": "srun: error: NODE: task 0: Exited with exit code 2\n"
            "srun: error: NODE: task 1: Exited with exit code 3\ntask 0\ntask 1\n",
            "first.out": "first wrote made.txt\n",
            "second.out": f"made by job {first}\n",
            "made.txt": f"made by job {first}\n",
            "env.out": "MYVAR=from-shell\nmytool ran\n",
            "export-none.out": "MYVAR=unset\n",
            "export-list.out": "ONLY=1 MYVAR=from-shell OTHER=unset\n",
            "module.out": "hello from a function\n",
            "edited.out": "as submitted\n",
            "deleted.out": "as submitted, though deleted\n",
            "sub/chdir.out": "in sub, submitted from run\n",
            "once.out": "failing\n",
            "runs.txt": "ran\n",
            "minute.out": "past five seconds\n",
            "nolimit.out": "no limit\n",
            "mem.out": "2 GPUs\n",
            "cpu_only.out": "GPUs on node: 0, visible: none\n",
        },
    )


def sorted_lines(text: str) -> str:
    """Lines in order (tasks of one srun line write in whatever order they run)."""
    return "".join(sorted(text.splitlines(keepends=True)))


def outputs_of(folder: Path) -> dict[str, str]:
    """The run's output files, lines in order, srun's messages naming no node."""
    return {
        str(path.relative_to(folder)): sorted_lines(
            re.sub(r"(?m)^srun: error: [^:]+:", "srun: error: NODE:", path.read_text())
        )
        for path in sorted(folder.rglob("*"))
        if path.suffix in (".out", ".txt")
    }


Submit = Callable[[list[str], dict[str, str]], int]
"""Submit a script as its author does (the words after sbatch, the variables set in
the submitting shell); the job's id."""


def shell(folder: Path) -> dict[str, str]:
    """What a user's shell holds after ``module load`` or ``conda activate``: a
    variable, a program on PATH, an exported function (how ``module`` itself is
    defined), and one more variable that --export lists may leave out."""
    return {
        "MYVAR": "from-shell",
        "OTHER": "other",
        "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "BASH_FUNC_greet%%": "() {  echo hello from a function\n}",
    }


def submit_all(folder: Path, submit: Submit, release: Callable[[int], None]) -> dict[str, int]:
    """Each script as its author submits it."""
    ids = {"sweep": submit(["array.sh"], {}), "per-gpu": submit(["per_gpu.sh"], {})}
    ids["fails"] = submit(["fails.sh"], {})
    ids["first"] = submit(["first.sh"], {})
    ids["second"] = submit([f"--dependency=afterok:{ids['first']}", "second.sh"], {})
    for name in ("env", "export_none", "export_list", "module"):
        ids[name] = submit([f"{name}.sh"], shell(folder))
    for name in ("chdir", "once", "minute", "nolimit", "mem", "cpu_only"):
        ids[name] = submit([f"{name}.sh"], {})
    ids["edited"], ids["deleted"] = submit(["edited.sh"], {}), submit(["deleted.sh"], {})
    (folder / "edited.sh").write_text("#!/bin/bash\necho 'the edited text'\n")
    (folder / "deleted.sh").unlink()
    release(ids["edited"])
    release(ids["deleted"])
    return ids


def copy_scripts(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for script in SCRIPTS.glob("*.sh"):
        shutil.copy(script, folder / script.name)
    (folder / "sub").mkdir()
    tool = folder / "bin" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho mytool ran\n")
    tool.chmod(0o755)
    return folder


def under_corral(folder: Path, state: Path) -> Results:
    service = ServiceProcess(state, "fifo", users=TOKENS, stop_grace=5)
    service.start()
    try:
        env = {**os.environ, "CORRAL_URL": service.url, "CORRAL_TOKEN": TOKENS["alice"]}

        jobs: list[int] = []

        def submit(args: list[str], extra: dict[str, str]) -> int:
            done = subprocess.run(
                [sys.executable, "-m", "corral.cli", "submit", "--json", *args],
                cwd=folder, capture_output=True, text=True, env={**env, **extra}, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            view = json.loads(done.stdout)
            jobs.extend(view.get("array_tasks") or [view["id"]])
            return int(view["id"])

        def release(job: int) -> None:
            subprocess.run(
                [sys.executable, "-m", "corral.cli", "release", str(job)],
                cwd=folder, capture_output=True, env=env, timeout=60, check=True,
            )  # fmt: skip

        ids = submit_all(folder, submit, release)
        wait_for(
            lambda: all(service.admin.job(j)["status"] in TERMINAL for j in jobs),
            300,  # (a loaded host)
            "the scripts' jobs to end",
        )
        ended = {}
        for job in (service.admin.job(j) for j in jobs):
            index = job["array_index"]
            name = job["name"] + (f"_{index}" if index is not None else "")
            ended[name] = Ended(job["status"] == "SUCCEEDED", int(job["exit_code"] or 0))
        return Results(ended, ids, outputs_of(folder))
    finally:
        service.close()


def under_slurm(folder: Path, state: Path) -> Results:
    with private_slurm(state) as slurm:

        def submit(args: list[str], extra: dict[str, str]) -> int:
            done = subprocess.run(
                ["sbatch", "--parsable", *args], cwd=folder, capture_output=True, text=True,
                env={**slurm.env, **extra}, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return int(done.stdout.strip().split(";")[0])

        def release(job: int) -> None:
            slurm.run("scontrol", "release", str(job))

        ids = submit_all(folder, submit, release)
        try:
            wait_for(lambda: slurm.live_jobs() == 0, 300, "Slurm's jobs to end")  # (loaded host)
        except TimeoutError as exc:  # what each job still waits for, readable in a CI log
            left = slurm.run("squeue", "-h", "-r", "-u", slurm.user, "-o", "%i %j %T %R")
            raise TimeoutError(f"{exc}; still in Slurm's queue:\n{left}") from None
        ended = {}
        for record in slurm.finished_jobs():
            name = record["name"] + (f"_{record['index']}" if record["index"] is not None else "")
            ended[name] = Ended(record["state"] == "COMPLETED", record["exit_code"])
        return Results(ended, ids, outputs_of(folder))


def check(results: Results) -> None:
    want = expected(results.ids)
    assert results.ended == want.ended
    assert results.outputs == {name: sorted_lines(text) for name, text in want.outputs.items()}


@pytest.fixture(scope="module")
def corral_run(tmp_path_factory: pytest.TempPathFactory) -> Results:
    folder = tmp_path_factory.mktemp("sbatch")
    return under_corral(copy_scripts(folder / "run"), folder / "corral")


def test_slurm_scripts_end_under_corral_as_slurm_ends_them(corral_run: Results) -> None:
    check(corral_run)


def test_the_same_scripts_under_a_private_slurm_end_the_same(
    corral_run: Results, tmp_path: Path
) -> None:
    why = missing_slurm()
    if why is not None:
        pytest.skip(why)
    theirs = under_slurm(copy_scripts(tmp_path / "run"), tmp_path / "slurm")
    check(theirs)
    assert theirs.ended == corral_run.ended
