"""Every attempt gets a cgroup v2 of its own where the service may make one (not only
when it asks for CPUs or memory), and a job's end kills it whole with cgroup.kill.
Against a stand-in cgroup2 tree (files, not the kernel's): the host here runs v1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.runtime.execution import launcher
from corral.runtime.execution.launcher import Confinement


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    (tmp_path / "cgroup.procs").write_text("")
    monkeypatch.setattr(launcher, "CGROUP_ROOT", tmp_path)
    return tmp_path


def test_an_attempt_without_limits_gets_a_cgroup_too(tree: Path) -> None:
    group = launcher._cgroup(tree / "jobs" / "7" / "attempt-1", Confinement())
    assert group is not None and group.parent == tree / "corral"
    assert (group / "cgroup.procs").read_text() == str(os.getpid())
    assert not (group / "memory.max").exists() and not (group / "cpu.max").exists()


def test_a_jobs_end_kills_its_cgroup_whole(tree: Path) -> None:
    group = launcher._cgroup(tree / "jobs" / "7" / "attempt-1", Confinement())
    assert group is not None
    (group / "cgroup.kill").write_text("")  # as the kernel offers it (5.14+)
    launcher._cgroup_kill(group)
    assert (group / "cgroup.kill").read_text() == "1"
    assert (tree / "cgroup.procs").read_text() == str(os.getpid())  # the launcher left first


def test_limits_without_their_controllers_fall_back_to_rlimits(tree: Path) -> None:
    (tree / "cgroup.controllers").write_text("pids\n")
    assert launcher._cgroup(tree / "a", Confinement(memory=2**30)) is None
    assert launcher._cgroup(tree / "b", Confinement()) is not None
