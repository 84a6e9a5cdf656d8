"""Pollux re-run on its own workloads; writes docs/validation/pollux.md.

Pollux's eight 160-job workloads (``--trace pollux-N``, bundled from its
artifact) on its testbed's shape, 16 nodes x 4 T4 GPUs, under ``pollux`` set up
as the artifact runs it (jobs start from their model's smallest trained batch;
each job's step times learnt as it runs; divisions found exactly) and six
variants of it (jobs starting from the workload's batches; step times known up
front; the greedy division; batch sizes fixed at the jobs' own; the
utilitarian mean p = 1 instead of the harmonic p = -1; 10-minute instead of
60-s intervals), beside ``optimus``,
``tiresias-las``, ``srtf`` (an oracle) and ``fifo``. Pollux's artifact README
reports average JCTs on workload-6: Pollux 2446 s, Optimus 5302 s, Tiresias
3470 s; its paper, 37-50% lower average JCT than the other schedulers it
compares with.

    python benchmarks/validate_pollux.py [--workers 2]
    python benchmarks/validate_pollux.py --from-json docs/validation/data/pollux-results.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from validate_optimus import CLUSTER, REPORTED, run_sim
from validation_io import notes_for, validation_main

ARTIFACT = {"initial_batch": "model"}
"""How Pollux's artifact submits its workloads to Pollux: every job starts from
its model's smallest trained batch (the baselines keep the workload's)."""

SCHEMES: list[tuple[str, str, dict[str, Any]]] = [
    ("pollux", "pollux", ARTIFACT),
    ("pollux, from the jobs' own batches", "pollux", {}),
    ("pollux, step times known", "pollux", ARTIFACT | {"throughput": "known"}),
    ("pollux, greedy division", "pollux", ARTIFACT | {"search": "greedy"}),
    ("pollux, fixed batch", "pollux", {"adapt_batch": False}),
    ("pollux, p = 1", "pollux", ARTIFACT | {"p": 1.0}),
    ("pollux, 600-s interval", "pollux", ARTIFACT | {"interval": 600.0}),
    ("optimus", "optimus", {}),
    ("tiresias-las", "tiresias-las", {}),
    ("srtf", "srtf", {}),
    ("fifo", "fifo", {}),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workloads", default="1,2,3,4,5,6,7,8")


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {"workload": int(w), "scheme": label, "policy": policy, "options": options}
        for w in args.workloads.split(",")
        for label, policy, options in SCHEMES
    ]


def run(task: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = dict(task) | run_sim(task["workload"], task["policy"], task["options"])
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def render(results: list[dict[str, Any]]) -> str:
    import numpy as np

    workloads = sorted({r["workload"] for r in results})
    labels = [label for label, _, _ in SCHEMES]
    by = {(r["workload"], r["scheme"]): r for r in results}
    out = [
        "# Pollux on its own workloads",
        "",
        "Written by `benchmarks/validate_pollux.py`. The policy is `corral.policies.pollux`; "
        "goodput is `corral.perf.goodput` over the communication model "
        "(`docs/validation/communication.md`).",
        "",
        f"## Average JCT (s), 160 jobs each, {CLUSTER} (64 GPUs)",
        "",
        "| workload | " + " | ".join(labels) + " |",
        "|---" * (len(labels) + 1) + "|",
    ]
    for w in workloads:
        out.append(
            f"| workload-{w} | "
            + " | ".join(f"{by[(w, label)]['avg_jct_s']:,.0f}" for label in labels)
            + " |"
        )
    means = {
        label: float(np.mean([by[(w, label)]["avg_jct_s"] for w in workloads])) for label in labels
    }
    out.append("| mean | " + " | ".join(f"{means[label]:,.0f}" for label in labels) + " |")
    if 6 in workloads:
        cells = {
            "pollux": f"{REPORTED['pollux']:,}",
            "optimus": f"{REPORTED['optimus']:,}",
            "tiresias-las": f"{REPORTED['tiresias']:,} (Tiresias)",
        }
        out.append(
            "| workload-6, Pollux's artifact | "
            + " | ".join(cells.get(label, "—") for label in labels)
            + " |"
        )
    out += [
        "",
        "## Pollux against the others (average JCT, ratio; lower is better for Pollux)",
        "",
        "| workload | pollux / tiresias-las | pollux / optimus | pollux / srtf (oracle) |",
        "|---|---:|---:|---:|",
    ]
    for w in workloads:
        p = by[(w, "pollux")]["avg_jct_s"]
        out.append(
            f"| workload-{w} | {p / by[(w, 'tiresias-las')]['avg_jct_s']:.2f} | "
            f"{p / by[(w, 'optimus')]['avg_jct_s']:.2f} | {p / by[(w, 'srtf')]['avg_jct_s']:.2f} |"
        )
    if 6 in workloads:
        out.append(
            f"| workload-6, Pollux's artifact | {REPORTED['pollux'] / REPORTED['tiresias']:.2f} | "
            f"{REPORTED['pollux'] / REPORTED['optimus']:.2f} | — |"
        )
    w6 = 6 if 6 in workloads else workloads[0]
    out += [
        "",
        f"## Restarts and utilisation (workload-{w6})",
        "",
        "| scheme | preemptions | GPU utilisation | p99 JCT (s) | simulated in (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label in labels:
        r = by[(w6, label)]
        counts = r.get("counts", {})
        extra = (
            f" ({counts['resizes']} resizes, {counts['retunes']} batch re-tunes)"
            if "retunes" in counts
            else ""
        )
        out.append(
            f"| {label} | {r['preemptions']}{extra} | {r['utilization']:.3f} | "
            f"{r['p99_jct_s']:,.0f} | {r['sim_s']} |"
        )
    out += [
        "",
        "## The greedy division against the exact one",
        "",
        "At every division the exact search (dynamic programming over jobs) also "
        "scores the division the greedy would have made, on the same objective "
        "(the sum of the jobs' 1/speed-up).",
        "",
        "| workload | divisions | greedy worse in | median shortfall where worse | "
        "largest shortfall | JCT, greedy / exact |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for w in workloads:
        gaps = by[(w, "pollux")].get("search_gaps")
        if not gaps:
            continue
        ratio = by[(w, "pollux, greedy division")]["avg_jct_s"] / by[(w, "pollux")]["avg_jct_s"]
        out.append(
            f"| workload-{w} | {gaps['divisions']:,} | "
            f"{gaps['greedy_worse'] / gaps['divisions']:.0%} | {gaps['median_worse']:.1%} | "
            f"{gaps['max']:.0%} | {ratio:.2f} |"
        )
    out.append("")
    out += notes_for(__file__)
    return "\n".join(out)


if __name__ == "__main__":
    validation_main(__doc__.splitlines()[0], "pollux", add_arguments, make_tasks, run, render)
