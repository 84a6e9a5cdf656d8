"""Gandiva's time-slicing rules measured; writes docs/validation/gandiva.md.

Gandiva time-slices any number of jobs on a GPU set (suspending them at
mini-batch boundaries, their state kept in host memory). corral runs that
three ways: as processor sharing per GPU set (``timeslice=share``, the
default: each of n jobs at 1/n of the set's time less the switches, a job
kept on its set unless Gandiva migrates it), with at most two jobs per set
(``timeslice=rate``, the earlier default: the rest wait first come first
served), and turn by turn cluster-wide (``timeslice=quanta``: a job that has
run a quantum yields to the one that has waited longest, on whatever GPUs are
free). This runs all three, beside ``tiresias-las``, at the three loads on the
trace's first 20,000 jobs (``--jobs``), with the settings of the Tiresias page
(Gandiva's jobs typed from Gavel's measured types, 0.1 s suspend/resume; the
others a 5.87 s kill-and-restart). The seed draws each job's type (a model of
Gavel's table, whose speeds and memory decide which jobs Gandiva packs): Gandiva's
rows are means over seeds 0-4 with their 95% Student-t intervals; tiresias-las
draws nothing and runs once.

    python benchmarks/validate_gandiva.py [--workers 2] [--seeds 0,1,2,3,4] [--reuse]
    python benchmarks/validate_gandiva.py --from-json docs/validation/data/gandiva-results.json

The turn-by-turn runs take minutes each (millions of quanta).
"""

from __future__ import annotations

import argparse
from typing import Any

from validate_tiresias import LOADS, ratio, scale_for
from validate_tiresias import run as run_one
from validation_io import notes_for, shown, validation_main

JOBS = 20_000
"""The first jobs of the Philly trace (of 82,247): turns are simulated quantum
by quantum, and over the whole trace at load 0.9 or more the backlog makes
that hours of events."""

SCHEMES: list[tuple[str, str, dict[str, Any]]] = [
    ("tiresias-las", "tiresias-las", {}),
    ("gandiva, shared per GPU set (share, default)", "gandiva", {}),
    ("gandiva, two per GPU set (rate)", "gandiva", {"timeslice": "rate"}),
    ("gandiva, turns (quanta)", "gandiva", {"timeslice": "quanta"}),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--loads", default=",".join(str(x) for x in LOADS))
    parser.add_argument("--jobs", type=int, default=JOBS, help="first jobs of the Philly trace")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds of Gandiva's job types")


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    tasks = []
    for load in (float(x) for x in args.loads.split(",")):
        scale = scale_for(load, args.jobs)
        for label, policy, options in SCHEMES:
            seeds = [int(s) for s in args.seeds.split(",")] if policy == "gandiva" else [0]
            for seed in seeds:
                tasks.append(
                    {
                        "load": load,
                        "label": label,
                        "policy": policy,
                        "options": options,
                        "trace": "philly",
                        "jobs": args.jobs,
                        "cluster": "philly",
                        "scale": scale,
                        "seed": seed,
                    }
                )
    # the turn-by-turn runs are the long ones: start them first
    return sorted(tasks, key=lambda t: (t["options"].get("timeslice") != "quanta", -t["load"]))


def run(task: dict[str, Any]) -> dict[str, Any]:
    """One scheme on the trace's first ``jobs`` jobs (the Tiresias page's run)."""
    return run_one(task) | {"label": task["label"], "load": task["load"]}


def render(results: list[dict[str, Any]]) -> str:
    loads = sorted({r["load"] for r in results})
    by: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for r in sorted(results, key=lambda r: r["task"].get("seed", 0)):
        by.setdefault((r["load"], r["label"]), []).append(r)
    labels = [label for label, _, _ in SCHEMES]
    seeds = sorted({r["task"].get("seed", 0) for r in results if r["policy"] == "gandiva"})
    out = [
        "# Gandiva's time-slicing: shared per GPU set, two per set, and turns",
        "",
        f"Written by `benchmarks/validate_gandiva.py`: the first {results[0]['task']['jobs']:,} "
        "jobs of the Philly trace, with Philly's cluster scaled so that they offer each load, "
        "set up as on the [Tiresias page](tiresias.md) (which runs the whole trace). "
        f"Gandiva's rows are means over seeds {', '.join(map(str, seeds))} (each draws the "
        "jobs' types, which decide what Gandiva packs) with their 95% Student-t intervals "
        "[low, high]; tiresias-las draws nothing and ran once.",
        "",
        "| load | scheme | GPUs | avg JCT (h) | median JCT (h) | p95 JCT (h) | avg queueing (h) "
        "| preemptions | sim (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def h(runs: list[dict[str, Any]], key: str) -> str:
        return shown([r[key] / 3600 for r in runs], 2)

    for load in loads:
        for label in labels:
            runs = by.get((load, label))
            if not runs:
                continue
            out.append(
                f"| {load} | {label} | {runs[0]['gpus']} | {h(runs, 'avg_jct_s')} "
                f"| {h(runs, 'median_jct_s')} | {h(runs, 'p95_jct_s')} "
                f"| {h(runs, 'avg_queueing_s')} "
                f"| {shown([float(r['preemptions']) for r in runs], 0)} "
                f"| {sum(r['wall_s'] for r in runs) / len(runs):.1f} |"
            )
    out += [
        "",
        "Average JCT against tiresias-las' (per seed, then the mean and its interval):",
        "",
        "| load | gandiva (share) / tiresias-las | gandiva (two per set) / tiresias-las "
        "| gandiva (turns) / tiresias-las |",
        "|---|---:|---:|---:|",
    ]
    for load in loads:
        base = by.get((load, labels[0]))
        if not base:
            continue
        cells = [
            shown([ratio(r, base[0]) for r in by[(load, label)]], 2) if (load, label) in by else "-"
            for label in labels[1:]
        ]
        out.append(f"| {load} | " + " | ".join(cells) + " |")
    out.append("")
    out += notes_for(__file__)
    return "\n".join(out)


if __name__ == "__main__":
    validation_main(__doc__.splitlines()[0], "gandiva", add_arguments, make_tasks, run, render)
