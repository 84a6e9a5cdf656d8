"""The launcher's confinement, piece by piece (the end-to-end tests run it whole)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.runtime.execution import launcher
from corral.runtime.execution.executor import process_start
from corral.runtime.execution.launcher import Confinement, parse
from tests.runtime.harness import auth
from tests.runtime.refork_chain import count


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
    assert parse(["/attempt", "--"]) == (Path("/attempt"), Confinement(), [])  # (in its file)
    assert parse(["--", "x"]) is None and parse(["/attempt", "--uid", "--", "x"]) is None


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


def test_an_attempt_gets_the_default_process_limit_where_the_controller_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """job_max_processes becomes the attempt's pids.max where cgroups v2 offer the pids
    controller; where they do not, the job still runs (a default, not an ask)."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(launcher, "CGROUP_ROOT", tmp_path)
    group = launcher._cgroup(tmp_path / "jobs" / "7" / "attempt-1", Confinement(pids=4096))
    assert group is not None and (group / "pids.max").read_text() == "4096"
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    other = launcher._cgroup(tmp_path / "jobs" / "8" / "attempt-1", Confinement(pids=4096))
    assert other is not None and not (other / "pids.max").exists()
    assert parse(["/a", *Confinement(pids=9).options(), "--", "x"]) == (
        Path("/a"),
        Confinement(pids=9),
        ["x"],
    )


def test_without_delegated_cgroups_the_job_gets_rlimits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launcher, "CGROUP_ROOT", tmp_path / "absent")
    assert launcher._cgroup(tmp_path / "a", Confinement(memory=2**30)) is None
    assert launcher._cgroup(tmp_path / "a", Confinement()) is None  # nothing to limit


CHAIN = Path(__file__).with_name("refork_chain.py")


