"""A million jobs: simulator cost and memory on Helios-like traces of 100k, 300k, 1M jobs.

Writes a synthetic trace in Helios' ``cluster_log.csv`` format for each size
(so loading a big file a chunk at a time is measured too), then runs fifo,
las and tiresias-las on each, every run in a fresh process so its peak
memory is its own, and prints load and simulation seconds, seconds per 100k
jobs and peak resident memory. The targets: cost grows linearly (the 1M run
takes at most 12x the 100k run, policy by policy) and every run stays under
4 GB.

The traces are Helios-like, not Helios: GPU demands drawn with the shape the
Helios paper reports for its clusters (most jobs on 1 GPU, a few multi-node
ones up to 64 GPUs), log-normal run times with a median of 10 minutes and a
tail to two days, Poisson arrivals on a Saturn-sized cluster (262 nodes x 8
GPUs). Every size has the same arrival rate, so a bigger trace is a longer
stretch of the same cluster's life, not a busier one: linear cost is then the
right expectation where the cluster's state is the same throughout.

Two offered loads are run. At 0.7 the cluster has room: hardly a job waits,
the state is the same from the first day to the last, and the linear target
applies. At 0.8 it does not: with gangs of up to 64 GPUs, FIFO's
head-of-line blocking and LAS' preemptions leave less than 0.8 of the
cluster usable, so the queue grows for as long as jobs keep arriving (the
table's "wait" column: the mean number of waiting jobs, sampled after every
pass). A policy that looks at every waiting job at every event then costs
more per job the longer the trace, as any simulator of that policy would;
those rows show what an overloaded trace costs, and get no verdict.

    python benchmarks/million_jobs.py [--sizes 100000,300000,1000000]
        [--loads 0.7,0.8] [--policies fifo,las,tiresias-las] [--dir DIR] [--json out.json]
    python benchmarks/million_jobs.py --table out.json   # the table of a saved run
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

CLUSTER = "uniform:262x8:V100"
GPUS = 262 * 8
LOAD = 0.8
MEDIAN_RUN_S = 600.0
RUN_SIGMA = 1.8
LONGEST_RUN_S = 2 * 86400
MAX_RATIO = 12.0
STABLE_LOADS = (0.7,)
"""Loads at which the cluster's state does not drift, where the linear target applies."""
MAX_MB = 4096
DEMANDS = np.array([1, 2, 4, 8, 16, 32, 64])
DEMAND_SHARE = np.array([0.68, 0.10, 0.09, 0.09, 0.025, 0.01, 0.005])


