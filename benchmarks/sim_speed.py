"""Simulator speed and memory on the full Philly trace.

Runs each policy on all 82,247 Philly jobs on Philly's cluster scaled to 0.17
(422 GPUs, offered load 0.89), each in a fresh process so its peak memory is
its own, and prints wall time, events per second and peak resident memory,
each against its target on a 2-core machine: < 1 GB per run; <= 10 s for
las, tiresias-las and tiresias-gittins, <= 15 s for gandiva and philly
(gandiva runs with Gavel job types and Gandiva's 0.1 s suspend/resume, as in
the validation; antman with Gavel job types, so that pairs have measured
co-location speeds and footprints); fifo, hived, antman and liquid have no target of
their own.

It also times the first 10,000 Philly jobs on 64 GPUs (16 nodes x 4), the
scale at which Tiresias' published simulator is quoted at 25-35 s, and prints
corral's time per job against that quoted figure. That ratio is against a
quoted number, not a run of the other simulator on this machine.

    python benchmarks/sim_speed.py [--policies fifo,las] [--json out.json]

Absolute times move with the host (the same code ran 1.6x slower on the same
machine two weeks apart), so a slowdown is best seen as a ratio. ``--against REV``
checks out REV (a commit, tag or branch) beside this tree and runs each policy
on the whole trace with both, alternately (``--rounds`` times each, each run in
a fresh process with its own checkout's script and package), and prints each
policy's median time under each and their ratio (this / REV: above 1 is slower):

    python benchmarks/sim_speed.py --against e1ccc9e --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIRESIAS_QUOTED_S = (25.0, 35.0)  # for 10,000 jobs on 64 GPUs
TARGET_S = {
    "las": 10.0,
    "tiresias-las": 10.0,
    "tiresias-gittins": 10.0,
    "gandiva": 15.0,
    "philly": 15.0,
}
"""Seconds on the full trace, per policy (fifo has no target of its own)."""
TARGET_MB = 1024


def one(policy: str, cluster: str, scale: float, max_jobs: int | None) -> dict:
    from corral.model.cluster_specs import load_cluster
    from corral.sim.run import RunSpec, simulate
    from corral.traces import TraceOptions, load_trace

    t0 = time.perf_counter()
    machines = load_cluster(cluster, scale=scale)
    gandiva = policy == "gandiva"
    typed = policy in ("gandiva", "antman")
    options = TraceOptions(max_jobs=max_jobs, job_types="gavel" if typed else None)
    jobs = load_trace("philly", machines.total_gpus, options)
    load_s = time.perf_counter() - t0
    result = simulate(jobs, machines, RunSpec(policy, switch_cost="gandiva" if gandiva else None))
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "policy": policy,
        "cluster": machines.describe(),
        "jobs": len(jobs),
        "offered_load": round(jobs.offered_load(machines.total_gpus), 3),
        "load_s": round(load_s, 2),
        "sim_s": round(result.wall_s, 2),
        "events": result.events,
        "events_per_s": round(result.events / result.wall_s),
        "preemptions": int(result.state.preemptions.sum()),
        "peak_rss_mb": round(peak_kb / 1024),
    }


def spawn(policy: str, cluster: str, scale: float, max_jobs: int | None, tree: Path = ROOT) -> dict:
    """One run in a fresh process, with ``tree``'s own script and package."""
    script = tree / "benchmarks" / "sim_speed.py"
    args = [sys.executable, str(script), "--one", policy, "--cluster", cluster, "--scale",
            str(scale)]  # fmt: skip
    if max_jobs:
        args += ["--max-jobs", str(max_jobs)]
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run(args, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def against(rev: str, policies: list[str], rounds: int) -> None:
    """Each policy under this tree and under ``rev``, alternately: times and ratio."""
    with tempfile.TemporaryDirectory(prefix="corral-against-") as scratch:
        other = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(other), rev],
                       check=True, capture_output=True)  # fmt: skip
        try:
            for tree in (ROOT, other):  # compiled first, as an install would be
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "src")],
                               check=True, capture_output=True)  # fmt: skip
            ask = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
            head = subprocess.run(ask, capture_output=True, text=True, check=True).stdout.strip()
            print(f"Full Philly trace on Philly x 0.17: this tree ({head}) against {rev}, "
                  f"{rounds} run(s) each, alternately; median seconds")  # fmt: skip
            print(f"{'policy':16} {'this':>8} {rev[:12]:>12} {'ratio':>7}")
            worst = 0.0
            for policy in policies:
                mine: list[float] = []
                theirs: list[float] = []
                for _ in range(rounds):
                    mine.append(spawn(policy, "philly", 0.17, None)["sim_s"])
                    theirs.append(spawn(policy, "philly", 0.17, None, other)["sim_s"])
                a, b = statistics.median(mine), statistics.median(theirs)
                worst = max(worst, a / b)
                print(f"{policy:16} {a:>8.2f} {b:>12.2f} {a / b:>7.3f}", flush=True)
            print(f"slowest ratio: {worst:.3f} (above 1.05: more than 5% slower than {rev})")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)],
                           check=False, capture_output=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--policies",
        default="fifo,las,philly,tiresias-las,tiresias-gittins,gandiva,hived,antman,liquid",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--against", metavar="REV", help="compare with an earlier commit")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each with --against")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--cluster", default="philly", help=argparse.SUPPRESS)
    parser.add_argument("--scale", type=float, default=0.17, help=argparse.SUPPRESS)
    parser.add_argument("--max-jobs", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.cluster, args.scale, args.max_jobs)))
        return
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.against:
        against(args.against, names, args.rounds)
        return
    rows = [spawn(p, "philly", 0.17, None) for p in names]
    print(f"Full Philly trace on Philly x 0.17 (peak memory target: < {TARGET_MB} MB)")
    head = ("policy", "jobs", "load", "sim s", "target s", "events/s", "preempt", "peak MB", "")
    print("{:16} {:>7} {:>5} {:>7} {:>8} {:>9} {:>9} {:>8} {}".format(*head))
    for r in rows:
        target = TARGET_S.get(r["policy"])
        met = r["sim_s"] <= target if target is not None else True
        met &= r["peak_rss_mb"] < TARGET_MB
        verdict = "" if target is None else ("meets" if met else "misses")
        print(
            f"{r['policy']:16} {r['jobs']:>7} {r['offered_load']:>5} {r['sim_s']:>7} "
            f"{target or '-':>8} {r['events_per_s']:>9,} {r['preemptions']:>9,} "
            f"{r['peak_rss_mb']:>8} {verdict}"
        )
    small = [spawn(p, "uniform:16x4:P100", 1.0, 10_000) for p in ("fifo", "las")]
    lo, hi = (t / 10_000 * 1000 for t in TIRESIAS_QUOTED_S)
    print(f"\nFirst 10,000 Philly jobs on 64 GPUs (load {small[0]['offered_load']}):")
    print(f"Tiresias' simulator, quoted: 25-35 s for 10,000 jobs ({lo:.1f}-{hi:.1f} ms/job)")
    for r in small:
        per_job_ms = r["sim_s"] / r["jobs"] * 1000
        print(
            f"  corral {r['policy']:5}: {r['sim_s']:6.2f} s, {per_job_ms:.3f} ms/job, "
            f"{r['preemptions']:,} preemptions: {lo / per_job_ms:.0f}-{hi / per_job_ms:.0f}x "
            "faster per job than the quoted figure (not re-measured here)"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"philly": rows, "tiresias_scale": small}, fh, indent=2)


if __name__ == "__main__":
    main()
