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


@contextlib.contextmanager
def gpu_lock(folder: Path, exclusive: bool) -> Iterator[None]:
    if not exclusive:
        yield
        return
    gpu = os.environ.get("CORRAL_GPU_IDS", "0").split(",")[0]
    with open(folder / f"gpu-{gpu}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
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
