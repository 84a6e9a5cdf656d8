"""Gavel's throughput estimator against the full matrix; writes docs/validation/gavel-estimator.md.

Two measures. The estimates themselves: for each number of job types profiled in
full ahead (the references) and each share of a new type's pairs measured when it
arrives, the mean absolute error of a job's throughput beside another (relative
to alone, over every pair with an unprofiled type and every GPU type), against the
same with no fingerprint (each unprofiled type taken for a random reference), and
how often a type is matched to a reference of its own model; 10 estimators each
(their references drawn from their seeds). Then what the errors cost: the
space-sharing max-min policy (``gavel-max-min-fairness-packed``) on Gavel's
single-GPU workload on a cluster small enough that jobs pack (gavel:12:12:12, 5
jobs/h, 300 jobs), with every pair measured and with 5, 10 and 15 types
profiled, over 5 seeds (means with 95% Student-t intervals).

    python benchmarks/validate_gavel_estimator.py [--seeds 5] [--workers 2]
    python benchmarks/validate_gavel_estimator.py \
        --from-json docs/validation/data/gavel-estimator-results.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from validation_io import notes_for, shown, simulate_gavel_workload, validation_main

CLUSTER = "gavel:12:12:12"
RATE = 5.0
JOBS = 300
PROFILED = [None, 5, 10, 15]
"""Job types profiled ahead (None: every pair measured)."""
ERROR_GRID = [(r, m) for r in (5, 10, 15, 20) for m in (0.1, 0.3, 1.0)]
ESTIMATORS = range(10)
POLICY = "gavel-max-min-fairness-packed"


def run(task: dict[str, Any]) -> dict[str, Any]:
    from corral.sim.metrics import summarise

    t0 = time.perf_counter()
    if task["kind"] == "error":
        from corral.estimate.pair_throughputs import estimation_error
        from corral.perf.throughputs import gavel_throughputs

        e = estimation_error(gavel_throughputs(), task["references"], task["measured"], ESTIMATORS)
        return task | {
            "pairs": e.pairs,
            "mean_abs": e.mean_abs,
            "mean_abs_guessed": e.mean_abs_guessed,
            "same_model": e.same_model,
        }
    policy = POLICY if task["profiled"] is None else f"{POLICY}[profiled={task['profiled']}]"
    result = simulate_gavel_workload(CLUSTER, policy, task, JOBS, check_invariants=True)
    s = summarise(result)
    return task | {
        "avg_jct": s["avg_jct_s"],
        "makespan": s["makespan_s"],
        "finished": s["jobs_finished"],
        "wall_s": time.perf_counter() - t0,
    }


def render(results: list[dict[str, Any]]) -> str:
    errors = [r for r in results if r["kind"] == "error"]
    runs = [r for r in results if r["kind"] == "jct"]
    seeds = sorted({r["seed"] for r in runs})
    lines = [
        "# Gavel's throughput estimator",
        "",
        "Written by `benchmarks/validate_gavel_estimator.py`. Gavel profiles a few job types "
        "(the *references*) in every pair on every GPU type ahead of time; a new type is "
        "measured beside a random share of them, the rest of its fingerprint is completed "
        "from the references' (low rank), and it packs as the nearest reference does. "
        "corral's `gavel-max-min-fairness-packed` takes this as options: `profiled` "
        "(references; unset: every pair measured) and `profile_share` (default 0.1). "
        "Speeds alone are measured (Gavel profiles those too); a pair always runs at its "
        "measured speed, and an estimated pair that does not fit is not packed again.",
        "",
        f"## The estimates against the full matrix ({len(ESTIMATORS)} estimators each)",
        "",
        "Error: mean absolute error of a job's throughput beside another, relative to "
        "alone (0-1), over every pair with an unprofiled type on every GPU type "
        "(single-GPU jobs). *No fingerprint*: each unprofiled type taken for a random "
        "reference. *Same model*: unprofiled types matched to a reference of their own "
        "model (another batch size).",
        "",
        "| references | share measured | pairs | error | no fingerprint | same model |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(errors, key=lambda r: (r["references"], r["measured"])):
        lines.append(
            f"| {r['references']} | {r['measured']:.0%} | {r['pairs']:,} | {r['mean_abs']:.3f} "
            f"| {r['mean_abs_guessed']:.3f} | {r['same_model']:.0%} |"
        )
    lines += [
        "",
        f"## What the errors cost: {POLICY} on {CLUSTER}, single-GPU, {RATE:g} jobs/h, {JOBS} jobs",
        "",
        f"Means over {len(seeds)} seeds (the workload's) with their 95% Student-t "
        "intervals [low, high]. "
        "The workloads differ far more than the settings do, so *vs measured* is paired: "
        "each seed's JCT with every pair measured / this setting's on the same seed.",
        "",
        "| profiled types | avg JCT (h) | makespan (h) | vs measured (paired) |",
        "|---|---:|---:|---:|",
    ]
    base = {r["seed"]: r["avg_jct"] for r in runs if r["profiled"] is None}
    for profiled in PROFILED:
        mine = [r for r in runs if r["profiled"] == profiled]
        if not mine:
            continue
        jct = [r["avg_jct"] / 3600 for r in mine]
        span = [r["makespan"] / 3600 for r in mine]
        label = "all (measured)" if profiled is None else str(profiled)
        ratios = [base[r["seed"]] / r["avg_jct"] for r in mine if r["seed"] in base]
        lines.append(f"| {label} | {shown(jct, 2)} | {shown(span, 2)} | {shown(ratios, 3, 'x')} |")
    lines.append("")
    lines += notes_for(__file__)
    return "\n".join(lines)


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = [
        {"kind": "error", "references": r, "measured": m} for r, m in ERROR_GRID
    ]
    tasks += [
        {"kind": "jct", "profiled": p, "rate": RATE, "multi": 0, "seed": seed}
        for seed in range(args.seeds)
        for p in PROFILED
    ]
    return tasks


def main() -> None:
    validation_main(
        __doc__.splitlines()[0],
        "gavel-estimator",
        lambda parser: parser.add_argument("--seeds", type=int, default=5),
        make_tasks,
        run,
        render,
    )


if __name__ == "__main__":
    main()
