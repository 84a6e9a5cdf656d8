"""Pollux re-run on its own workloads; writes docs/validation/pollux.md.

Pollux's eight 160-job workloads (``--trace pollux-N``, bundled from its
artifact) on its testbed's shape, 16 nodes x 4 T4 GPUs, under ``pollux`` set up
as the artifact runs it (jobs start from their model's smallest trained batch;
each job's step times learnt as it runs; divisions found exactly) and ten
variants of it (jobs starting from the workload's batches; step times known up
front; the greedy division; batch sizes fixed at the jobs' own; the
utilitarian mean p = 1 instead of the harmonic p = -1; 10-minute instead of
60-s intervals; no re-allocation penalty; speed-ups over one GPU; no
interference avoidance; the artifact's 30 s per restart), beside ``optimus``,
``tiresias-las``, ``srtf`` (an oracle) and ``fifo``. Pollux's artifact README
reports average JCTs on workload-6: Pollux 2446 s, Optimus 5302 s, Tiresias
3470 s; its paper, 37-50% lower average JCT than the other schedulers it
compares with.

    python benchmarks/validate_pollux.py [--workers 2] [--artifact-results DIR]
    python benchmarks/validate_pollux.py --from-json docs/validation/data/pollux-results.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from validate_optimus import ARTIFACT_HELD_OUT, ARTIFACT_RESULTS, CLUSTER, REPORTED, run_sim
from validation_io import notes_for, validation_main

ARTIFACT = {"initial_batch": "model"}
"""How Pollux's artifact submits its workloads to Pollux: every job starts from
its model's smallest trained batch (the baselines keep the workload's)."""

ARTIFACT_TIRESIAS = {"queues": 2, "thresholds": "57600"}
"""How Pollux's artifact configures its Tiresias baseline: two queues, a job
moving down after 16 GPU-hours (corral's defaults are the Tiresias paper's)."""


SCHEMES: list[tuple[str, str, dict[str, Any]]] = [
    ("pollux", "pollux", ARTIFACT),
    ("pollux, from the jobs' own batches", "pollux", {}),
    ("pollux, step times known", "pollux", ARTIFACT | {"throughput": "known"}),
    ("pollux, greedy division", "pollux", ARTIFACT | {"search": "greedy"}),
    ("pollux, fixed batch", "pollux", {"adapt_batch": False}),
    ("pollux, p = 1", "pollux", ARTIFACT | {"p": 1.0}),
    ("pollux, 600-s interval", "pollux", ARTIFACT | {"interval": 600.0}),
    (
        "pollux, no re-allocation penalty",
        "pollux",
        ARTIFACT | {"restart_delay": 0.0, "min_change": 0.1},
    ),
    ("pollux, speed-ups over one GPU", "pollux", ARTIFACT | {"speedup_base": "one"}),
    ("pollux, no interference avoidance", "pollux", ARTIFACT | {"avoid_interference": False}),
    ("pollux, the artifact's 30-s restarts", "pollux", ARTIFACT),
    ("pollux, the artifact's mechanics", "pollux", {}),
    ("optimus", "optimus", {}),
    ("optimus, the artifact's mechanics", "optimus", {}),
    ("tiresias-las", "tiresias-las", {}),
    ("tiresias-las, the artifact's settings", "tiresias-las", ARTIFACT_TIRESIAS),
    ("tiresias-las, the artifact's mechanics", "tiresias-las", {}),
    ("srtf", "srtf", {}),
    ("fifo", "fifo", {}),
]

MECHANICS = {
    "pollux": "pollux, the artifact's mechanics",
    "tiresias": "tiresias-las, the artifact's mechanics",
    "optimus": "optimus, the artifact's mechanics",
}
"""Schemes run under ``--preset pollux-sim``, the artifact's simulator's mechanics
(a pass every 60 s, 30 s at every allocation, first starts included, its
Tiresias settings and strict queue order), by the artifact policy each matches."""

HELD_OUT = [
    "pollux",
    "pollux, the artifact's mechanics",
    "tiresias-las, the artifact's settings",
    "tiresias-las, the artifact's mechanics",
    "optimus",
    "optimus, the artifact's mechanics",
]
"""Schemes run on the held-out job loads (``--held-out``)."""


SWITCH_COSTS = {"pollux, the artifact's 30-s restarts": 30.0}
"""Schemes run with another cost per restart than the simulator's default
(5.87 s, a measured checkpoint-restore): Pollux's artifact charges 30 s at
every allocation, first starts included (corral charges restarts only)."""

COMPARED = {
    "pollux": "pollux",
    "tiresias-las, the artifact's settings": "tiresias",
    "optimus": "optimus",
}
"""Schemes compared job by job with the artifact's shipped results, and the
artifact policy each is compared with."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workloads", default="1,2,3,4,5,6,7,8")
    parser.add_argument(
        "--held-out",
        default="0.5,1.5,2.0",
        help="job loads to score on besides load 1 (none: '')",
    )
    parser.add_argument(
        "--artifact-results",
        default=None,
        help="the artifact's simulator/results-jobload directory: compare job by job",
    )


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    shipped: dict[str, dict[str, Any]] = {}
    if args.artifact_results:
        for policy in set(COMPARED.values()):
            path = Path(args.artifact_results) / f"{policy}-1.0" / "summary.json"
            shipped[policy] = json.loads(path.read_text(encoding="utf-8"))["jcts"]
    tasks = []
    for w in args.workloads.split(","):
        for label, policy, options in SCHEMES:
            task = {"workload": int(w), "scheme": label, "policy": policy, "options": options}
            if label in SWITCH_COSTS:
                task["switch_cost"] = SWITCH_COSTS[label]
            if label in MECHANICS.values():
                task["preset"] = "pollux-sim"
            if label in COMPARED and shipped:
                task["artifact_jcts"] = shipped[COMPARED[label]][f"workload-{w}"]
            tasks.append(task)
    options = {label: (policy, opts) for label, policy, opts in SCHEMES}
    for load in [x for x in args.held_out.split(",") if x]:
        for w in args.workloads.split(","):
            for label in HELD_OUT:
                policy, opts = options[label]
                task = {"workload": int(w), "scheme": label, "policy": policy, "options": opts}
                task["load"] = load
                if label in MECHANICS.values():
                    task["preset"] = "pollux-sim"
                tasks.append(task)
    return tasks


