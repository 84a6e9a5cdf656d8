"""A PostgreSQL server for the store's tests, so the service is tested on both backends.

``CORRAL_TEST_POSTGRES`` names a server (a SQLAlchemy URL of a role that may
create databases). Without it, where PostgreSQL's programs are installed, a
throwaway server is started in a temporary folder, listening on a Unix socket
only (never a TCP port), and stopped at the end of the session. Each test gets
a database of its own, dropped afterwards.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ENV = "CORRAL_TEST_POSTGRES"
WHY_SKIPPED = (
    f"no PostgreSQL: set {ENV}=postgresql+psycopg://user@host/db, "
    "or install PostgreSQL and psycopg (pip install 'corral[postgres]')"
)


def _driver_installed() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True


def _programs() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (Debian keeps them off PATH)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


@contextmanager
def throwaway_server() -> Iterator[str | None]:
    """Start a private server (as the ``postgres`` user when run as root); its URL."""
    bin_dir = _programs()
    if bin_dir is None or not _driver_installed():
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="corral-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        if shutil.which("runuser") is None:
            yield None
            return
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    env = {**os.environ, "LC_ALL": "C"}
    try:
        subprocess.run(
            [
                *as_user,
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "corral",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            env=env,
            timeout=120,
        )
        options = f"-c listen_addresses='' -k {sock} -c fsync=off"
        start = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options]
        # the server's output goes to a log file: pipes it inherited would stay open
        subprocess.run(
            [*start, "-l", str(root / "server.log"), "-w", "start"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(root, ignore_errors=True)
        yield None
        return
    try:
        yield f"postgresql+psycopg://corral@/postgres?host={sock}"
    finally:
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            env=env,
        )
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def server() -> Iterator[str | None]:
    """The configured server, else a throwaway one, else None."""
    configured = os.environ.get(ENV)
    if configured:
        yield configured
        return
    with throwaway_server() as url:
        yield url


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """A new, empty database on the server; dropped (connections and all) afterwards."""
    name = f"corral_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
