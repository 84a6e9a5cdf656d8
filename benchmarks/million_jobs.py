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

Two offered loads are run. At 0.7 the cluster rarely fills: few jobs wait,
and a pass looks at a handful of jobs. At 0.8 it settles, after a few days,
into a saturated state where jobs wait and a preemptive policy re-ranks the
~500 running and waiting jobs at every event. The 100k trace ends
before that state is reached, the 300k and 1M traces spend most of their
time in it: at 0.8 the 1M/100k ratio measures the change of state, and the
1M/300k ratio (target: at most 12 x 1/3 = 4x) the simulator's own growth.
The table prints each run's mean number of waiting jobs (sampled after every
pass; "wait") so the state is visible: near 0 where the cluster has room,
tens where it is full and a preemptive policy re-ranks every running and
waiting job at each event.

    python benchmarks/million_jobs.py [--sizes 100000,300000,1000000]
        [--loads 0.7,0.8] [--policies fifo,las,tiresias-las] [--dir DIR] [--json out.json]
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
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--trace", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.trace)))
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
    print(f"\nHelios-like traces on {CLUSTER} ({GPUS} GPUs)")
    head = ("load", "policy", "jobs", "wait", "load s", "sim s", "s/100k", "x 100k", "x 300k")
    print(
        "{:>4} {:14} {:>9} {:>6} {:>6} {:>7} {:>6} {:>6} {:>6} {:>7} {}".format(
            *head[:4], *head[4:], "peak MB", ""
        )
    )
    first: dict[tuple[float, str], tuple[int, float]] = {}
    seen: dict[tuple[float, str, int], float] = {}
    for r in rows:
        total = float(r["load_s"]) + float(r["sim_s"])
        jobs = int(r["jobs"])
        key = (float(r["target_load"]), str(r["policy"]))
        first.setdefault(key, (jobs, total))
        seen[(*key, jobs)] = total
        base_jobs, base_s = first[key]
        growth = total / base_s
        mid = seen.get((*key, 300_000))
        from_mid = f"{total / mid:6.2f}" if mid and jobs > 300_000 else "     -"
        allowed = MAX_RATIO * jobs / (10 * base_jobs)
        ok = (
            growth <= allowed
            if key[0] < 0.8
            else (not mid or total / mid <= MAX_RATIO * jobs / (10 * 300_000))
        )
        ok = ok and int(r["peak_mb"]) < MAX_MB
        print(
            f"{key[0]:>4g} {key[1]:14} {jobs:>9,} {r['mean_waiting']:>6} {r['load_s']:>6} "
            f"{r['sim_s']:>7} {total / jobs * 100_000:>6.1f} {growth:>6.2f} {from_mid} "
            f"{r['peak_mb']:>7} {'meets' if ok else 'misses'}"
        )
    print(
        f"(targets: cost grows linearly, at most {MAX_RATIO:g}x per 10x the jobs, against the "
        f"100k run at load 0.7 and the 300k run at 0.8; peak memory < {MAX_MB} MB)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
