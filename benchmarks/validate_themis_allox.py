"""Themis' finish-time fairness and AlloX's average JCT on heterogeneous GPUs;
writes docs/validation/themis-allox.md.

Themis (Mahajan et al., NSDI'20) schedules for finish-time fairness: rho = a
job's JCT sharing the cluster / its finish time alone on 1/N of it; its
headline is the worst rho over the jobs (and Jain's index over the rhos)
against schedulers that do not aim at it. AlloX (Le et al., EuroSys'20)
matches waiting jobs to the resource types where they run fastest, by a
min-cost matching, and reports lower average JCT than schedulers that ignore
how each job's speed differs across types.

Neither paper's workload is public. The nearest public setup is Gavel's: its
measured job types on V100, P100 and K80 (Gavel's own evaluation runs
finish-time fairness, Themis' policy, on it), 36 of each type, single- and
multi-GPU jobs. Every figure is corral against corral: each policy as corral
implements it, on the same jobs, so the rows show whether the *direction*
the papers claim holds here, not the papers' numbers. Mean over seeds.

    python benchmarks/validate_themis_allox.py [--seeds 0 1 2 3 4] [--workers 2]
    python benchmarks/validate_themis_allox.py --from-json \
        docs/validation/data/themis-allox-results.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from validation_io import mean_of, notes_for, shown, simulate_gavel_workload, validation_main

CLUSTER = "gavel:36:36:36"
WORKLOADS = [
    ("single-GPU jobs, 5 jobs/h", 5.0, 0),
    ("multi-GPU jobs (1/2/4/8), 1.5 jobs/h", 1.5, 1),
]
POLICIES = [
    "themis",
    "gavel-finish-time-fairness",
    "gavel-max-min-fairness",
    "allox",
    "tiresias-las",
    "fifo",
]
JOBS = 600


def run(task: dict[str, Any]) -> dict[str, Any]:
    from corral.sim.metrics import summarise

    t0 = time.perf_counter()
    s = summarise(simulate_gavel_workload(CLUSTER, task["policy"], task, JOBS, True))
    return (
        task
        | {
            key: s[key]
            for key in (
                "avg_jct_s",
                "p99_jct_s",
                "max_ftf_rho",
                "median_ftf_rho",
                "jain_ftf",
                "preemptions",
                "offered_load",
                "jobs_finished",
            )
        }
        | {"wall_s": time.perf_counter() - t0}
    )


def render(results: list[dict[str, Any]]) -> str:
    seeds = sorted({r["seed"] for r in results})
    lines = [
        "# Themis and AlloX on Gavel's heterogeneous cluster",
        "",
        f"Written by `benchmarks/validate_themis_allox.py`: {JOBS} jobs of Gavel's workload "
        f"on {CLUSTER} (36 V100, 36 P100, 36 K80), mean over seeds "
        f"{', '.join(map(str, seeds))} (the workload's); average JCT and max rho with their "
        "95% Student-t intervals [low, high]. Finish-time fairness rho = JCT / finish time alone "
        "on 1/N of the cluster (N: jobs present over the job's lifetime; "
        "`corral.sim.fairness`); lower max rho and a Jain's index nearer 1 are fairer.",
        "",
    ]
    for label, rate, multi in WORKLOADS:
        rows = [r for r in results if r["rate"] == rate and r["multi"] == multi]
        if not rows:
            continue
        load = mean_of(rows, "offered_load")
        lines += [
            f"## {label} (offered load on V100 speeds {load:.2f})",
            "",
            "| policy | avg JCT (h) | p99 JCT (h) | max rho | median rho | Jain's index "
            "| preemptions |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for policy in POLICIES:
            mine = [r for r in rows if r["policy"] == policy]
            if not mine:
                continue
            jct = shown([r["avg_jct_s"] / 3600 for r in mine], 1)
            rho = shown([r["max_ftf_rho"] for r in mine], 2)
            lines.append(
                f"| {policy} | {jct} "
                f"| {mean_of(mine, 'p99_jct_s') / 3600:.1f} | {rho} "
                f"| {mean_of(mine, 'median_ftf_rho'):.2f} | {mean_of(mine, 'jain_ftf'):.3f} "
                f"| {mean_of(mine, 'preemptions'):,.0f} |"
            )
        lines.append("")
    lines += notes_for(__file__)
    return "\n".join(lines)


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {"policy": p, "rate": rate, "multi": multi, "seed": seed}
        for seed in args.seeds
        for _, rate, multi in WORKLOADS
        for p in POLICIES
    ]


def main() -> None:
    validation_main(
        __doc__.splitlines()[0],
        "themis-allox",
        lambda parser: parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4]),
        make_tasks,
        run,
        render,
    )


if __name__ == "__main__":
    main()
