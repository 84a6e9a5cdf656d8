"""What a batch job is submitted with beyond its spec, as sbatch keeps it: the
submitting shell's environment (``--export``) and the script's text, stored once
per submission (once for a whole array), the job run from the stored copy, and a
failed batch script not run again unless it asks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from corral.api.app import create_app
from corral.errors import InputError
from corral.runtime.execution.executor import LaunchRequest, job_environment
from corral.runtime.execution.identity import BATCH_SCRIPT, write_job_script
from corral.runtime.jobspec.directives import per_unit_memory, script_fields
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.storage.store import JobInputRow, JobRow
from corral.submit_env import batch_fields, exported
from tests.runtime.harness import auth
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop

SHELL = {
    "MYVAR": "from-shell",
    "PATH": "/opt/conda/bin:/usr/bin",
    "CORRAL_TOKEN": "secret-token",
    "CORRAL_URL": "http://x",
    "SLURM_JOB_ID": "99",
}


def test_export_all_sends_the_shell_but_never_corrals_or_slurms_variables() -> None:
    sent = exported(None, SHELL)
    assert sent == {"MYVAR": "from-shell", "PATH": "/opt/conda/bin:/usr/bin"}
    assert exported("ALL,A=1,MYVAR=mine", SHELL) == {**sent, "A": "1", "MYVAR": "mine"}
    assert exported("NONE", SHELL) is None
    assert exported("none", SHELL) is None
    # a list without ALL: those alone, a named one taken from the shell
    assert exported("A=1,MYVAR,MISSING", SHELL) == {"A": "1", "MYVAR": "from-shell"}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("NONE,A=1", "NONE sends no variable"),
        ("ALL,1A=2", "not a variable"),
        ("ALL,CORRAL_TOKEN=x", "set for each job"),
        (",", "give ALL, NONE"),
    ],
)
def test_a_bad_export_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        exported(text, SHELL)


def test_a_submission_carries_the_shell_and_where_it_ran() -> None:
    fields: dict[str, Any] = {"command": ["true"], "export": "ALL"}
    batch_fields(fields, SHELL, "/home/me/project")
    assert fields["export_env"]["MYVAR"] == "from-shell" and "export" not in fields
    assert "CORRAL_TOKEN" not in fields["export_env"]
    assert fields["submit_dir"] == "/home/me/project"


def test_the_service_drops_corrals_and_slurms_variables_from_an_export() -> None:
    spec = JobSpec(command=["true"], export_env={"A": "1", "CORRAL_JOB_TOKEN": "t", "SLURM_X": "2"})
    assert spec.export_env == {"A": "1"}
    with pytest.raises(ValueError, match="exported environment is"):
        JobSpec(command=["true"], export_env={"BIG": "x" * 300_000})


def test_a_script_names_where_it_was(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give script_path too"):
        JobSpec(command=["bash", "/x.sh"], script="echo hi\n")
    with pytest.raises(ValueError, match="give script_path too"):
        JobSpec(command=["bash", "/x.sh"], script="echo hi\n", script_path="/y.sh")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -J j\necho hi\n")
    fields = script_fields(script)
    assert fields["script"] == script.read_text()
    assert fields["script_path"] == str(script.resolve()) == fields["command"][-1]


def test_memory_per_gpu_and_per_cpu_as_slurm_totals_them(tmp_path: Path) -> None:
    def memory(*lines: str) -> int:
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/bash\n" + "".join(f"{line}\n" for line in lines) + "echo\n")
        fields = per_unit_memory(script_fields(script), str(script))
        return int(JobSpec.model_validate(fields).memory or 0)

    assert memory("#SBATCH --gpus=4", "#SBATCH --mem-per-gpu=10G") == 40 * 1024
    assert memory("#SBATCH -c 8", "#SBATCH --mem-per-cpu=2G") == 16 * 1024
    assert memory("#SBATCH --mem-per-cpu=512M") == 512
    with pytest.raises(InputError, match=r"job.sh:3: field '--mem-per-gpu': give one of --mem"):
        memory("#SBATCH --mem=4G", "#SBATCH --mem-per-gpu=1G")


@pytest.fixture
def loop(tmp_path: Path) -> Any:
    made = virtual_loop(tmp_path, v100s=4)
    yield made
    made.close()


def submit(loop: VirtualLoop, **spec: Any) -> dict[str, Any]:
    api = TestClient(create_app(loop.config, loop.store))
    answer = api.post("/v1/jobs", json={"gpus": 1, **spec}, headers=auth("alice"))
    assert answer.status_code == 201, answer.text
    out: dict[str, Any] = answer.json()
    return out


def started(loop: VirtualLoop) -> dict[int, LaunchRequest]:
    return {p.job: p.request for p in loop.executor.processes.values()}


def test_an_array_stores_its_script_and_environment_once_and_each_task_runs_them(
    loop: VirtualLoop, tmp_path: Path
) -> None:
    path = str(tmp_path / "gone.sh")  # (never written: the stored copy runs)
    text = "#!/bin/bash\necho as submitted\n"
    view = submit(
        loop,
        command=["/bin/bash", path, "arg"],
        script=text,
        script_path=path,
        export_env={"MYVAR": "from-shell", "PATH": "/opt/conda/bin"},
        submit_dir="/home/me/project",
        array="0-3",
    )
    tasks = view["array_tasks"]
    with loop.store.session() as s:
        assert s.scalar(select(func.count()).select_from(JobInputRow)) == 1
        stored = s.get(JobRow, tasks[2])
        assert stored is not None
        assert stored.spec["script"] is None and stored.spec["export_env"] is None
        assert stored.spec["max_retries"] == 0  # a batch script is not run again
    loop.run(1)
    runs = started(loop)
    assert sorted(runs) == tasks
    for job, request in runs.items():
        copy = loop.config.job_root / str(job) / BATCH_SCRIPT
        assert request.argv == ["/bin/bash", str(copy), "arg"]
        assert copy.read_text() == text and copy.stat().st_mode & 0o777 == 0o700
        assert request.base_env == {"MYVAR": "from-shell", "PATH": "/opt/conda/bin"}
        assert request.env["SLURM_SUBMIT_DIR"] == "/home/me/project"
        env = job_environment(request)
        assert env["MYVAR"] == "from-shell"
        # the user's PATH first, corral's srun before it, the service's Python after it
        parts = env["PATH"].split(os.pathsep)
        assert parts[-2:] == ["/opt/conda/bin", parts[-1]] and parts[-1] != "/opt/conda/bin"
    api = TestClient(create_app(loop.config, loop.store))
    assert api.get(f"/v1/jobs/{tasks[3]}/script", headers=auth("alice")).text == text
    assert api.get(f"/v1/jobs/{tasks[3]}/script", headers=auth("bob")).status_code == 403


def test_a_job_without_a_script_has_none_to_show_and_keeps_its_retries(loop: VirtualLoop) -> None:
    view = submit(loop, command=["sleep", "5"])
    api = TestClient(create_app(loop.config, loop.store))
    answer = api.get(f"/v1/jobs/{view['id']}/script", headers=auth("alice"))
    assert answer.status_code == 404 and "not submitted as a batch script" in answer.text
    assert loop.row(view["id"]).spec["max_retries"] == 2
    loop.run(1)
    assert started(loop)[view["id"]].base_env is None  # the service's clean base


def test_a_script_that_asks_for_retries_keeps_them(loop: VirtualLoop) -> None:
    view = submit(
        loop, command=["sh", "/x.sh"], script="exit 1\n", script_path="/x.sh", max_retries=3
    )
    assert loop.row(view["id"]).spec["max_retries"] == 3


def test_a_site_may_keep_the_submitting_environment_out(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path, export_environment=False)
    try:
        submit(loop, command=["true"], export_env={"MYVAR": "x"})
        loop.run(1)
        (request,) = started(loop).values()
        assert request.base_env is None and "MYVAR" not in job_environment(request)
    finally:
        loop.close()


def test_the_stored_copy_never_follows_a_link_the_job_left(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep me")
    (folder / BATCH_SCRIPT).symlink_to(target)
    copy = write_job_script(folder, "echo hi\n", None)  # the link is replaced, not followed
    assert target.read_text() == "keep me"
    assert not copy.is_symlink() and copy.read_text() == "echo hi\n"
