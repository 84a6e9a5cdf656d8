"""Whom a job runs as: isolation of jobs from each other and from the service.

A service started as root runs each user's jobs as the Unix user the config
maps them to (``users: [{name: alice, unix_user: alice, ...}]``), with that
user's groups and home; the launcher drops privileges just before the job's
program starts. Otherwise every job runs as the service's own user, and the
service says at start that jobs are not isolated from each other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from corral.errors import CorralError
from corral.runtime.jobspec.config import ServiceConfig


@dataclass(frozen=True)
class RunAs:
    """A Unix identity a job's processes take."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    runs_python: bool = True
    """Whether this user can run the service's Python (jobs given as tasks, stage
    commands and the training library run it as the job's user)."""


def lookup(unix_user: str) -> RunAs:
    """A Unix account by name, with its supplementary groups; CorralError if absent."""
    try:
        entry = pwd.getpwnam(unix_user)
    except KeyError:
        raise CorralError(f"unix_user '{unix_user}' is not a user on this machine") from None
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


def check_identities(config: ServiceConfig) -> dict[str, RunAs]:
    """API user -> Unix identity of their jobs, checked before the service starts."""
    mapped = {u.name: u.unix_user for u in config.users if u.unix_user}
    if mapped and os.geteuid() != 0:
        raise CorralError(
            "users: unix_user is set, but jobs can run as other users only when the service "
            "runs as root"
        )
    out = {}
    for name, unix_user in mapped.items():
        who = lookup(unix_user)
        if who.uid == 0:
            raise CorralError(
                f"user '{name}': unix_user '{unix_user}' is root; jobs never run as root"
            )
        blocked = first_unreachable(config.job_root, who)
        if blocked is not None:
            raise CorralError(
                f"jobs_dir: the jobs of '{name}' run as '{unix_user}', who cannot enter "
                f"{blocked}; put jobs_dir where every unix_user can reach it "
                "(e.g. /var/lib/corral-jobs)"
            )
        cannot = cannot_run_python(who)
        if cannot is not None and config.require_reachable_python:
            raise CorralError(
                f"user '{name}': unix_user '{unix_user}' cannot run this service's Python "
                f"({sys.executable}): {cannot}. Jobs given as tasks, stage commands and "
                "corral.train run it as the job's user: install corral where every "
                "unix_user can read it (e.g. a virtual environment under /opt, not under "
                "/root), or set require_reachable_python: false to start anyway (such "
                "jobs are then refused at submission)"
            )
        if cannot is not None:
            who = dataclasses.replace(who, runs_python=False)
        out[name] = who
    return out


def cannot_run_python(who: RunAs) -> str | None:
    """Why ``who`` cannot run this Python and import corral with it (None: they can)."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", "import corral"],
            user=who.uid,
            group=who.gid,
            extra_groups=list(who.groups),
            env={"PATH": "/usr/bin:/bin", "HOME": who.home},
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "it did not start within 60 s"
    except OSError as exc:
        return exc.strerror or str(exc)
    if done.returncode == 0:
        return None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit code {done.returncode}"


def first_unreachable(path: Path, who: RunAs) -> Path | None:
    """The first existing folder on the way to ``path`` that ``who`` may not enter."""
    for folder in [*reversed(path.absolute().parents), path.absolute()]:
        try:
            info = folder.stat()
        except OSError:
            return None  # created later by the service, with modes it sets
        if info.st_uid == who.uid:
            bit = 0o100
        elif info.st_gid in who.groups or info.st_gid == who.gid:
            bit = 0o010
        else:
            bit = 0o001
        if not info.st_mode & bit:
            return folder
    return None


def isolation_warning(config: ServiceConfig) -> str | None:
    """The line the service prints when jobs are not isolated from each other."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() != 0:
        return (
            f"jobs run as '{me}', the service's user, and are not isolated from each other; "
            "run the service as root and give each user a unix_user to isolate them"
        )
    bare = [u.name for u in config.users if not u.unix_user]
    if bare:
        return (
            f"the jobs of {', '.join(bare)} run as root: give each user a unix_user "
            "(jobs then run as that user, isolated from each other and from the service)"
        )
    return None