def run(task: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    theirs = task.pop("artifact_jcts", None)
    out = dict(task) | run_sim(
        task["workload"],
        task["policy"],
        task["options"],
        per_job=theirs is not None,
        switch_cost=task.get("switch_cost"),
        load=task.get("load", "1.0"),
        preset=task.get("preset"),
    )
    if theirs is not None:
        ours = out.pop("jct_by_job")
        by_model: dict[str, dict[str, float]] = {}
        for job, jct in ours.items():
            model = by_model.setdefault(job.rsplit("-", 1)[0], {"corral": 0.0, "artifact": 0.0})
            model["corral"] += jct
            model["artifact"] += theirs[job]
        out["by_model"] = by_model
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def render(results: list[dict[str, Any]]) -> str:
    import numpy as np

    held = [r for r in results if r.get("load", "1.0") != "1.0"]
    results = [r for r in results if r.get("load", "1.0") == "1.0"]
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
    out += artifact_table(by, workloads)
    out += held_out_tables(by, workloads, held)
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


def artifact_table(by: dict[tuple[int, str], dict[str, Any]], workloads: list[int]) -> list[str]:
    """corral against the results Pollux's artifact ships, workload by workload."""
    import numpy as np

    out = [
        "",
        "## Against the artifact's own results, workload by workload",
        "",
        "Each cell: corral's average JCT over the artifact's (its shipped results, "
        "`ARTIFACT_RESULTS`). *Pollux, 30-s restarts* is corral's Pollux charged the "
        "artifact's 30 s per restart (corral's default is 5.87 s). *Tiresias, artifact's "
        "settings* is corral's `tiresias-las` with the artifact's two queues and "
        "16-GPU-hour threshold.",
        "",
        "| workload | Pollux | Pollux, 30-s restarts | Tiresias | Tiresias, artifact's settings "
        "| Optimus | Pollux / Tiresias, corral | the artifact's "
        "| corral, against the artifact-set Tiresias |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = []
    for w in workloads:
        art = {k: v[w] for k, v in ARTIFACT_RESULTS.items()}
        ours = {
            label: by[(w, label)]["avg_jct_s"]
            for label in ("pollux", "tiresias-las", "tiresias-las, the artifact's settings")
        }
        ours["optimus"] = by[(w, "optimus")]["avg_jct_s"]
        restarts = by[(w, "pollux, the artifact's 30-s restarts")]["avg_jct_s"]
        row = [
            ours["pollux"] / art["pollux"],
            restarts / art["pollux"],
            ours["tiresias-las"] / art["tiresias"],
            ours["tiresias-las, the artifact's settings"] / art["tiresias"],
            ours["optimus"] / art["optimus"],
            ours["pollux"] / ours["tiresias-las"],
            art["pollux"] / art["tiresias"],
            ours["pollux"] / ours["tiresias-las, the artifact's settings"],
        ]
        rows.append(row)
        out.append(f"| workload-{w} | " + " | ".join(f"{x:.2f}" for x in row) + " |")
    mean = np.mean(np.array(rows), axis=0)
    out.append("| mean | " + " | ".join(f"{x:.2f}" for x in mean) + " |")
    return out + by_model_table(by, workloads)


def held_out_tables(
    by: dict[tuple[int, str], dict[str, Any]], workloads: list[int], held: list[dict[str, Any]]
) -> list[str]:
    """corral against the artifact on the workloads its departures were found on
    (load 1) and on the same workloads at the other job loads (held out), with
    corral's own mechanics and with the artifact's (``--preset pollux-sim``)."""
    import numpy as np

    loads: dict[str, dict[tuple[int, str], float]] = {
        "1.0": {key: r["avg_jct_s"] for key, r in by.items()}
    }
    for r in held:
        loads.setdefault(r["load"], {})[(r["workload"], r["scheme"])] = r["avg_jct_s"]
    shipped = {"1.0": ARTIFACT_RESULTS} | ARTIFACT_HELD_OUT
    columns = [
        ("Pollux", "pollux", "pollux"),
        ("Pollux, artifact's mechanics", "pollux", MECHANICS["pollux"]),
        ("Tiresias, artifact's settings", "tiresias", "tiresias-las, the artifact's settings"),
        ("Tiresias, artifact's mechanics", "tiresias", MECHANICS["tiresias"]),
        ("Optimus", "optimus", "optimus"),
        ("Optimus, artifact's mechanics", "optimus", MECHANICS["optimus"]),
    ]
    out = [
        "",
        "## Held out: the same workloads at other job loads",
        "",
        "Every departure above was found by comparing with the artifact at load 1 "
        "(the choice set). The artifact also ships one run of each policy on the eight "
        "workloads at half, 1.5x and twice the arrival rate (80, 240 and 320 jobs: "
        "`--trace pollux-N@LOAD`), which nothing in corral was chosen on: they are "
        "scored here as they are, beside the choice set. Each cell: corral's average "
        "JCT over the artifact's, mean over the eight workloads [lowest, highest]. "
        "*Artifact's mechanics* is `--preset pollux-sim`: a pass every 60 s (arrivals "
        "and freed GPUs wait for it), 30 s without progress at every allocation, first "
        "starts included, and the artifact's Tiresias settings in strict queue order.",
        "",
        "| job load | " + " | ".join(c[0] for c in columns) + " | Pollux / Tiresias: corral, "
        "artifact's mechanics | the artifact's | largest gap of the ratio |",
        "|---" + "|---:" * (len(columns) + 3) + "|",
    ]
    for load in sorted(loads, key=lambda x: (x != "1.0", float(x))):
        ours = loads[load]
        if not all((w, c[2]) in ours for w in workloads for c in columns):
            continue
        art = shipped[load]
        cells = []
        for _, policy, label in columns:
            ratio = np.array([ours[(w, label)] / art[policy][w] for w in workloads])
            cells.append(f"{ratio.mean():.2f} [{ratio.min():.2f}, {ratio.max():.2f}]")
        corral = np.array(
            [ours[(w, MECHANICS["pollux"])] / ours[(w, MECHANICS["tiresias"])] for w in workloads]
        )
        theirs = np.array([art["pollux"][w] / art["tiresias"][w] for w in workloads])
        gap = corral / theirs - 1
        worst = int(np.argmax(np.abs(gap)))
        name = "1 (choice set)" if load == "1.0" else f"{load} (held out)"
        out.append(
            f"| {name} | " + " | ".join(cells) + f" | {corral.mean():.2f} | {theirs.mean():.2f} "
            f"| {gap[worst]:+.0%} (workload-{workloads[worst]}) |"
        )
    out += [
        "",
        "Workload by workload, with the artifact's mechanics: corral's average JCT over "
        "the artifact's, and Pollux / Tiresias in each.",
        "",
        "| job load | workload | Pollux | Tiresias | Optimus | Pollux / Tiresias, corral "
        "| the artifact's |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for load in sorted(loads, key=lambda x: (x != "1.0", float(x))):
        ours, art = loads[load], shipped[load]
        for w in workloads:
            if not all((w, label) in ours for label in MECHANICS.values()):
                continue
            row = [ours[(w, MECHANICS[p])] / art[p][w] for p in ("pollux", "tiresias", "optimus")]
            row += [
                ours[(w, MECHANICS["pollux"])] / ours[(w, MECHANICS["tiresias"])],
                art["pollux"][w] / art["tiresias"][w],
            ]
            out.append(f"| {load} | workload-{w} | " + " | ".join(f"{x:.2f}" for x in row) + " |")
    return out


def by_model_table(by: dict[tuple[int, str], dict[str, Any]], workloads: list[int]) -> list[str]:
    """Job by job against the artifact's shipped JCTs: each model's summed JCT
    over the eight workloads, corral's over the artifact's (present when the
    run was given ``--artifact-results``)."""
    labels = [label for label in COMPARED if all("by_model" in by[(w, label)] for w in workloads)]
    if not labels:
        return []
    models = sorted({m for w in workloads for m in by[(w, labels[0])]["by_model"]})
    out = [
        "",
        "Job by job (run with `--artifact-results`): each model's JCTs summed over the "
        "workloads, corral's over the artifact's.",
        "",
        "| model | " + " | ".join(labels) + " |",
        "|---" + "|---:" * len(labels) + "|",
    ]
    for model in models:
        cells = []
        for label in labels:
            sums = [by[(w, label)]["by_model"].get(model) for w in workloads]
            ours = sum(s["corral"] for s in sums if s)
            theirs = sum(s["artifact"] for s in sums if s)
            cells.append(f"{ours / theirs:.2f}")
        out.append(f"| {model} | " + " | ".join(cells) + " |")
    return out


if __name__ == "__main__":
    validation_main(__doc__.splitlines()[0], "pollux", add_arguments, make_tasks, run, render)
