"""GPU confinement: a job can open only the GPU device nodes it was given.

``CUDA_VISIBLE_DEVICES`` only tells CUDA which GPUs to show; a job that unsets
it (or opens ``/dev/nvidia3`` itself) reaches every GPU of its node, and may
take memory or time on a GPU another job holds. The kernel's device cgroup
stops that: the attempt's launcher puts itself, and so the job, in a cgroup
whose rule refuses every NVIDIA GPU node (character major 195) but the
job's. ``/dev/nvidiactl`` and ``/dev/nvidia-uvm`` stay open: without a GPU
node they give nothing. The rule holds for every process of the job, root
included, and for whatever it starts; a job given no GPU cannot create a CUDA
context at all.

Two kernels' ways, tried in this order (NVIDIA's container toolkit uses the
same two):

- **cgroup v2**: a device program (eBPF, ``BPF_PROG_TYPE_CGROUP_DEVICE``)
  attached to the attempt's own cgroup (the launcher makes one where cgroups
  v2 is delegated to the service). The program is eleven-odd instructions
  made here, no compiler: load the major and minor, refuse 195 with a
  forbidden minor, allow the rest.
- **cgroup v1**: the ``devices`` controller, a cgroup per attempt with one
  ``c 195:N rwm`` line per forbidden GPU in ``devices.deny``.

Where neither is available (no cgroups the service may write, a kernel
without BPF) the job is not confined and the service says so at start
(:func:`in_force`) and in each attempt's log.

Which node is which GPU: the driver numbers nodes by its own minor numbers,
read from ``/proc/driver/nvidia/gpus/<bus id>/information`` and matched to
the service's GPU indices (``nvidia-smi``'s, in PCI bus order); where that
folder cannot be read the minor is taken to be the index.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

NVIDIA_MAJOR = 195
"""The NVIDIA driver's character-device major number (its GPUs and nvidiactl)."""
CONTROL_MINOR = 255
"""``/dev/nvidiactl``: not a GPU; without a GPU node it gives nothing."""
DEV = Path("/dev")
PROC_GPUS = Path("/proc/driver/nvidia/gpus")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_NODE = re.compile(r"^nvidia(\d+)$")


@dataclass(frozen=True)
class DeviceNode:
    """A GPU device node: its path and its numbers."""

    path: Path
    major: int
    minor: int


def gpu_nodes(dev: Path = DEV) -> list[DeviceNode]:
    """The NVIDIA GPU nodes (``nvidia0``, ``nvidia1``...) in ``dev``, by minor."""
    out = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(dev):
            if not _NODE.match(entry.name):
                continue
            try:
                info = os.stat(entry.path)
            except OSError:
                continue
            if not stat.S_ISCHR(info.st_mode):
                continue
            out.append(DeviceNode(Path(entry.path), os.major(info.st_rdev), os.minor(info.st_rdev)))
    return sorted(out, key=lambda node: node.minor)


def minors_by_index(proc: Path = PROC_GPUS) -> list[int]:
    """Each GPU's device minor, in the service's GPU order (PCI bus order, as
    ``nvidia-smi`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` number them); empty when
    the driver's folder cannot be read."""
    found: list[tuple[str, int]] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(proc):
            try:
                text = Path(entry.path, "information").read_text()
            except OSError:
                continue
            match = re.search(r"Device Minor:\s*(\d+)", text)
            if match:
                found.append((entry.name.lower(), int(match.group(1))))
    return [minor for _, minor in sorted(found)]


def forbidden_minors(
    allowed: list[int], dev: Path = DEV, proc: Path = PROC_GPUS
) -> list[tuple[int, int]]:
    """(major, minor) of every GPU node of this machine the job was not given;
    ``allowed`` holds GPU indices (the service's, ``nvidia-smi``'s)."""
    minors = minors_by_index(proc)
    keep = {minors[k] if k < len(minors) else k for k in allowed}
    return [
        (node.major, node.minor)
        for node in gpu_nodes(dev)
        if node.minor not in keep and node.minor != CONTROL_MINOR
    ]


# ----------------------------------------------------------------- cgroup v1
def v1_group(name: str, root: Path = CGROUP_ROOT) -> Path:
    """Where the v1 ``devices`` cgroup named ``name`` is made."""
    return root / "devices" / "corral" / name


def confine_v1(name: str, forbidden: list[tuple[int, int]], root: Path = CGROUP_ROOT) -> Path:
    """Move this process into a new v1 ``devices`` cgroup that refuses ``forbidden``;
    its path (remove it with :func:`release_v1`). Raises OSError where v1's
    controller is not mounted or not ours to write."""
    if not (root / "devices" / "devices.deny").exists():
        raise OSError("no cgroup v1 devices controller")
    group = v1_group(name, root)
    group.mkdir(parents=True, exist_ok=True)
    try:
        for major, minor in forbidden:
            (group / "devices.deny").write_text(f"c {major}:{minor} rwm")
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        raise
    return group


def release_v1(group: Path, root: Path = CGROUP_ROOT) -> None:
    """This process back to the root devices cgroup, and ``group`` removed (once the
    job's processes are gone: a cgroup with members cannot be)."""
    with contextlib.suppress(OSError):
        (root / "devices" / "cgroup.procs").write_text(str(os.getpid()))
        group.rmdir()