def job_folder(config: ServiceConfig, job: int, run_as: RunAs | None) -> Path:
    """The job's own folder (its default working directory and checkpoints), outside
    the state directory and owned by the user the job runs as.

    The folder of all jobs can be entered but not listed (0711), so a job
    reaches its own folder and cannot see which others exist; each job's
    folder is 0700."""
    root = config.job_root
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o711)
    folder = root / str(job)
    folder.mkdir(mode=0o700, exist_ok=True)
    moved = []
    for name in ("checkpoint", "prerun"):  # from before jobs had folders of their own
        old = config.state_dir / "jobs" / str(job) / name
        if old.is_dir() and not (folder / name).exists():
            shutil.move(str(old), str(folder / name))
            moved.append(folder / name)
    if run_as is not None:
        os.chown(folder, run_as.uid, run_as.gid, follow_symlinks=False)
        # only what the service itself just moved in: never walk what a job wrote there,
        # which may hold links to files the job's user must not be given
        for top in moved:
            for where, dirs, files in os.walk(top, followlinks=False):
                for name in [where, *(os.path.join(where, f) for f in dirs + files)]:
                    os.chown(name, run_as.uid, run_as.gid, follow_symlinks=False)
    return folder


BATCH_SCRIPT = "batch-script"
"""The stored copy of a batch job's script in its folder (Slurm's ``slurm_script``)."""


def write_job_script(folder: Path, text: str, run_as: RunAs | None) -> Path:
    """Write the script a batch job was submitted with into its own ``folder`` (made
    by :func:`job_folder`), readable and runnable by the job's user alone, and its path.

    The folder belongs to the job's user while the service may be root: the old
    copy is removed and the new one created with ``O_EXCL`` through the folder's
    descriptor, so a link the job left under that name is never followed (the
    start fails instead)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    where = os.open(folder, flags)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(BATCH_SCRIPT, dir_fd=where)
        fd = os.open(
            BATCH_SCRIPT,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o700,
            dir_fd=where,
        )
        with os.fdopen(fd, "wb") as out:
            if run_as is not None:
                os.fchown(fd, run_as.uid, run_as.gid)
            os.fchmod(fd, 0o700)
            out.write(text.encode())
    finally:
        os.close(where)
    return folder / BATCH_SCRIPT


def usable_folder(path: str, who: RunAs | None) -> bool:
    """Whether ``path`` is a folder ``who`` can enter, as the
    kernel decides for that user (links, ACLs, a parent they cannot enter), so a
    check made for them by a service running as root tells them nothing more than
    they could learn themselves: a folder that is missing and one that is not theirs
    get the same answer. Without ``who``, for the service's own user."""
    if who is None:
        return os.path.isdir(path) and os.access(path, os.X_OK)
    key, now = (who.uid, path), time.monotonic()
    known = _FOLDER_ANSWERS.get(key)
    if known is not None and now - known[0] < FOLDER_ANSWER_SECONDS:
        return known[1]  # a batch of jobs with one workdir asks once, not per job
    answer = _usable_as(path, who)
    if len(_FOLDER_ANSWERS) >= 4096:
        _FOLDER_ANSWERS.clear()
    _FOLDER_ANSWERS[key] = (now, answer)
    return answer


FOLDER_ANSWER_SECONDS = 10.0
"""How long a folder check's answer is reused for the same user and path."""
_FOLDER_ANSWERS: dict[tuple[int, str], tuple[float, bool]] = {}


def _usable_as(path: str, who: RunAs) -> bool:
    test = shutil.which("test") or "/usr/bin/test"
    argv = [test, "-d", path, "-a", "-x", path]
    try:
        done = subprocess.run(
            argv,
            user=who.uid,
            group=who.gid,
            extra_groups=list(who.groups),
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0
