"""A 30-run sweep on the Philly trace: Ray tasks against the same runs one after another.

The grid is 2 policies (fifo, las) x 3 loads (0.7, 0.9, 1.1) x 5 seeds
(job failures at 2% per attempt, so seeds differ) on the first N Philly jobs
(default 20,000) on Philly's cluster scaled to 0.05 (128 GPUs). Both ways run
the same `corral sweep` command, through its command line, so trace loading
and the report are counted too; only the runner differs (``--runner serial``
against ``--runner ray``, one worker per core). It prints both wall times, the
speed-up, and the speed-up per core (the ratio over the cores used; 1.0 would
be perfect scaling), and checks that both produced the same figures.

    python benchmarks/sweep.py [--jobs 20000] [--workers N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd


def sweep(out: Path, runner: str, jobs: int, workers: int) -> float:
    args = [sys.executable, "-m", "corral.cli", "sweep", "--policies", "fifo,las"]
    args += ["--loads", "0.7,0.9,1.1", "--seeds", "0..4", "--trace", "philly"]
    args += ["--max-jobs", str(jobs), "--cluster", "philly", "--cluster-scale", "0.05"]
    args += ["--failure-rate", "0.02", "--no-progress", "--runner", runner]
    args += ["-j", str(workers), "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def figures(out: Path) -> pd.DataFrame:
    frame = pd.read_csv(out / "results.csv").drop(columns=["wall_s"])
    return frame.sort_values("run").reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        serial = sweep(root / "serial", "serial", opts.jobs, 1)
        on_ray = sweep(root / "ray", "ray", opts.jobs, opts.workers)
        same = figures(root / "serial").equals(figures(root / "ray"))
        runs = len(figures(root / "ray"))
    speedup = serial / on_ray
    print(f"{runs} runs on the first {opts.jobs:,} Philly jobs, Philly x 0.05 (128 GPUs)")
    print(f"  one after another : {serial:7.1f} s")
    print(f"  ray, {opts.workers} workers   : {on_ray:7.1f} s")
    print(f"  speed-up          : {speedup:7.2f}x ({speedup / opts.workers:.2f} per core)")
    print(f"  same figures      : {'yes' if same else 'NO'}")
    if opts.json:
        record = {
            "runs": runs,
            "jobs": opts.jobs,
            "workers": opts.workers,
            "serial_s": round(serial, 1),
            "ray_s": round(on_ray, 1),
            "speedup": round(speedup, 2),
            "speedup_per_core": round(speedup / opts.workers, 2),
            "same_figures": same,
        }
        opts.json.write_text(json.dumps(record, indent=2) + "\n")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
