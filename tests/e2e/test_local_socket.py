"""The service's Unix socket: the kernel says who calls (SO_PEERCRED), so a local
user needs no token and cannot be locked out by another's guesses; root is the
first admin; a uid that is no user's is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.api.client import Client
from corral.errors import CorralError, PermissionDenied
from corral.testing.service_process import ServiceProcess
from tests.runtime.harness import TOKENS

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="calling as another uid needs root")


@pytest.fixture
def where() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="corral-socket-"))
    folder.chmod(0o755)  # (reachable by every local user, as /run/corral is)
    yield folder / "corral.sock"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def service(tmp_path: Path, where: Path) -> Iterator[ServiceProcess]:
    made = ServiceProcess(
        tmp_path, "fifo", users=TOKENS, gpus=[{"type": "V100", "count": 1}],
        socket=str(where), unix_users={"bob": "nobody"}, require_reachable_python=False,
        jobs_dir=str(where.parent / "jobs"),
    )  # fmt: skip
    made.start()
    yield made
    made.close()


def test_the_service_owner_calls_without_a_token_and_is_never_locked_out(
    service: ServiceProcess, where: Path
) -> None:
    assert where.is_socket() and where.stat().st_mode & 0o777 == 0o666
    local = Client(socket=str(where))  # no token at all
    me = os.geteuid()
    job = local.submit({"command": ["true"], "gpus": 1})
    assert job["user"] == "root" or me != 0  # root (or the service's own uid): the first admin
    guesser = Client(service.url, "wrong-token-000")
    for _ in range(25):  # the loopback address locked out ...
        with pytest.raises(CorralError):
            guesser.jobs()
    with pytest.raises(CorralError, match="too many failed tokens"):
        Client(service.url, TOKENS["bob"]).jobs()  # (bob never called from there)
    assert local.job(job["id"])["id"] == job["id"]  # ... the socket never
    assert "no token needed" in service.log.read_text()


@needs_root
def test_a_local_user_is_known_by_uid_and_a_stranger_is_refused(
    service: ServiceProcess, where: Path
) -> None:
    call = (
        "import sys; from corral.api.client import Client; "
        f"print(Client(socket={str(where)!r}).submit({{'command': ['true'], 'gpus': 1}})['user'])"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    as_nobody = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
         "-c", call], capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    if "Permission denied" in as_nobody.stderr and "python" in as_nobody.stderr.lower():
        pytest.skip("this Python is not reachable by 'nobody'")
    assert as_nobody.returncode == 0 and as_nobody.stdout.strip() == "bob", as_nobody.stderr
    as_daemon = subprocess.run(
        ["setpriv", "--reuid=daemon", "--regid=daemon", "--clear-groups", sys.executable,
         "-c", call], capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    # (daemon: a uid that no user of this service has)
    assert as_daemon.returncode != 0 and "is no user of this service" in as_daemon.stderr


def test_the_401_for_a_stranger_is_a_permission_error() -> None:
    assert PermissionDenied.exit_code == 5