# ----------------------------------------------------------------- cgroup v2
_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}
_BPF_PROG_LOAD, _BPF_PROG_ATTACH = 5, 8
_BPF_PROG_TYPE_CGROUP_DEVICE, _BPF_CGROUP_DEVICE = 15, 6
_BPF_F_ALLOW_MULTI = 2
_ATTR_SIZE = 128


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One eBPF instruction (``struct bpf_insn``: opcode, registers, offset, immediate)."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def device_program(forbidden: list[tuple[int, int]]) -> bytes:
    """A cgroup device program that refuses ``forbidden`` (major, minor) and allows
    everything else. Its context is ``struct bpf_cgroup_dev_ctx`` (access type,
    major, minor, 32 bits each); it returns 1 to allow, 0 to refuse."""
    ldx_w, jne_k, jeq_k, mov64_k, exit_ = 0x61, 0x55, 0x15, 0xB7, 0x95
    rules = sorted(set(forbidden))
    if not rules:  # (the verifier refuses code that cannot be reached)
        return _insn(mov64_k, dst=0, imm=1) + _insn(exit_)
    body = [_insn(ldx_w, dst=2, src=1, off=4), _insn(ldx_w, dst=3, src=1, off=8)]
    # per rule: if major != M skip the next test; if minor == m go to "refuse"
    n = len(rules)
    for k, (major, minor) in enumerate(rules):
        body.append(_insn(jne_k, dst=2, off=1, imm=major))
        to_refuse = 2 * (n - k - 1) + 2  # past the remaining rules and "allow"
        body.append(_insn(jeq_k, dst=3, off=to_refuse, imm=minor))
    body += [_insn(mov64_k, dst=0, imm=1), _insn(exit_)]  # allow
    body += [_insn(mov64_k, dst=0, imm=0), _insn(exit_)]  # refuse
    return b"".join(body)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    number = _BPF_SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(f"no eBPF system call number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.syscall(number, cmd, attr, _ATTR_SIZE))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def load_program(forbidden: list[tuple[int, int]]) -> int:
    """The device program loaded into the kernel: its file descriptor."""
    code = ctypes.create_string_buffer(device_program(forbidden))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into(
        "<IIQQ",
        attr,
        0,
        _BPF_PROG_TYPE_CGROUP_DEVICE,
        len(code.raw) // 8,
        ctypes.addressof(code),
        ctypes.addressof(license_),
    )
    return _bpf(_BPF_PROG_LOAD, attr)


def confine_v2(cgroup: Path, forbidden: list[tuple[int, int]]) -> None:
    """Attach a device program refusing ``forbidden`` to the v2 ``cgroup`` (it goes
    with the cgroup). Raises OSError where the kernel refuses."""
    prog = load_program(forbidden)
    try:
        target = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
        try:
            attr = ctypes.create_string_buffer(_ATTR_SIZE)
            struct.pack_into("<IIII", attr, 0, target, prog, _BPF_CGROUP_DEVICE, _BPF_F_ALLOW_MULTI)
            _bpf(_BPF_PROG_ATTACH, attr)
        finally:
            os.close(target)
    finally:
        os.close(prog)


# ----------------------------------------------------------------- the launcher's
@dataclass
class Confined:
    """How an attempt's GPUs are confined: ``how`` for people, and the v1 cgroup to
    remove at its end (if that is the way)."""

    how: str
    v1_group: Path | None = None

    def release(self) -> None:
        if self.v1_group is not None:
            release_v1(self.v1_group)


def confine(name: str, allowed: list[int], v2_cgroup: Path | None, dev: Path = DEV) -> Confined:
    """Confine this process (an attempt's launcher, before it starts the job) to the GPU
    nodes ``allowed`` (GPU indices): v2's device program on its own cgroup, else v1's
    devices cgroup, else nothing, with the reason."""
    forbidden = forbidden_minors(allowed, dev)
    if not forbidden:
        return Confined("nothing to confine: every GPU node of this machine is the job's")
    reasons = []
    if v2_cgroup is not None:
        try:
            confine_v2(v2_cgroup, forbidden)
            return Confined(f"device program on cgroup v2 (refuses {_minors(forbidden)})")
        except OSError as exc:
            reasons.append(f"cgroup v2: {exc.strerror or exc}")
    try:
        group = confine_v1(name, forbidden)
        return Confined(f"devices cgroup v1 (refuses {_minors(forbidden)})", group)
    except OSError as exc:
        reasons.append(f"cgroup v1: {exc.strerror or exc}")
    return Confined("NOT confined: " + "; ".join(reasons))


def _minors(forbidden: list[tuple[int, int]]) -> str:
    return ", ".join(f"/dev/nvidia{minor}" for _, minor in forbidden)


def in_force(root: Path = CGROUP_ROOT, dev: Path = DEV) -> str:
    """Which confinement jobs on this machine will get, said by the service at start:
    probed without confining anything (a program loaded and dropped, a cgroup made
    and removed)."""
    if not gpu_nodes(dev):
        return "no NVIDIA GPU nodes on this machine: nothing to confine"
    reasons = []
    if (root / "cgroup.controllers").exists():
        try:
            os.close(load_program([(NVIDIA_MAJOR, 0)]))
            probe = root / "corral" / f"probe-{os.getpid()}"
            probe.mkdir(parents=True, exist_ok=True)
            probe.rmdir()
            return "device program on each attempt's cgroup (v2)"
        except OSError as exc:
            reasons.append(f"cgroup v2: {exc.strerror or exc}")
    base = root / "devices"
    if (base / "devices.deny").exists():
        probe = base / "corral" / f"probe-{os.getpid()}"
        try:
            probe.mkdir(parents=True, exist_ok=True)
            probe.rmdir()
            return "devices cgroup per attempt (v1)"
        except OSError as exc:
            reasons.append(f"cgroup v1: {exc.strerror or exc}")
    else:
        reasons.append("no cgroup v1 devices controller")
    return "NOT confined (jobs see every GPU node): " + "; ".join(reasons)
