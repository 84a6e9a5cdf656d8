"""GPU confinement against fake device nodes: a job opens only its GPUs' nodes.

A CPU machine has no NVIDIA driver, but the kernel's device cgroup checks a
node's numbers before any driver is asked: a fake ``nvidia1`` made with
``mknod c 195 1`` answers "no such device" (ENXIO) when the job may open it
and "operation not permitted" (EPERM) when the cgroup refuses it. The tests
run the real launcher on such nodes, with the kernel's own rules (v1's
devices controller, v2's device program), as root and as another user.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.runtime.execution import gpu_devices
from corral.runtime.execution.executor import GpuSlot, LaunchRequest, confinement, start_launcher
from corral.runtime.execution.launcher import Confinement

ROOT = os.geteuid() == 0
V1 = gpu_devices.CGROUP_ROOT / "devices" / "devices.deny"
V2_ROOTS = [
    p
    for p in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
    if (p / "cgroup.procs").exists() and (p / "cgroup.controllers").exists()
]
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin") or sys.executable
"""A Python every user may run (the project's own may sit in a folder only root enters)."""
needs_root = pytest.mark.skipif(not ROOT, reason="device nodes and cgroups need root")

OPEN_ALL = """
import errno, json, os, sys
seen = {}
for name in sorted(os.listdir(sys.argv[1])):
    try:
        os.close(os.open(os.path.join(sys.argv[1], name), os.O_RDWR))
        seen[name] = "opened"
    except OSError as exc:
        seen[name] = errno.errorcode[exc.errno]
print("SEEN " + json.dumps(seen), flush=True)
"""
"""The job: tries every node of the folder and prints what each answered."""


@pytest.fixture
def nodes() -> Iterator[Path]:
    """A folder with fake GPU nodes nvidia0 and nvidia1 and a fake nvidiactl, open to
    every user (as /dev is)."""
    if not ROOT:
        pytest.skip("mknod needs root")
    dev = Path(tempfile.mkdtemp(prefix="corral-fake-dev-"))
    dev.chmod(0o755)
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
        (dev / name).chmod(0o666)
    yield dev
    shutil.rmtree(dev)


def seen_in(log: str) -> dict[str, str]:
    (line,) = [x for x in log.splitlines() if x.startswith("SEEN ")]
    result: dict[str, str] = json.loads(line[5:])
    return result


def run_launcher(folder: Path, dev: Path, gpus: str, uid: int | None = None) -> str:
    folder.mkdir()
    conf = Confinement(gpu_devices=gpus, device_dir=str(dev))
    if uid is not None:
        conf.uid, conf.gid = uid, uid
    python = sys.executable if uid is None else SYSTEM_PYTHON
    child = start_launcher(
        folder,
        conf,
        [python, "-c", OPEN_ALL, str(dev)],
        {"PATH": os.environ["PATH"]},
        folder / "log.txt",
    )
    assert child.wait(60) == 0, (folder / "log.txt").read_text()
    return (folder / "log.txt").read_text()


def test_the_device_program_is_what_the_kernel_checks_and_refuses_only_the_rules() -> None:
    program = gpu_devices.device_program([(195, 1), (195, 3)])
    assert len(program) % 8 == 0
    # loads major and minor, two tests per rule, then allow and refuse
    assert len(program) // 8 == 2 + 2 * 2 + 4
    # with nothing to refuse, no unreachable code (the verifier refuses it)
    assert len(gpu_devices.device_program([])) // 8 == 2


def test_nodes_are_found_by_number_and_matched_to_gpus_by_the_drivers_minors(
    nodes: Path, tmp_path: Path
) -> None:
    found = gpu_devices.gpu_nodes(nodes)
    assert [(n.path.name, n.minor) for n in found] == [("nvidia0", 0), ("nvidia1", 1)]
    # without the driver's folder a GPU's minor is its index
    missing = tmp_path / "no-proc"
    assert gpu_devices.forbidden_minors([0], nodes, missing) == [(195, 1)]
    assert gpu_devices.forbidden_minors([], nodes, missing) == [(195, 0), (195, 1)]
    # the driver's folder says which bus holds which minor: GPU 0 (first bus) is minor 1
    proc = tmp_path / "proc"
    for bus, minor in (("0000:07:00.0", 0), ("0000:03:00.0", 1)):
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(f"Model: H200\nDevice Minor: \t {minor}\n")
    assert gpu_devices.minors_by_index(proc) == [1, 0]
    assert gpu_devices.forbidden_minors([0], nodes, proc) == [(195, 0)]


@needs_root
@pytest.mark.skipif(not V1.exists(), reason="no cgroup v1 devices controller here")
def test_v1_devices_cgroup_refuses_the_gpus_not_given(nodes: Path) -> None:
    code = f"""
import errno, os, sys
from pathlib import Path
from corral.runtime.execution import gpu_devices as g
group = g.confine_v1("test-{os.getpid()}", g.forbidden_minors([0], Path("{nodes}")))
out = []
for name in ("nvidia0", "nvidia1", "nvidiactl"):
    try:
        os.open(Path("{nodes}") / name, os.O_RDWR)
    except OSError as exc:
        out.append(errno.errorcode[exc.errno])
g.release_v1(group)
print(" ".join(out))
print(group.exists())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # ENXIO: allowed through to the (absent) driver; EPERM: refused by the cgroup
    assert out.stdout.split("\n")[:2] == ["ENXIO EPERM ENXIO", "False"]


@needs_root
@pytest.mark.skipif(not V2_ROOTS, reason="no cgroup v2 hierarchy here")
def test_v2_device_program_refuses_the_gpus_not_given(nodes: Path) -> None:
    group = V2_ROOTS[0] / f"corral-test-{os.getpid()}"
    group.mkdir()
    try:
        try:
            gpu_devices.confine_v2(group, gpu_devices.forbidden_minors([1], nodes))
        except OSError as exc:
            pytest.skip(f"this kernel refuses device programs: {exc}")
        code = f"""
import errno, os
from pathlib import Path
Path("{group}/cgroup.procs").write_text(str(os.getpid()))
out = []
for name in ("nvidia0", "nvidia1"):
    try:
        os.open(Path("{nodes}") / name, os.O_RDWR)
    except OSError as exc:
        out.append(errno.errorcode[exc.errno])
Path("{V2_ROOTS[0]}/cgroup.procs").write_text(str(os.getpid()))
print(" ".join(out))
"""
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "EPERM ENXIO"
    finally:
        group.rmdir()


@needs_root
def test_the_launcher_confines_a_job_and_says_how_as_root_and_as_another_user(
    nodes: Path, tmp_path: Path
) -> None:
    if gpu_devices.in_force(dev=nodes).startswith("NOT"):
        pytest.skip("no device cgroup this service may write here")
    log = run_launcher(tmp_path / "one", nodes, "1")
    assert "corral: GPU confinement: " in log and "refuses /dev/nvidia0" in log
    assert seen_in(log) == {"nvidia0": "EPERM", "nvidia1": "ENXIO", "nvidiactl": "ENXIO"}
    # a job given no GPU opens none, whoever it runs as (the rule is the kernel's)
    log = run_launcher(tmp_path / "none", nodes, "none", uid=65534)
    assert seen_in(log) == {"nvidia0": "EPERM", "nvidia1": "EPERM", "nvidiactl": "ENXIO"}
    # not asked (virtual GPUs): nothing is said and nothing refused
    folder = tmp_path / "free"
    folder.mkdir()
    child = start_launcher(
        folder,
        Confinement(),
        [sys.executable, "-c", OPEN_ALL, str(nodes)],
        {"PATH": os.environ["PATH"]},
        folder / "log.txt",
    )
    assert child.wait(60) == 0
    text = (folder / "log.txt").read_text()
    assert "GPU confinement" not in text
    assert set(seen_in(text).values()) == {errno.errorcode[errno.ENXIO]}
    # the attempts' cgroups are gone with them
    leftovers = list((gpu_devices.CGROUP_ROOT / "devices" / "corral").glob("one-*"))
    leftovers += list((gpu_devices.CGROUP_ROOT / "corral").glob("one-*"))
    assert leftovers == []


def test_only_real_gpus_are_confined_and_a_job_without_one_is_given_none(tmp_path: Path) -> None:
    real = [GpuSlot(0, "n", "H200", "0"), GpuSlot(1, "n", "H200", "1")]
    virtual = [GpuSlot(0, "n", "V100"), GpuSlot(1, "n", "V100")]

    def request(gpus: list[GpuSlot]) -> LaunchRequest:
        return LaunchRequest(["true"], {}, str(tmp_path), tuple(gpus), tmp_path, tmp_path / "l")

    assert confinement(request(real[1:]), real).gpu_devices == "1"
    assert confinement(request([]), real).gpu_devices == "none"
    assert confinement(request(virtual[:1]), virtual).gpu_devices is None
    # and the launcher's command line carries it
    assert "--gpu-devices" in confinement(request([]), real).options()


def test_a_machine_without_gpu_nodes_has_nothing_to_confine(tmp_path: Path) -> None:
    assert gpu_devices.in_force(dev=tmp_path).startswith("no NVIDIA GPU nodes")
