"""No way from a job to root: a service run as root, two throwaway Unix users, and
jobs that try to steer the root-run parts (launcher, standby worker) through their
environment, their output file and their working directory.

Each attack leaves a mark file in a world-writable folder, named by the uid that
ran the attacker's code; the tests assert that no code of a job ran as uid 0,
that no root-owned file appeared where the job pointed, and that nothing of the
config, the store or the other user's files was read.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.api.client import Client
from corral.runtime.execution.launcher import ENV_FILE, root_environment
from corral.runtime.execution.standby import StandbyPool
from corral.testing.service_process import ServiceProcess
from tests.runtime.harness import TERMINAL, TOKENS, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd: jobs run as other Unix users only under root",
)


@pytest.fixture
def two_users() -> Iterator[tuple[pwd.struct_passwd, pwd.struct_passwd]]:
    """Two fresh Unix accounts with homes, removed afterwards."""
    tag = secrets.token_hex(3)
    names = [f"corral-a{tag}", f"corral-b{tag}"]
    made = []
    try:
        for name in names:
            subprocess.run(
                ["useradd", "--create-home", "--shell", "/bin/sh", name],
                check=True,
                capture_output=True,
            )
            made.append(name)
        yield pwd.getpwnam(names[0]), pwd.getpwnam(names[1])
    finally:
        for name in made:
            subprocess.run(["userdel", "--remove", name], capture_output=True)


@pytest.fixture
def marks() -> Iterator[Path]:
    """A folder every user can write, where attacks leave ``uid-N`` marks."""
    folder = Path(tempfile.mkdtemp(prefix="corral-marks-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def service(
    tmp_path: Path, two_users: tuple[pwd.struct_passwd, pwd.struct_passwd], enterable_dir: Path
) -> Iterator[ServiceProcess]:
    alice, bob = two_users
    jobs = enterable_dir
    made = ServiceProcess(
        tmp_path,
        "fifo",
        users=TOKENS,
        unix_users={"alice": alice.pw_name, "bob": bob.pw_name, "root": alice.pw_name},
        jobs_dir=str(jobs),
        env={"CORRAL_TEST_SECRET": "service-secret-42"},
        retry={"backoff": 0.2, "backoff_max": 1},
        # the test host's Python may live under /root: these jobs run system programs
        require_reachable_python=False,
    )
    made.start()
    made.jobs_dir = jobs  # type: ignore[attr-defined]
    yield made
    made.close()
    shutil.rmtree(jobs, ignore_errors=True)


def as_user(who: pwd.struct_passwd, path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    for p in (path.parent, path):
        os.chown(p, who.pw_uid, who.pw_gid)


def bob_submits(service: ServiceProcess, spec: dict[str, Any]) -> dict[str, Any]:
    with Client(service.url, TOKENS["bob"]) as bob:
        job = bob.submit({"max_retries": 0, **spec})
    wait_for(lambda: service.admin.job(job["id"])["status"] in TERMINAL, 60, "the job")
    return dict(service.admin.job(job["id"]))


def mark_code(marks: Path, what: str, steal: list[Path]) -> str:
    """Python that leaves ``marks/<what>-uid-N`` and tries to copy ``steal`` next to it."""
    return textwrap.dedent(
        f"""
        import os, shutil
        uid = os.getuid()
        open(os.path.join({str(marks)!r}, "{what}-uid-%d" % uid), "w").close()
        for k, path in enumerate({[str(p) for p in steal]!r}):
            try:
                shutil.copy(path, os.path.join({str(marks)!r}, "{what}-stolen-%d" % k))
            except OSError:
                pass
        """
    )


def root_marks(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir() if "uid-0" in p.name or "stolen" in p.name)


def test_python_variables_of_a_job_never_run_code_as_root(
    service: ServiceProcess, two_users: Any, marks: Path, tmp_path: Path
) -> None:
    _, bob = two_users
    evil = Path(bob.pw_dir) / "evil"
    secrets_to_steal = [service.config, tmp_path / "state" / "corral.db"]
    as_user(bob, evil / "sitecustomize.py", mark_code(marks, "site", secrets_to_steal))
    as_user(bob, evil / "usercustomize.py", mark_code(marks, "usersite", secrets_to_steal))
    as_user(bob, evil / "startup.py", mark_code(marks, "startup", secrets_to_steal))
    done = bob_submits(
        service,
        {
            "command": ["sh", "-c", "echo job-ran-as $(id -u)"],
            "env": {
                "PYTHONPATH": str(evil),
                "PYTHONSTARTUP": str(evil / "startup.py"),
                "PYTHONINSPECT": "1",
                "PYTHONUSERBASE": str(evil),
                "PYTHONHOME": str(evil),  # would break a Python that read it
                "PYTHONWARNINGS": "error",
            },
        },
    )
    assert done["status"] == "SUCCEEDED", done  # the launcher ignored every variable
    assert root_marks(marks) == []
    text = service.admin.logs(done["id"], 0, None).text
    assert f"job-ran-as {bob.pw_uid}" in text
    # the job's variables were kept for the job itself
    spec = done["spec"]["env"]
    assert spec["PYTHONPATH"] == str(evil)


def test_a_python_job_gets_its_pythonpath_and_runs_it_as_its_user(
    service: ServiceProcess, two_users: Any, marks: Path
) -> None:
    _, bob = two_users
    evil = Path(bob.pw_dir) / "mods"
    as_user(bob, evil / "sitecustomize.py", mark_code(marks, "site", []))
    done = bob_submits(
        service,
        {"command": ["/usr/bin/env", "python3", "-c", "pass"], "env": {"PYTHONPATH": str(evil)}},
    )
    if shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") is None:
        pytest.skip("no system python3 for the job")
    assert done["status"] == "SUCCEEDED", done
    assert sorted(p.name for p in marks.iterdir()) == [f"site-uid-{bob.pw_uid}"]


def test_ld_preload_of_a_job_reaches_the_job_only(
    service: ServiceProcess, two_users: Any, marks: Path, tmp_path: Path
) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the preloaded library")
    _, bob = two_users
    source = tmp_path / "mark.c"
    source.write_text(
        textwrap.dedent(
            f"""
            #include <stdio.h>
            #include <unistd.h>
            __attribute__((constructor)) static void mark(void) {{
                char path[512];
                snprintf(path, sizeof path, "{marks}/preload-uid-%d", (int)getuid());
                FILE *f = fopen(path, "w");
                if (f) fclose(f);
            }}
            """
        )
    )
    lib = Path(bob.pw_dir) / "mark.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    os.chown(lib, bob.pw_uid, bob.pw_gid)
    done = bob_submits(service, {"command": ["true"], "env": {"LD_PRELOAD": str(lib)}})
    assert done["status"] == "SUCCEEDED", done
    names = sorted(p.name for p in marks.iterdir())
    assert "preload-uid-0" not in names
    assert f"preload-uid-{bob.pw_uid}" in names  # it did reach the job


def test_an_output_link_or_workdir_link_gets_the_users_rights_not_roots(
    service: ServiceProcess, two_users: Any, tmp_path: Path
) -> None:
    alice, bob = two_users
    private = Path(tempfile.mkdtemp(prefix="corral-root-only-"))  # 0700, root's
    target = private / "made-by-output"
    existing = private / "existing"
    existing.write_text("root's own\n")
    existing.chmod(0o600)
    home = Path(bob.pw_dir)
    try:
        (home / "out-new").symlink_to(target)
        (home / "out-old").symlink_to(existing)
        (home / "into-state").symlink_to(tmp_path / "state")
        for link in ("out-new", "out-old", "into-state"):
            os.lchown(home / link, bob.pw_uid, bob.pw_gid)
        for link in ("out-new", "out-old"):
            done = bob_submits(
                service, {"command": ["echo", "overwritten"], "output": str(home / link)}
            )
            assert done["status"] == "FAILED", done
            assert "cannot use output" in service.admin.logs(done["id"], 0, None).text
        assert not target.exists()
        assert existing.read_text() == "root's own\n"
        # the working directory is checked at submission; swapped for a link to the
        # state folder while the job waits, it is entered as bob, who cannot
        (home / "into-state").unlink()
        (home / "into-state").mkdir()
        os.chown(home / "into-state", bob.pw_uid, bob.pw_gid)
        blocker = service.client.submit({"command": ["sleep", "2"], "gpus": 4})
        with Client(service.url, TOKENS["bob"]) as client:
            raced = client.submit(
                {
                    "command": ["sh", "-c", "head -c 20 corral.db"],
                    "workdir": str(home / "into-state"),
                    "max_retries": 0,
                }
            )
        assert service.admin.job(blocker["id"])["status"] in ("PENDING", "STARTING", "RUNNING")
        assert service.admin.job(raced["id"])["status"] == "PENDING"
        (home / "into-state").rmdir()
        (home / "into-state").symlink_to(tmp_path / "state")
        os.lchown(home / "into-state", bob.pw_uid, bob.pw_gid)
        wait_for(lambda: service.admin.job(raced["id"])["status"] in TERMINAL, 60, "the job")
        done = service.admin.job(raced["id"])
        assert done["status"] == "FAILED", done
        assert "cannot use working directory" in service.admin.logs(done["id"], 0, None).text
        # alice's job folder and files stay hers
        alice_job = service.client.submit({"command": ["sh", "-c", "echo mine > secret.txt"]})
        wait_for(
            lambda: service.admin.job(alice_job["id"])["status"] in TERMINAL, 60, "alice's job"
        )
        secret = service.jobs_dir / str(alice_job["id"]) / "secret.txt"  # type: ignore[attr-defined]
        assert secret.read_text() == "mine\n"
        probe = (
            'for f in "$@"; do cat "$f" >/dev/null 2>&1 && echo READ "$f" || echo DENIED "$f"; done'
        )
        done = bob_submits(
            service, {"command": ["sh", "-c", probe, "probe", str(service.config), str(secret)]}
        )
        text = service.admin.logs(done["id"], 0, None).text
        assert "READ" not in text and text.count("DENIED") == 2
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert alice.pw_uid != bob.pw_uid


def test_the_launcher_and_standby_workers_run_with_a_fixed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a root-run helper sees: no variable of the job or of the service beyond
    the locale and libraries, Python in isolated mode, and the job's variables in a
    private file that is gone once the job has started."""
    monkeypatch.setenv("CORRAL_TEST_SECRET", "service-secret-42")
    monkeypatch.setenv("PYTHONPATH", "/nonexistent/evil")
    env = root_environment()
    assert "CORRAL_TEST_SECRET" not in env and "PYTHONPATH" not in env
    pool = StandbyPool(1, tmp_path / "workers.log", preload=[])
    try:
        worker = pool.idle[0].process
        # on a loaded machine the worker may still be between fork and exec (its
        # command line empty or the parent's): wait for the interpreter's own
        cmdline = wait_for(
            lambda: (
                (argv := Path(f"/proc/{worker.pid}/cmdline").read_bytes().split(b"\0"))[0]
                == sys.executable.encode()
                and argv
            ),
            30,
            "the standby worker to exec",
        )
        seen = Path(f"/proc/{worker.pid}/environ").read_bytes().split(b"\0")
        assert not any(v.startswith((b"CORRAL_TEST_SECRET", b"PYTHONPATH")) for v in seen)
        assert cmdline[1] == b"-I"
    finally:
        pool.close()
    from corral.runtime.execution.executor import start_launcher
    from corral.runtime.execution.launcher import Confinement

    folder = tmp_path / "attempt"
    folder.mkdir()
    child = start_launcher(
        folder,
        Confinement(),
        [sys.executable, "-c", "import os; print(os.environ.get('JOBVAR'))"],
        {"JOBVAR": "job-only", "PATH": os.environ["PATH"]},
        folder / "log.txt",
    )
    assert child.wait(30) == 0
    assert (folder / "log.txt").read_text().strip() == "job-only"
    assert not (folder / ENV_FILE).exists()
    assert (folder / "exit.json").exists()


