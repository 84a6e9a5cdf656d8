"""One fingerprint per policy of the schedule it makes on the Philly trace.

Refactoring must not change a schedule. This runs every registered policy on
the Philly trace (Philly's cluster scaled to 0.17, as ``sim_speed.py`` does)
and Hare's round planners on a Gavel-typed prefix of it, and prints, per
policy, a SHA-256 over every job's first start, finish and preemption count
(for the round planners: its number of tasks), times rounded to the
microsecond, so that only a changed decision changes it.
Run it before and after a change and compare the two files:

    python benchmarks/schedule_hashes.py --json before.json
    ... change ...
    python benchmarks/schedule_hashes.py --json after.json --compare before.json

Policies whose passes solve an LP or a matching over the whole queue (the Gavel
family, Themis, AlloX, Optimus, Pollux) take minutes to hours on 82,247 jobs;
they run on the first ``--prefix`` jobs instead, and the output says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SLOW = ("gavel", "themis", "allox", "optimus", "pollux")
"""Name prefixes of policies that run on a prefix of the trace."""
ROUND_JOBS = 200
"""Jobs the round planners see (their LP re-plans at every arrival)."""


def fingerprint(first_start, finish, preemptions) -> str:
    import numpy as np

    digest = hashlib.sha256()
    for column in (first_start, finish):
        rounded = np.round(np.asarray(column, dtype=np.float64), 6)
        digest.update(np.nan_to_num(rounded, nan=-1.0).tobytes())
    digest.update(np.asarray(preemptions, dtype=np.int64).tobytes())
    return digest.hexdigest()


def one(policy: str, prefix: int) -> dict:
    import numpy as np

    from corral.model.cluster_specs import load_cluster
    from corral.sim.run import RunSpec, simulate, simulate_rounds
    from corral.traces import TraceOptions, load_trace

    t0 = time.perf_counter()
    machines = load_cluster("philly", scale=0.17)
    rounds = policy in _round_planners()
    typed = rounds or policy in ("gandiva", "antman") or policy.startswith(SLOW)
    max_jobs = ROUND_JOBS if rounds else (prefix if policy.startswith(SLOW) else None)
    options = TraceOptions(max_jobs=max_jobs, job_types="gavel" if typed else None)
    jobs = load_trace("philly", machines.total_gpus, options)
    spec = RunSpec(policy, switch_cost="gandiva" if policy == "gandiva" else None)
    if rounds:
        result = simulate_rounds(jobs, machines, spec)
        start, finish = result.first_start, result.finish
        preempted = np.bincount([t.job for t in result.tasks], minlength=len(finish))
    else:
        sim = simulate(jobs, machines, spec)
        start, finish = sim.state.first_start, sim.state.finish_time
        preempted = sim.state.preemptions
    return {
        "policy": policy,
        "jobs": len(jobs),
        "hash": fingerprint(start, finish, preempted),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _round_planners() -> list[str]:
    from corral.policies.rounds.planners import ROUND_PLANNERS

    return list(ROUND_PLANNERS)


def _policies() -> list[str]:
    from corral.policies import POLICIES

    return [name for name in POLICIES if name != "gavel"] + _round_planners()


def spawn(policy: str, prefix: int) -> dict:
    args = [sys.executable, __file__, "--one", policy, "--prefix", str(prefix)]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        return {"policy": policy, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", help="comma-separated (default: every one)")
    parser.add_argument("--prefix", type=int, default=3000, help="jobs for the slow policies")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="write the fingerprints here")
    parser.add_argument("--compare", help="an earlier --json file: say which differ")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.prefix)))
        return
    names = args.policies.split(",") if args.policies else _policies()
    with ThreadPoolExecutor(args.workers) as pool:
        rows = list(pool.map(lambda name: spawn(name, args.prefix), names))
    before = {}
    if args.compare:
        with open(args.compare, encoding="utf-8") as fh:
            before = {r["policy"]: r.get("hash") for r in json.load(fh)}
    changed = 0
    for row in rows:
        mark = ""
        if before:
            same = before.get(row["policy"]) == row.get("hash")
            mark = "  same" if same else "  CHANGED"
            changed += not same
        what = row.get("hash", f"error: {row.get('error')}")[:16]
        seconds = row.get("seconds", "-")
        print(f"{row['policy']:34} {row.get('jobs', '-'):>7} {what}  {seconds} s{mark}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    if before:
        print(f"{len(rows) - changed} of {len(rows)} schedules unchanged")
        sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
