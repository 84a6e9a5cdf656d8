"""The store's disk full: the API says so (507, naming the disk) and changes nothing,
running jobs go on, and the service recovers by itself once space returns."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.runtime.harness import Harness, auth, wait_for


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path) -> Path:
    """Take every free byte of the file system at ``where``."""
    filler = where / "filler"
    with contextlib.suppress(OSError), open(filler, "wb") as out:
        while True:
            out.write(b"\0" * 65536)
            out.flush()
    return filler


def test_a_full_store_disk_answers_507_and_recovers(small_disk: Path, tmp_path: Path) -> None:
    service = Harness(
        small_disk / "state", policy="fifo", policy_options={}, jobs_dir=tmp_path / "jobs"
    )
    try:
        running = service.submit(command=["sleep", "20"])
        service.wait_state(running["id"], {"RUNNING"})
        filler = fill(small_disk)
        answers = []
        for _ in range(50):  # the write-ahead log may take a few more before it fails
            answer = service.client.post(
                "/v1/jobs", json={"command": ["true"]}, headers=auth("bob")
            )
            answers.append(answer.status_code)
            if answer.status_code == 507:
                break
        assert answers[-1] == 507, answers
        detail = answer.json()["detail"]
        assert "out of disk space" in detail and str(small_disk / "state") in detail
        assert 500 not in answers
        assert service.thread.is_alive()
        assert service.job(running["id"])["status"] == "RUNNING"  # it goes on
        filler.unlink()
        later = wait_for(
            lambda: (
                (
                    r := service.client.post(
                        "/v1/jobs", json={"command": ["true"]}, headers=auth("bob")
                    )
                ).status_code
                == 201
                and r.json()
            ),
            30,
            "a submission to succeed once space returned",
        )
        assert service.wait_state(later["id"], {"SUCCEEDED"}, 60)["status"] == "SUCCEEDED"
    finally:
        service.close()
