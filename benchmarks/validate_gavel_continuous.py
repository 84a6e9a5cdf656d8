"""Gavel's Figure 8 set-up: LAS (max-min fairness) aware against agnostic on the
continuous-single trace, average JCT of a steady-state window against the input
job rate; writes docs/validation/gavel-continuous.md.

Gavel's own sweep (its EXPERIMENTS.md, Figure 8): a cluster of 36 V100, 36
P100 and 36 K80 GPUs; single-GPU jobs of Gavel's workload arriving as a
Poisson process at 0 to 6 jobs per hour; the metric is the average JCT of
jobs 4000 to 5000 (a window after the cluster has reached its steady state);
seeds 0, 1 and 2. Here: the same cluster, workload and window, from corral's
generator of Gavel's workload, with arrivals going on past the window (7,000
jobs) so the window's jobs finish under the same load; jobs of the window
still running when the trace's last job has arrived run to their end at a
falling load, which can only flatter the policy that saturates first.

    python benchmarks/validate_gavel_continuous.py [--seeds 0] [--workers 2]
    python benchmarks/validate_gavel_continuous.py --from-json \
        docs/validation/data/gavel-continuous-results.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from validation_io import interval, mean_of, notes_for, simulate_gavel_workload, validation_main

CLUSTER = "gavel:36:36:36"
POLICIES = ["gavel-max-min-fairness-agnostic", "gavel-max-min-fairness"]
RATES = [1.0, 2.0, 3.0, 4.0, 4.5, 5.0, 5.5, 6.0]
JOBS = 7000
WINDOW = (4000, 5000)


def run(task: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from corral.sim.metrics import summarise

    t0 = time.perf_counter()
    result = simulate_gavel_workload(CLUSTER, task["policy"], task, JOBS)
    state = result.state
    order = np.argsort(state.submit, kind="stable")
    window = order[WINDOW[0] : WINDOW[1]]
    jct = state.finish_time[window] - state.submit[window]
    s = summarise(result)
    return task | {
        "window_jct": float(np.nanmean(jct)),
        "window_unfinished": int(np.isnan(jct).sum()),
        "avg_jct": s["avg_jct_s"],
        "load": s["offered_load"],
        "preemptions": s["preemptions"],
        "wall_s": time.perf_counter() - t0,
    }


def render(results: list[dict[str, Any]]) -> str:
    seeds = sorted({r["seed"] for r in results})
    lines = [
        "# Gavel's Figure 8: LAS aware against agnostic on the continuous-single trace",
        "",
        f"Written by `benchmarks/validate_gavel_continuous.py`: {JOBS:,} single-GPU jobs of "
        f"Gavel's workload on {CLUSTER}, rounds of 360 s; average JCT of jobs "
        f"{WINDOW[0]:,}-{WINDOW[1]:,} (Gavel's window), mean over seeds "
        f"{', '.join(map(str, seeds))}, each with its 95% interval (Student's t over the "
        f"seeds). *agnostic / aware* above 1: the aware policy is better; its interval is "
        f"of the seeds' own ratios.",
        "",
        "| input rate (jobs/h) | offered load (V100 speeds) | agnostic JCT (h) | aware JCT (h) "
        "| agnostic / aware | seeds' ratios | simulated in (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rate in sorted({r["rate"] for r in results}):
        by_seed: dict[str, dict[int, float]] = {p: {} for p in POLICIES}
        for r in results:
            if r["rate"] == rate:
                by_seed[r["policy"]][r["seed"]] = r["window_jct"] / 3600
        both = sorted(set(by_seed[POLICIES[0]]) & set(by_seed[POLICIES[1]]))
        if not both:
            continue
        agn = [by_seed[POLICIES[0]][k] for k in both]
        aware = [by_seed[POLICIES[1]][k] for k in both]
        ratios = [a / w for a, w in zip(agn, aware, strict=True)]
        rows = [r for r in results if r["rate"] == rate and r["seed"] in both]
        cells = [_shown(*interval(values)) for values in (agn, aware)]
        mean, low, high = interval(ratios)
        lines.append(
            f"| {rate:g} | {mean_of(rows, 'load'):.2f} | {cells[0]} | {cells[1]} "
            f"| **{mean:.2f}x** [{low:.2f}, {high:.2f}] | {', '.join(f'{x:.2f}' for x in ratios)} "
            f"| {sum(r['wall_s'] for r in rows):.0f} |"
        )
    lines += ["", *notes_for(__file__)]
    return "\n".join(lines)


def _shown(mean: float, low: float, high: float) -> str:
    return f"{mean:.1f} [{low:.1f}, {high:.1f}]"


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {"policy": p, "rate": rate, "seed": seed}
        for seed in args.seeds
        for rate in (args.rates or RATES)
        for p in POLICIES
    ]


def main() -> None:
    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--seeds", type=int, nargs="+", default=[0])
        parser.add_argument("--rates", type=float, nargs="+", default=None)

    validation_main(__doc__.splitlines()[0], "gavel-continuous", arguments, make_tasks, run, render)


if __name__ == "__main__":
    main()
