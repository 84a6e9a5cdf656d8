"""A job that tries to outlive itself: it starts workers that leave its session
(``setsid``) and, whenever their parent dies, fork two more (up to a bound, so a
failed test does not leave a fork bomb behind); then it exits 0 at once.

``python refork_chain.py MARKER`` (the marker names its processes for the test);
``python refork_chain.py MARKER --stay`` keeps its main process running, deaf to
SIGTERM; ``python refork_chain.py --count MARKER`` prints how many live processes carry it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

GENERATIONS = 6


def worker(generation: int) -> None:
    os.setsid()
    parent = os.getppid()
    deadline = time.monotonic() + 120  # a bound, should containment fail
    while time.monotonic() < deadline:
        if os.getppid() != parent and generation < GENERATIONS:
            for _ in range(2):
                if os.fork() == 0:
                    worker(generation + 1)
            parent = os.getppid()
        time.sleep(0.005)
    os._exit(0)


def count(marker: str) -> int:
    found = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in argv and b"--count" not in argv and state not in ("Z", "X"):
            found += 1
    return found


if __name__ == "__main__":
    if sys.argv[1] == "--count":
        print(count(sys.argv[2]))
        sys.exit(3 if count(sys.argv[2]) else 0)
    for _ in range(3):
        if os.fork() == 0:
            worker(0)
    if "--stay" in sys.argv:  # the main process too ignores a stop: only a kill ends it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(120)
    time.sleep(0.3)
    sys.exit(0)
