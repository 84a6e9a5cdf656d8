"""The launcher's confinement, piece by piece (the end-to-end tests run it whole)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.runtime.execution import launcher
from corral.runtime.execution.launcher import Confinement, parse


def test_options_round_trip_through_the_command_line() -> None:
    conf = Confinement(
        uid=1000,
        gid=1000,
        groups=[1000, 27],
        cpus=[0, 1],
        cpu_quota=2,
        memory=2**30,
        cwd="/home/a",
        output="/home/a/out.txt",
        nice=19,
    )
    parsed = parse(["/attempt", *conf.options(), "--", "python", "-c", "pass"])
    assert parsed is not None
    folder, again, argv = parsed
    assert folder == Path("/attempt") and again == conf and argv == ["python", "-c", "pass"]
    assert parse(["/attempt", "--colour", "blue", "--", "x"]) is None
    assert parse(["/attempt", "--"]) is None


def test_a_cgroup_v2_gets_the_jobs_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a stand-in cgroup2 tree (files, not the kernel's): the attempt's group
    holds memory.max and cpu.max, and the launcher moves itself into it."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(launcher, "CGROUP_ROOT", tmp_path)
    folder = tmp_path / "jobs" / "7" / "attempt-1"
    group = launcher._cgroup(folder, Confinement(cpu_quota=2, memory=512 * 2**20))
    assert group is not None and group.parent == tmp_path / "corral"
    assert (group / "memory.max").read_text() == str(512 * 2**20)
    assert (group / "cpu.max").read_text() == "200000 100000"
    assert (group / "cgroup.procs").read_text() == str(os.getpid())
    assert "+memory" in (tmp_path / "corral" / "cgroup.subtree_control").read_text()


def test_without_delegated_cgroups_the_job_gets_rlimits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launcher, "CGROUP_ROOT", tmp_path / "absent")
    assert launcher._cgroup(tmp_path / "a", Confinement(memory=2**30)) is None
    assert launcher._cgroup(tmp_path / "a", Confinement()) is None  # nothing to limit
