"""Heterogeneity-aware against agnostic Gavel policies; writes docs/validation/gavel.md.

Gavel's setting: a cluster of equal numbers of V100, P100 and K80 GPUs
(36 of each, servers of 4) and Gavel's workload (uniform job types, run
times 60 x 10^U(1.5, 3) s w.p. 0.8 else 60 x 10^U(3, 4) s, Poisson arrivals),
single-GPU jobs at 3 and 5 jobs/hour and multi-GPU jobs (1/2/4/8 GPUs) at
1.5 jobs/hour, 300 jobs each. Policies: max-min fairness aware and agnostic
(Gavel's LAS pair), finish-time fairness, min makespan, max throughput and
the space-sharing max-min variant, with fifo for scale. Gavel reports its
heterogeneity-aware policies up to 3.5x better in average JCT / makespan.

    python benchmarks/validate_gavel.py [--seed 0] [--workers 2]
    python benchmarks/validate_gavel.py --from-json docs/validation/data/gavel-results.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from validation_io import notes_for, simulate_gavel_workload, validation_main

CLUSTER = "gavel:36:36:36"
WORKLOADS = [
    ("single-GPU, 3 jobs/h", 3.0, 0),
    ("single-GPU, 5 jobs/h", 5.0, 0),
    ("multi-GPU, 1.5 jobs/h", 1.5, 1),
]
POLICIES = [
    "gavel-max-min-fairness-agnostic",
    "gavel-max-min-fairness",
    "gavel-finish-time-fairness",
    "gavel-min-makespan",
    "gavel-max-throughput",
    "gavel-max-min-fairness-packed",
    "fifo",
]
JOBS = 300


def run(task: dict[str, Any]) -> dict[str, Any]:
    from corral.sim.metrics import summarise

    t0 = time.perf_counter()
    result = simulate_gavel_workload(CLUSTER, task["policy"], task, JOBS, check_invariants=True)
    s = summarise(result)
    return task | {
        "avg_jct": s["avg_jct_s"],
        "makespan": s["makespan_s"],
        "finished": s["jobs_finished"],
        "preemptions": s["preemptions"],
        "load": s["offered_load"],
        "wall_s": time.perf_counter() - t0,
    }


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Gavel: heterogeneity-aware against agnostic policies",
        "",
        f"Written by `benchmarks/validate_gavel.py`: {JOBS} jobs of Gavel's workload on "
        f"{CLUSTER} (36 V100, 36 P100, 36 K80; servers of 4 GPUs), rounds of 360 s, "
        "kill-and-restart (5.87 s) per preemption. *vs agnostic* = the agnostic max-min "
        "policy's value / this policy's (above 1: better than agnostic).",
        "",
    ]
    for label, rate, multi in WORKLOADS:
        rows = [r for r in results if r["rate"] == rate and r["multi"] == multi]
        if not rows:
            continue
        base = next(r for r in rows if r["policy"] == "gavel-max-min-fairness-agnostic")
        lines += [
            f"## {label} (offered load on V100 speeds {rows[0]['load']:.2f})",
            "",
            "| policy | avg JCT (h) | vs agnostic | makespan (h) | vs agnostic | preemptions |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            jct_gain = base["avg_jct"] / r["avg_jct"]
            span_gain = base["makespan"] / r["makespan"]
            lines.append(
                f"| {r['policy']} | {r['avg_jct'] / 3600:.1f} | {jct_gain:.2f}x "
                f"| {r['makespan'] / 3600:.1f} | {span_gain:.2f}x | {r['preemptions']:,} |"
            )
        lines.append("")
    lines += notes_for(__file__)
    return "\n".join(lines)


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {"policy": p, "rate": rate, "multi": multi, "seed": args.seed}
        for _, rate, multi in WORKLOADS
        for p in POLICIES
    ]


def main() -> None:
    validation_main(
        __doc__.splitlines()[0],
        "gavel",
        lambda parser: parser.add_argument("--seed", type=int, default=0),
        make_tasks,
        run,
        render,
    )


if __name__ == "__main__":
    main()