def test_a_jobs_command_and_paths_are_not_on_its_launchers_command_line(tmp_path: Path) -> None:
    """Any user of the host reads every process's arguments (``ps``): the launcher,
    which runs as root, carries the attempt's folder and limits there, never the
    job's program, arguments (a ``--password=...``), working directory or output
    file; those reach it in its private file and the job runs them."""
    from corral.runtime.execution.executor import start_launcher
    from corral.runtime.execution.launcher import Confinement

    folder, workdir = tmp_path / "attempt", tmp_path / "private-project"
    folder.mkdir()
    workdir.mkdir()
    out = workdir / "result.txt"
    program = "import os, sys, time; print(os.getcwd(), sys.argv[1]); time.sleep(3)"
    child = start_launcher(
        folder,
        Confinement(cwd=str(workdir), output=str(out)),
        [sys.executable, "-c", program, "--password=hunter2"],
        {"PATH": os.environ["PATH"]},
        folder / "log.txt",
    )
    try:
        seen = wait_for(
            lambda: (
                (cmd := Path(f"/proc/{child.pid}/cmdline").read_bytes())
                and b"launcher" in cmd
                and cmd
            ),
            30,
            "the launcher to start",
        )
        assert b"hunter2" not in seen and str(workdir).encode() not in seen, seen
        assert str(folder).encode() in seen
    finally:
        assert child.wait(30) == 0
    assert out.read_text().split() == [str(workdir), "--password=hunter2"]
