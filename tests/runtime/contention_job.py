"""A job for the GPU-sharing tests: ``steps`` iterations of ``step_time`` seconds
each, reported through corral.train (heartbeats with throughput; pauses at an
iteration boundary when time-sliced; checkpoints when stopped).

``--exclusive`` makes each step hold its GPU exclusively (a lock file per GPU
id), as a compute-bound job holds a real GPU's SMs: two such jobs packed on
one GPU take turns step by step, so each runs at about half its speed alone.
Without it a step only waits (data loading), and packed jobs keep their speed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from corral.train import Session


def others_waiting(folder: Path, gpu: str) -> bool:
    """Whether another live process, not paused, has asked for this GPU's lock."""
    for mark in folder.glob(f"gpu-{gpu}.want.*"):
        pid = int(mark.name.rsplit(".", 1)[1])
        if pid == os.getpid():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # it has ended
        if stat[stat.rfind(")") + 2] not in "Tt":  # stopped: it waits for its turn
            return True
    return False


@contextlib.contextmanager
def gpu_lock(folder: Path, exclusive: bool) -> Iterator[None]:
    """Hold the GPU for one step. A GPU shares its time fairly between two
    contexts, but a bare flock does not: the holder can take it straight back
    before a waiter woken on a loaded machine gets the CPU. So a process first
    lets anyone already waiting go ahead (at most half a second, in case a
    waiter died), then says it waits, then takes the lock."""
    if not exclusive:
        yield
        return
    gpu = os.environ.get("CORRAL_GPU_IDS", "0").split(",")[0]
    deadline = time.monotonic() + 0.5
    while others_waiting(folder, gpu) and time.monotonic() < deadline:
        time.sleep(0.001)
    want = folder / f"gpu-{gpu}.want.{os.getpid()}"
    want.touch()
    with open(folder / f"gpu-{gpu}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        want.unlink()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--step-time", type=float, default=0.02)
    parser.add_argument("--exclusive", action="store_true")
    parser.add_argument("--locks", type=Path, default=Path("/tmp"))
    args = parser.parse_args()
    session = Session()
    step = session.restore()
    while step < args.steps:
        with gpu_lock(args.locks, args.exclusive):
            time.sleep(args.step_time)
        step += 1
        session.report(step)
        if session.should_stop and step < args.steps:
            session.stop(step)
    session.finish(step)


if __name__ == "__main__":
    main()
