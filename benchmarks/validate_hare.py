"""Hare's two experiments re-run in simulation; writes docs/validation/hare.md.

Workload (Hare's poster does not publish its own): Gavel's job types drawn
uniformly, 1/2/4/8 GPUs with probabilities 0.7/0.1/0.15/0.05, run times on a
V100 of 60 x 10^U(0.5, 1.5) s (3 to 32 minutes), Poisson arrivals at 400 jobs
per hour, priority weights drawn from {1, 2, 4, 8}
(``gavel-synthetic:rate=400,weights=1,short=1``). Clusters are equal thirds
of V100, P100 and K80 servers of 4 GPUs.

* experiment (i): 200 jobs on 48, 96 and 160 GPUs;
* experiment (ii): 160 GPUs with 100, 200 and 300 jobs.

Schemes: hare (with Hare's switching, and again with kill-and-restart),
sched-allox and sched-homo (round model, kill-and-restart switching), and
gavel (max-min fairness), tiresias-las and fifo (gang engine,
kill-and-restart per preemption). Each point is the mean over the seeds.

    python benchmarks/validate_hare.py [--seeds 0,1,2,3,4] [--workers 2]
        [--out docs/validation/hare.md] [--json docs/validation/data/hare-results.json]
    python benchmarks/validate_hare.py --from-json docs/validation/data/hare-results.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from validation_io import notes_for, shown, validation_main

CLUSTERS = {48: "gavel:16:16:16", 96: "gavel:32:32:32", 160: "gavel:56:52:52"}
SCHEMES: list[tuple[str, str, str]] = [
    ("hare", "hare", "hare"),
    ("hare (kill-restart switching)", "hare", "kill-restart"),
    ("sched-allox", "sched-allox", "kill-restart"),
    ("sched-homo", "sched-homo", "kill-restart"),
    ("gavel", "gavel", "kill-restart"),
    ("tiresias-las", "tiresias-las", "kill-restart"),
    ("fifo", "fifo", "kill-restart"),
]
ROUND = {"hare", "sched-allox", "sched-homo"}
WITHIN = 25 * 60.0


def run(task: dict[str, Any]) -> dict[str, Any]:
    from corral import Experiment
    from corral.sim.metrics import summarise

    t0 = time.perf_counter()
    trace = f"gavel-synthetic:jobs={task['jobs']},rate=400,weights=1,short=1,seed={task['seed']}"
    experiment = Experiment(
        trace=trace,
        cluster=CLUSTERS[task["gpus"]],
        policies=task["policy"],
        switch_cost=str(task["switch"]),
        check=True,
    )
    jobs, cluster = experiment.workload(lambda kind, text: None)
    result = experiment.simulate()
    out = dict(task)
    if task["policy"] in ROUND:
        s = result.summary()
        out |= {
            "weighted_jct": s["weighted_jct_s"],
            "avg_jct": s["avg_jct_s"],
            "within": s["done_within_25min"],
            "switch_share": s["switch_overhead_share"],
            "bound": result.lower_bound() if task["policy"] == "hare" else None,
        }
    else:
        s = summarise(result)
        st = result.state
        jct = st.finish_time - st.submit
        busy = result.busy_gpu_seconds
        out |= {
            "weighted_jct": s["weighted_jct_s"],
            "avg_jct": s["avg_jct_s"],
            "within": float((jct <= WITHIN).mean()),
            "switch_share": s["switch_overhead_gpu_s"] / busy if busy else 0.0,
            "bound": None,
        }
    out["load"] = jobs.offered_load(cluster.total_gpus)
    out["wall_s"] = time.perf_counter() - t0
    return out


def tasks(seeds: list[int]) -> list[dict[str, Any]]:
    points = [("i", 200, g) for g in CLUSTERS] + [("ii", j, 160) for j in (100, 200, 300)]
    out = []
    for exp, n, g in points:
        for label, policy, switch in SCHEMES:
            for seed in seeds:
                out.append(
                    {
                        "exp": exp,
                        "jobs": n,
                        "gpus": g,
                        "label": label,
                        "policy": policy,
                        "switch": switch,
                        "seed": seed,
                    }
                )
    return out


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if r[key] is not None]
    return sum(values) / len(values) if values else float("nan")


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Hare and its baselines: Hare's two experiments in simulation",
        "",
        "Written by `benchmarks/validate_hare.py` (the workload and schemes are described "
        "in its docstring). Total weighted JCT is the sum of weight x JCT in hours; "
        "*bound* is Hare's relaxation LP solved offline for the whole instance with the "
        "release times, a lower bound for every scheme; *Hare's cut* = 1 - Hare / scheme "
        "(total weighted JCT); *in 25 min* = share of jobs finished within 25 minutes of "
        "submission; *switching* = switching time as a share of GPU busy time. Means over "
        f"seeds {sorted({r['seed'] for r in results})} (the workload's); the total weighted "
        "JCT and Hare's cut (paired: each seed's Hare against the scheme on the same "
        "workload) with their 95% Student-t intervals [low, high].",
        "",
    ]
    points = []
    for r in results:
        key = (r["exp"], r["jobs"], r["gpus"])
        if key not in points:
            points.append(key)
    for exp, n, g in points:
        rows = [r for r in results if (r["exp"], r["jobs"], r["gpus"]) == (exp, n, g)]
        load = _mean(rows, "load")
        hare_rows = [r for r in rows if r["label"] == "hare"]
        bound = _mean(hare_rows, "bound") / 3600
        title = f"## Experiment ({exp}): {n} jobs on {g} GPUs (offered load {load:.2f})"
        lines += [
            title,
            "",
            f"Lower bound (relaxation): {bound:,.1f} h.",
            "",
            "| scheme | total weighted JCT (h) | / bound | Hare's cut | avg JCT (min) "
            "| in 25 min | switching |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        hare_by_seed = {r["seed"]: r["weighted_jct"] for r in hare_rows}
        for label, _, _ in SCHEMES:
            sel = [r for r in rows if r["label"] == label]
            w = _mean(sel, "weighted_jct") / 3600
            cuts = [
                100 * (1 - hare_by_seed[r["seed"]] / r["weighted_jct"])
                for r in sel
                if r["seed"] in hare_by_seed
            ]
            cut = "-" if label == "hare" else shown(cuts, 1, "%")
            avg = _mean(sel, "avg_jct") / 60
            within = 100 * _mean(sel, "within")
            switching = 100 * _mean(sel, "switch_share")
            total = shown([r["weighted_jct"] / 3600 for r in sel], 1)
            lines.append(
                f"| {label} | {total} | {w / bound:.2f} | {cut} | {avg:.1f} "
                f"| {within:.1f}% | {switching:.3f}% |"
            )
        lines.append("")
    lines += notes_for(__file__)
    return "\n".join(lines)


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    return tasks([int(s) for s in args.seeds.split(",")])


def main() -> None:
    validation_main(
        __doc__.splitlines()[0],
        "hare",
        lambda parser: parser.add_argument("--seeds", default="0,1,2,3,4"),
        make_tasks,
        run,
        render,
    )


if __name__ == "__main__":
    main()