def test_a_job_that_reforks_outside_its_session_ends_with_all_its_processes(
    tmp_path: Path,
) -> None:
    """Workers that call setsid and fork two more whenever their parent dies: the
    launcher's exit record is written only once none of them is left."""
    marker = f"corral-chain-{os.getpid()}-{tmp_path.name}"
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    argv = [sys.executable, "-m", "corral.runtime.execution.launcher", str(folder)]
    try:
        done = subprocess.run(
            [*argv, "--", sys.executable, str(CHAIN), marker],
            start_new_session=True,
            timeout=120,
            check=False,
        )
        record = json.loads((folder / "exit.json").read_text())
        assert done.returncode == 0 and record["exit_code"] == 0
        assert "killed" in (record["detail"] or "")
        assert count(marker) == 0  # nothing of the job outlived its exit record
    finally:
        for pid in _marked(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _marked(marker: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                out.append(int(entry))
    return out


def test_a_cancelled_job_releases_its_gpus_only_once_every_process_is_gone(
    tmp_path: Path,
) -> None:
    """The stop's SIGKILL goes to the job, not its launcher (killed, the launcher would
    leave the setsid'd workers to init and its GPUs would go to the next job while
    they ran): the next job on the same GPUs finds none of them."""
    from tests.runtime.harness import Harness

    marker = f"corral-chain-{os.getpid()}-{tmp_path.name}"
    service = Harness(tmp_path, policy="fifo", policy_options={}, stop_grace=0.5)
    try:
        first = service.submit(
            command=[sys.executable, str(CHAIN), marker, "--stay"], gpus=2, gpu_type="V100"
        )
        service.wait_state(first["id"], {"RUNNING"})
        service.wait_loop(lambda: count(marker) >= 3, 30, "the job's workers to start")
        second = service.submit(
            "bob", command=[sys.executable, str(CHAIN), "--count", marker], gpus=2, gpu_type="V100"
        )
        cancel = service.client.post(f"/v1/jobs/{first['id']}/cancel", headers=auth("alice"))
        assert cancel.is_success, cancel.text
        ended = service.wait_done([first["id"], second["id"]], timeout=120)
        assert [j["status"] for j in ended] == ["CANCELLED", "SUCCEEDED"], ended
        assert count(marker) == 0
    finally:
        service.close()
        for pid in _marked(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_jobs_log_is_cut_at_its_limit_and_says_where(tmp_path: Path) -> None:
    """20 MB of output against a 64 KiB limit: the log keeps the first 64 KiB and a line
    saying it was cut, the job is not held up by it and ends as it would."""
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    log = folder / "log.txt"
    script = "import sys\nfor _ in range(20): sys.stdout.write('y' * 10**6)\nprint('end')"
    argv = [sys.executable, "-m", "corral.runtime.execution.launcher", str(folder)]
    with open(log, "ab") as out:
        done = subprocess.run(
            [*argv, "--log-limit", str(2**16), "--", sys.executable, "-c", script],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0
    assert json.loads((folder / "exit.json").read_text())["exit_code"] == 0
    text = log.read_bytes()
    assert text.startswith(b"y" * 2**16)
    assert b"the log was cut here at 65536 bytes (log_limit)" in text
    assert len(text) < 2**16 + 200 and not text.rstrip().endswith(b"end")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_sent_while_the_launcher_starts_the_job_reaches_the_job(
    tmp_path: Path, sig: int
) -> None:
    """The service signals the attempt's group; a stop that came before the job's
    process was in it reached the launcher alone. It was ignored there and the job ran
    to its end (a suspended job recorded as a success). The launcher passes it on."""
    folder = tmp_path / "attempt"
    folder.mkdir()

    def start(setup: object) -> int:
        os.kill(os.getpid(), sig)  # the stop arrives while the launcher is starting the job
        child = subprocess.Popen(["sleep", "30"], preexec_fn=setup)  # type: ignore[arg-type]
        return child.pid

    pid = os.fork()  # in a process of its own: a launcher is a subreaper, and ignores stops
    if pid == 0:
        os._exit(launcher.supervise(folder, Confinement(), start))
    _, status = os.waitpid(pid, 0)
    record = json.loads((folder / "exit.json").read_text())
    assert record["signal"] == sig and record["exit_code"] is None
    assert os.waitstatus_to_exitcode(status) == 128 + sig


def test_a_job_ends_with_its_launchers_parent_and_what_it_left_with_it(tmp_path: Path) -> None:
    """``--parent``: a Ray rank's actor dies (killed, its worker crashed); nothing can
    report on or stop that rank any more, and its job is started again elsewhere.
    The rank's job and the workers it left (one in a session of its own) end with
    the actor, and the launcher records the attempt as lost. Without the option
    the job outlives the launcher's parent (as it must outlive a restarted service)."""
    marker = f"corral-chain-{os.getpid()}-{tmp_path.name}"
    parent_script = (
        "import os, subprocess, sys, time\n"
        "folder, marker = sys.argv[1], sys.argv[2]\n"
        "subprocess.Popen([sys.executable, '-m', 'corral.runtime.execution.launcher', folder,\n"
        "    '--parent', str(os.getpid()), '--', sys.executable, sys.argv[3], marker, '--stay'],\n"
        "    start_new_session=True)\n"
        "time.sleep(300)\n"
    )
    folder = tmp_path / "rank-0"
    folder.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_script, str(folder), marker, str(CHAIN)]
    )
    try:
        deadline = time.monotonic() + 60
        while count(marker) < 3 and time.monotonic() < deadline:  # the job and its workers
            time.sleep(0.1)
        assert count(marker) >= 3
        launcher_pid = int((folder / launcher.PID_FILE).read_text())
        os.kill(launcher_pid, launcher.PARENT_DIED)  # sent by someone else: the parent lives
        time.sleep(1)
        assert count(marker) >= 3 and not (folder / "exit.json").exists()
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 60
        while not (folder / "exit.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        record = json.loads((folder / "exit.json").read_text())
        assert record["lost"] is True and "parent" in record["detail"]
        # the launcher (its command line carries the job's) exits just after its record
        deadline = time.monotonic() + 30
        while process_start(launcher_pid) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert count(marker) == 0  # nothing of the job outlived its record
    finally:
        parent.kill()
        for pid in _marked(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A file system of 1 MiB (a tmpfs: root only, and where mounts are allowed)."""
    where = tmp_path / "small-disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"no tmpfs mount here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("relayed", [True, False])
def test_a_job_that_fills_its_disk_still_has_its_end_recorded(
    small_disk: Path, relayed: bool
) -> None:
    """A job writing 3 MB onto a disk of 1 MiB (its attempt's folder and log there):
    its launcher still writes how it ended (into the room taken at its start), so
    the service reads the job's own failure, the full disk named, never a lost node;
    no temporary file is left behind."""
    folder = small_disk / "attempt-1"
    folder.mkdir()
    limit = ["--log-limit", str(10 * 2**20)] if relayed else []
    program = "import sys; sys.stdout.write('x' * 3_000_000); sys.stdout.flush(); sys.exit(3)"
    with open(small_disk / "log.txt", "ab") as log:
        subprocess.run(
            [sys.executable, "-m", "corral.runtime.execution.launcher", str(folder), *limit,
             "--", sys.executable, "-c", program],
            stdout=log, stderr=subprocess.STDOUT, timeout=60,
        )  # fmt: skip
    from corral.runtime.execution.executor import read_exit_record

    record = read_exit_record(folder)
    assert record is not None and not record.lost, record
    assert record.exit_code not in (None, 0) and (record.exit_code == 3 or not relayed), record
    assert "was full" in (record.detail or "") and str(folder) in (record.detail or ""), record
    if relayed:
        assert "its log could not be written" in (record.detail or ""), record
    assert sorted(p.name for p in folder.iterdir()) == ["exit.json", "launcher.pid"]


def test_a_record_written_on_a_full_disk_goes_into_its_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Everywhere, without root: the writes a full disk refuses, refused by hand.)"""
    import errno

    from corral.runtime.execution.executor import read_exit_record

    launcher.reserve_record(tmp_path)
    assert (tmp_path / launcher.RESERVE_FILE).stat().st_size == launcher.RECORD_ROOM
    real_open = open

    def full(path: object, *args: object, **kwargs: object) -> object:
        if str(path).endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", full)
    launcher.write_record(
        tmp_path, {"exit_code": 1, "signal": None, "detail": "x" * 9000, "end_time": 5.0}
    )
    monkeypatch.undo()
    record = read_exit_record(tmp_path)
    assert record is not None and record.exit_code == 1 and record.end == 5.0
    assert (
        "was full (No space left on device)" in (record.detail or "")
        or len(record.detail or "") == launcher.RECORD_ROOM // 2
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exit.json"]


def test_a_process_gone_is_never_signalled_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher (root) once SIGKILLed every pid it had ever killed, each round for
    as long as others lived: a pid handed to someone else's process meanwhile was
    hit. Now a pid is signalled only while it is among the job's (and through a
    pidfd where there is one)."""
    rounds = iter([{11, 12}, {11, 12}, {12}, {12}, {12}, set()])
    listing: list[set[int]] = [set()]

    def job_processes(_me: int) -> set[int]:
        return set(listing[0])

    def reap() -> None:
        listing[0] = next(rounds, set())

    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(launcher, "job_processes", job_processes)
    monkeypatch.setattr(launcher, "_cgroup_members", lambda _g: set())
    monkeypatch.setattr(launcher, "_cgroup_kill", lambda _g: None)
    monkeypatch.setattr(launcher, "_reap", reap)
    monkeypatch.setattr(launcher, "_pidfd", lambda _pid: None)
    monkeypatch.setattr(launcher, "_signal", lambda pid, _h, sig: sent.append((pid, sig)))
    monkeypatch.setattr(launcher.time, "sleep", lambda _s: None)
    listing[0] = {11, 12}
    assert launcher._kill_leftovers(None) == 2
    kills = [pid for pid, sig in sent if sig == signal.SIGKILL]
    assert kills.count(11) == 3 and kills.count(12) == 6, kills  # 11 no more once gone
    last_11 = max(i for i, (pid, _) in enumerate(sent) if pid == 11)
    assert all(pid == 12 for pid, _ in sent[last_11 + 1 :])


def test_a_job_is_the_oom_killers_first_choice(tmp_path: Path) -> None:
    """A job's processes run with oom_score_adj 500 (the kernel frees memory from a
    greedy job before the service; a root service lowers its own, see
    ``test_the_service_is_the_oom_killers_last_choice``)."""
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    program = "print(open('/proc/self/oom_score_adj').read().strip())"
    done = subprocess.run(
        [sys.executable, "-m", "corral.runtime.execution.launcher", str(folder),
         "--", sys.executable, "-c", program],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.strip() == str(launcher.JOB_OOM_SCORE_ADJ), done.stdout + done.stderr


def test_on_a_cgroup_v1_host_the_process_limit_holds_a_fork_bomb(tmp_path: Path) -> None:
    """Where v1's pids controller is mounted (root), an attempt gets a pids group of its
    own: a job that forks past job_max_processes is refused forks; the group is gone
    after it."""
    root = launcher.CGROUP_ROOT / "pids"
    if os.geteuid() != 0 or not (root / "cgroup.procs").exists():
        pytest.skip("needs root and cgroup v1's pids controller")
    if (launcher.CGROUP_ROOT / "cgroup.controllers").exists():
        pytest.skip("a cgroup v2 host: its own test covers pids.max")
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    program = (
        "import subprocess, sys\n"
        "kids, refused = [], 0\n"
        "for _ in range(60):\n"
        "    try:\n"
        "        kids.append(subprocess.Popen(['sleep', '5']))\n"
        "    except OSError:\n"
        "        refused += 1\n"
        "print(len(kids), refused)\n"
        "for k in kids: k.kill()\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "corral.runtime.execution.launcher", str(folder),
         "--pids", "20", "--", sys.executable, "-c", program],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    started, refused = map(int, done.stdout.split())
    assert started < 20 and refused > 40, done.stdout + done.stderr
    assert not any((root / "corral").glob(f"{tmp_path.name}-attempt-1-*")), "its group was left"


def test_a_job_that_gave_no_memory_is_held_to_its_default_share(tmp_path: Path) -> None:
    """Where a cgroup can hold it (here v1's memory controller, as root), a job that
    gave no --mem is held to its default share: 300 MB is refused it under 100 MB,
    50 MB is not. (Never an rlimit: without a cgroup the default is not enforced.)"""
    root = launcher.CGROUP_ROOT / "memory"
    if os.geteuid() != 0 or not (root / "cgroup.procs").exists():
        pytest.skip("needs root and cgroup v1's memory controller")
    if (launcher.CGROUP_ROOT / "cgroup.controllers").exists():
        pytest.skip("a cgroup v2 host: memory.max is covered by its own test")
    for size, ends in ((300, "killed"), (50, "done")):
        folder = tmp_path / f"attempt-{size}"
        folder.mkdir()
        program = f"b = bytearray({size} * 2**20); b[::4096] = b'x' * len(b[::4096]); print('done')"
        done = subprocess.run(
            [sys.executable, "-m", "corral.runtime.execution.launcher", str(folder),
             "--memory-default", str(100 * 2**20), "--", sys.executable, "-c", program],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if ends == "done":
            assert done.returncode == 0 and "done" in done.stdout, done.stderr
        else:
            from corral.runtime.execution.executor import read_exit_record

            assert done.returncode != 0 and "done" not in done.stdout, done.stdout
            record = read_exit_record(folder)  # (read by the service as out of memory)
            assert record is not None and launcher.OOM_NOTE in (record.detail or ""), record
