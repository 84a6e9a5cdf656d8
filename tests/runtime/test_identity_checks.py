"""Checks the service makes for a job's Unix user, as that user: whether a workdir
can be entered (one answer for missing and not theirs), whether they can run the
service's Python at all (refused at start, clearly, when not)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.errors import CorralError
from corral.runtime.execution import identity
from corral.runtime.execution.identity import RunAs, cannot_run_python, lookup, usable_folder

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd: checks as another Unix user",
)


@pytest.fixture
def carol() -> Iterator[RunAs]:
    name = f"corral-c{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield lookup(name)
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def test_a_folder_is_checked_as_the_jobs_user(carol: RunAs) -> None:
    """Root can enter another user's private folder; the check answers as carol would,
    and the same for a folder inside it that exists and one that does not."""
    private = Path(tempfile.mkdtemp(prefix="corral-private-"))
    try:
        (private / "project").mkdir()
        private.chmod(0o700)  # root's, closed to others
        assert usable_folder(str(private / "project"), None)  # root: yes
        assert not usable_folder(str(private / "project"), carol)
        assert not usable_folder(str(private / "missing"), carol)
        assert usable_folder(carol.home, carol)
        assert usable_folder("/tmp", carol)
    finally:
        shutil.rmtree(private)


def test_a_user_who_cannot_run_the_services_python_is_refused_at_start(
    carol: RunAs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, enterable_dir: Path
) -> None:
    hidden = Path(tempfile.mkdtemp(prefix="corral-venv-"))  # as a venv under /root
    try:
        hidden.chmod(0o700)
        (hidden / "python").symlink_to(sys.executable)
        monkeypatch.setattr(identity.sys, "executable", str(hidden / "python"))
        why = cannot_run_python(carol)
        assert why is not None and "Permission denied" in why
        from corral.runtime.jobspec.config import UserConfig
        from tests.runtime.harness import TOKENS, make_config

        jobs = enterable_dir
        config = make_config(
            tmp_path / "state",
            users=[UserConfig(name="alice", token=TOKENS["alice"], unix_user=carol.name)],
            jobs_dir=jobs,
        )
        with pytest.raises(CorralError, match="cannot run this service's Python"):
            identity.check_identities(config)
        config.require_reachable_python = False  # started anyway: the user is marked
        assert identity.check_identities(config)["alice"].runs_python is False
    finally:
        shutil.rmtree(hidden)
