"""Importing Ray for corral: an optional extra, kept on loopback when it is local.

Ray turns a loopback address (``127.0.0.1:6379``) into the machine's outward
IP before connecting, so a Ray instance that listens on 127.0.0.1 only (as
every instance corral starts does) could not be reached by address. Ray's
own single-machine setting keeps loopback addresses as they are; it is set
before Ray is first imported, for local instances and loopback addresses
only (a real cluster's address is used as Ray resolves it).
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from types import ModuleType

from corral.errors import CorralError

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
SINGLE_MACHINE_SETTING = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
AUTH_MODE_SETTING = "RAY_AUTH_MODE"


def is_local(address: str | None) -> bool:
    """True for no address (a local instance) or one on loopback."""
    if not address:
        return True
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in LOOPBACK_HOSTS


TOKEN_SETTINGS = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
"""Where Ray reads its token from, when not its default file."""


def default_token_path() -> Path:
    """Ray's own token file (``~/.ray/auth_token``)."""
    return Path.home() / ".ray" / "auth_token"


def has_token() -> bool:
    """Whether this user has a Ray token where Ray's clients look for one."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    given = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(given).is_file() if given else default_token_path().is_file()


def ensure_token() -> None:
    """Make Ray's token file when there is none, readable by this user only.

    ``ray.init`` makes one itself when it starts a local instance, but ``ray
    start --head`` (how the service starts its own) refuses to run without one
    since Ray 2.60; on a fresh machine there is none yet."""
    if any(os.environ.get(name) for name in TOKEN_SETTINGS):
        return
    path = default_token_path()
    if path.exists():
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    os.replace(tmp, path)


def import_ray(address: str | None, what: str = "this", started_head: bool = False) -> ModuleType:
    """Ray, ready to start or reach ``address``; a clear error when it is not installed.

    ``started_head``: the caller reaches a Ray instance it starts with ``ray
    start`` (the service's own), whose default is Ray's token authentication:
    the token is Ray's own file in the user's home, which only that user can
    use, and this process must say it uses it before Ray is first imported.
    Reaching a cluster at ``address`` that it did not start, it uses token
    authentication when the user has a token, as Ray's command line does
    (``RAY_AUTH_MODE`` set by the user decides instead).
    """
    if is_local(address):
        os.environ.setdefault(SINGLE_MACHINE_SETTING, "0")
    if started_head:
        os.environ.setdefault(AUTH_MODE_SETTING, "token")
        if os.environ[AUTH_MODE_SETTING] == "token":
            ensure_token()
    elif (
        address
        and AUTH_MODE_SETTING not in os.environ
        and "ray" not in sys.modules  # (Ray reads the mode once, when first imported:
        and has_token()  # set after, it would reach the processes Ray starts, not Ray)
    ):
        # a cluster someone started (`ray start --head`: token authentication by
        # default since Ray 2.60): as Ray's own command line does, a token this user
        # has (Ray's file, or RAY_AUTH_TOKEN/RAY_AUTH_TOKEN_PATH) means token mode
        os.environ[AUTH_MODE_SETTING] = "token"
    try:
        import ray
    except ImportError:
        raise CorralError(f"{what} needs Ray: pip install 'corral[ray]'") from None
    return ray