def helios_like(n: int, load: float = LOAD, seed: int = 0) -> pd.DataFrame:
    """``n`` GPU jobs in Helios' columns, arriving at one fixed rate."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice(DEMANDS, size=n, p=DEMAND_SHARE / DEMAND_SHARE.sum())
    run = _run_times(rng, n).round()
    # The mean GPU-seconds per job of this mix (from a large fixed sample, so every
    # size gets the same arrival rate).
    probe = np.random.default_rng(12345)
    pg = probe.choice(DEMANDS, size=200_000, p=DEMAND_SHARE / DEMAND_SHARE.sum())
    pr = _run_times(probe, 200_000)
    rate = load * GPUS / float((pg * pr).mean())
    submit = np.cumsum(rng.exponential(1.0 / rate, size=n))
    start = pd.Timestamp("2020-04-01") + pd.to_timedelta(submit.round(), unit="s")
    fmt = "%Y-%m-%d %H:%M:%S"
    return pd.DataFrame(
        {
            "job_id": np.arange(1, n + 1),
            "user": "u" + pd.Series(rng.integers(0, 300, size=n)).astype(str),
            "vc": "vc" + pd.Series(rng.integers(0, 20, size=n)).astype(str),
            "gpu_num": gpus,
            "cpu_num": gpus * 4,
            "node_num": np.maximum(1, gpus // 8),
            "state": "COMPLETED",
            "submit_time": start.strftime(fmt),
            "start_time": start.strftime(fmt),
            "end_time": (start + pd.to_timedelta(run, unit="s")).strftime(fmt),
            "duration": run.astype(np.int64),
            "queue": 0,
        }
    )


def _run_times(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.clip(np.exp(rng.normal(np.log(MEDIAN_RUN_S), RUN_SIGMA, size=n)), 10, LONGEST_RUN_S)


def one(policy: str, path: str) -> dict[str, object]:
    from corral.model.cluster_specs import load_cluster
    from corral.sim.run import RunSpec, simulate
    from corral.traces import TraceOptions, load_trace

    machines = load_cluster(CLUSTER)
    t0 = time.perf_counter()
    jobs = load_trace(path, machines.total_gpus, TraceOptions(fmt="helios"))
    load_s = time.perf_counter() - t0
    result = simulate(jobs, machines, RunSpec(policy))
    state = result.state
    finished = int(np.isfinite(state.finish_time).sum())
    line = result.timeline
    waiting = np.asarray(line.pending, dtype=float)
    running = np.asarray(line.running, dtype=float)
    return {
        "policy": policy,
        "jobs": len(jobs),
        "finished": finished,
        "offered_load": round(jobs.offered_load(machines.total_gpus), 3),
        "load_s": round(load_s, 2),
        "sim_s": round(result.wall_s, 2),
        "events": result.events,
        "preemptions": int(state.preemptions.sum()),
        "mean_running": round(float(running.mean()), 1) if len(running) else 0.0,
        "mean_waiting": round(float(waiting.mean()), 1) if len(waiting) else 0.0,
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def spawn(policy: str, path: str) -> dict[str, object]:
    args = [sys.executable, __file__, "--one", policy, "--trace", path]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,300000,1000000")
    parser.add_argument("--loads", default="0.7,0.8")
    parser.add_argument("--policies", default="fifo,las,tiresias-las")
    parser.add_argument("--dir", help="where the traces are written (default: a temporary one)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--table", help="print the table of a run saved with --json, and stop")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--trace", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.trace)))
        return
    if args.table:
        print_table(json.loads(Path(args.table).read_text()))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(args.dir or scratch)
        where.mkdir(parents=True, exist_ok=True)
        for load in loads:
            for n in sizes:
                path = where / f"helios-like-{load:g}-{n}.csv"
                if not path.exists():
                    helios_like(n, load).to_csv(path, index=False)
                print(f"load {load:g}, {n:,} jobs: {path.name}", flush=True)
                for policy in policies:
                    row = {**spawn(policy, str(path)), "target_load": load}
                    rows.append(row)
                    print(
                        f"  {policy:14} load {row['load_s']:>6} s  sim {row['sim_s']:>7} s  "
                        f"peak {row['peak_mb']:>5} MB  running {row['mean_running']}  "
                        f"waiting {row['mean_waiting']}",
                        flush=True,
                    )
                if args.json:  # saved as it goes: a long run stopped early keeps its rows
                    Path(args.json).write_text(json.dumps(rows, indent=2))
    print_table(rows)


def print_table(rows: list[dict[str, object]]) -> None:
    """Markdown: seconds per 100k jobs and growth against the smallest run, per policy."""
    print(f"Helios-like traces on {CLUSTER} ({GPUS} GPUs)\n")
    print(
        "| load | policy | jobs | wait | load (s) | sim (s) | s per 100k | x smallest | peak MB | |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    first: dict[tuple[float, str], tuple[int, float]] = {}
    for r in rows:
        total = float(r["load_s"]) + float(r["sim_s"])  # type: ignore[arg-type]
        jobs = int(r["jobs"])  # type: ignore[call-overload]
        load = float(r["target_load"])  # type: ignore[arg-type]
        key = (load, str(r["policy"]))
        base_jobs, base_s = first.setdefault(key, (jobs, total))
        growth = total / base_s
        verdict = ""
        if load in STABLE_LOADS:
            ok = growth <= MAX_RATIO * jobs / (10 * base_jobs)
            ok = ok and int(r["peak_mb"]) < MAX_MB  # type: ignore[call-overload]
            verdict = "meets" if ok else "misses"
        print(
            f"| {load:g} | {key[1]} | {jobs:,} | {r['mean_waiting']} | {r['load_s']} | "
            f"{r['sim_s']} | {total / jobs * 100_000:.1f} | {growth:.2f} | {r['peak_mb']} | "
            f"{verdict} |"
        )
    print(
        f"\nTargets, at load {', '.join(f'{x:g}' for x in STABLE_LOADS)}: at most {MAX_RATIO:g}x "
        f"the smallest run's seconds per 10x the jobs, peak memory < {MAX_MB} MB."
    )


if __name__ == "__main__":
    main()
