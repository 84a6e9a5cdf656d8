"""Telling systemd how the service is (``Type=notify`` and ``WatchdogSec=``), as
``sd_notify(3)`` does, with the standard library: a datagram to the socket
systemd names in ``NOTIFY_SOCKET``.

``READY=1`` once the store is recovered and the API answers (so a unit ordered
after corral's starts when it can be used), ``WATCHDOG=1`` at half the
watchdog's interval while the scheduler's loop keeps making passes (a loop that
hangs stops the pings, and systemd restarts the service; running jobs go on
and are adopted), ``STOPPING=1`` when it stops. Without ``NOTIFY_SOCKET``
(not under systemd, or another ``Type=``) nothing is sent.
"""

from __future__ import annotations

import contextlib
import os
import socket


def notify(state: str) -> bool:
    """Send ``state`` (``READY=1``, ``STATUS=...``; lines) to systemd; False when not
    under a notifying systemd, or the send failed."""
    where = os.environ.get("NOTIFY_SOCKET")
    if not where or where[0] not in "/@":
        return False
    address = "\0" + where[1:] if where[0] == "@" else where  # (an abstract socket)
    with (
        contextlib.suppress(OSError),
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock,
    ):
        sock.sendto(state.encode(), address)
        return True
    return False


def watchdog_interval() -> float | None:
    """Seconds between the watchdog's pings: half systemd's ``WatchdogSec`` (None: no
    watchdog for this process)."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) <= 0 or (pid.isdigit() and int(pid) != os.getpid()):
        return None
    return int(usec) / 2e6
