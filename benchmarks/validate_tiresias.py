"""Tiresias, Gandiva and Philly against the baselines; writes docs/validation/tiresias.md.

Runs, on the whole Philly trace (82,247 jobs) with Philly's cluster scaled so
that the offered load is 0.7, 0.9 and 1.1: fifo (YARN-CS), philly,
tiresias-las, tiresias-gittins, gandiva and srtf (oracle). Then Tiresias'
60-job trace, on its simulator's cluster and on a quarter of it, with
``--preset tiresias-sim``; then the sensitivity of tiresias-las and
tiresias-gittins to K, the thresholds, PROMOTE_KNOB and the Gittins
distribution at load 0.9. Gandiva runs with job types drawn from Gavel's
measured types (``--job-types gavel``) and Gandiva's 0.1 s suspend/resume;
the others pay a kill-and-restart (5.87 s) per preemption.

    python benchmarks/validate_tiresias.py [--workers 2] [--out docs/validation/tiresias.md]
        [--json docs/validation/data/tiresias-summaries.json]
    python benchmarks/validate_tiresias.py --from-json docs/validation/data/tiresias-summaries.json

Takes about 18 minutes with 2 workers. The discussion at the end of the
report is ``validate_tiresias_notes.md``, written by hand from these numbers;
``--from-json`` rewrites the report from saved summaries without re-running.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

LOADS = (0.7, 0.9, 1.1)
POLICIES = ("fifo", "philly", "tiresias-las", "tiresias-gittins", "gandiva", "srtf")
SENSITIVITY: list[tuple[str, str, dict[str, Any]]] = [
    ("tiresias-las", "K=2 (3250)", {"queues": 2}),
    ("tiresias-las", "K=3 (3250/7200), default", {}),
    ("tiresias-las", "K=4 (3250/7200/18000)", {"queues": 4}),
    ("tiresias-las", "K=3, thresholds x0.5", {"thresholds": "1625,3600"}),
    ("tiresias-las", "K=3, thresholds x2", {"thresholds": "6500,14400"}),
    ("tiresias-las", "PROMOTE_KNOB=2", {"promote_knob": 2.0}),
    ("tiresias-las", "PROMOTE_KNOB=8", {"promote_knob": 8.0}),
    ("tiresias-gittins", "online distribution, default", {}),
    ("tiresias-gittins", "yarn-gput1000", {"distribution": "yarn-gput1000"}),
    ("tiresias-gittins", "yarn-gput10000", {"distribution": "yarn-gput10000"}),
    ("tiresias-gittins", "K=4", {"queues": 4}),
    ("tiresias-gittins", "PROMOTE_KNOB=8", {"promote_knob": 8.0}),
]


def run(task: dict[str, Any]) -> dict[str, Any]:
    from corral import Experiment
    from corral.sim.metrics import summarise

    t0 = time.perf_counter()
    gandiva = task["policy"] == "gandiva"
    experiment = Experiment(
        trace=task["trace"],
        max_jobs=task.get("jobs"),  # the trace's first jobs only
        job_types="gavel" if gandiva else None,
        cluster=task["cluster"],
        cluster_scale=task.get("scale", 1.0),
        policies=task["policy"],
        policy_opt=[f"{k}={v}" for k, v in task.get("options", {}).items()],
        switch_cost="gandiva" if gandiva else "kill-restart",
        preset=task.get("preset"),
        seed=task.get("seed", 0),  # (what it draws: Gandiva's job types)
    )
    result = experiment.simulate()
    summary = summarise(result)
    summary.update(
        {
            "task": task,
            "gpus": result.cluster.total_gpus,
            "offered_load": result.jobs.offered_load(result.cluster.total_gpus),
            "total_s": time.perf_counter() - t0,
        }
    )
    return {k: v for k, v in summary.items() if not isinstance(v, float) or v == v}


def scale_for(load: float, first: int | None = None) -> float:
    """Scale of Philly's cluster at which the trace (its ``first`` jobs) offers ``load``."""
    from corral.model.cluster_specs import load_cluster
    from corral.traces import load_trace

    full = load_cluster("philly")
    jobs = load_trace("philly", full.total_gpus)
    if first:
        jobs = jobs.head(first)
    return jobs.offered_load(full.total_gpus) / load


def hours(value: float | None) -> str:
    return "-" if value is None else f"{value / 3600:,.2f}"


def table(rows: list[dict[str, Any]], label: str = "policy") -> list[str]:
    out = [
        f"| {label} | avg JCT (h) | median JCT (h) | p95 JCT (h) | avg queueing (h) "
        "| preemptions | sim (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        name = r.get("label", r["policy"])
        out.append(
            f"| {name} | {hours(r['avg_jct_s'])} | {hours(r['median_jct_s'])} "
            f"| {hours(r['p95_jct_s'])} | {hours(r['avg_queueing_s'])} "
            f"| {r['preemptions']:,} | {r['wall_s']:.1f} |"
        )
    return out


def ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
    return float(a["avg_jct_s"]) / float(b["avg_jct_s"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="docs/validation/tiresias.md")
    parser.add_argument("--json", default=None, help="also write every summary here")
    parser.add_argument(
        "--from-json", default=None, help="rewrite the report from summaries saved with --json"
    )
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        write_report(saved["results"], Path(args.out), saved["took_s"])
        print(f"wrote {args.out}")
        return

    tasks: list[dict[str, Any]] = []
    for load in LOADS:
        scale = scale_for(load)
        for policy in POLICIES:
            tasks.append(
                {
                    "kind": "load",
                    "load": load,
                    "policy": policy,
                    "trace": "philly",
                    "cluster": "philly",
                    "scale": scale,
                }
            )
    for cluster in ("tiresias", "uniform:4x4:P100"):
        for policy in POLICIES:
            tasks.append(
                {
                    "kind": "t60",
                    "policy": policy,
                    "trace": "tiresias-60",
                    "cluster": cluster,
                    "preset": "tiresias-sim",
                }
            )
    scale = scale_for(0.9)
    for policy, label, options in SENSITIVITY:
        tasks.append(
            {
                "kind": "sens",
                "policy": policy,
                "label": label,
                "options": options,
                "trace": "philly",
                "cluster": "philly",
                "scale": scale,
            }
        )
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(run, tasks))
    for r in results:
        if "label" in r["task"]:
            r["label"] = r["task"]["label"]
    took = time.perf_counter() - started
    if args.json:
        saved = {"results": results, "took_s": took}
        Path(args.json).write_text(json.dumps(saved, indent=1, default=str))
    write_report(results, Path(args.out), took)
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")


def write_report(results: list[dict[str, Any]], out: Path, took: float) -> None:
    lines = [
        "# Tiresias, Gandiva and Philly against the baselines",
        "",
        "Written by `benchmarks/validate_tiresias.py` "
        f"({len(results)} simulations, {took / 60:.0f} minutes on a 2-core machine).",
        "",
        "Settings: every policy with its defaults; preemption costs a kill-and-restart "
        "(5.87 s) except for Gandiva, whose suspend/resume costs 0.1 s and whose jobs get "
        "types drawn from Gavel's measured ones (`--job-types gavel`) so that packing has "
        "measurements to use. `srtf` is an oracle (it knows durations).",
        "",
    ]
    by_load: dict[float, dict[str, dict[str, Any]]] = {}
    for r in results:
        if r["task"]["kind"] == "load":
            by_load.setdefault(r["task"]["load"], {})[r["policy"].split(" ")[0]] = r
    lines += ["## Whole Philly trace (82,247 jobs) at three loads", ""]
    for load, rows in sorted(by_load.items()):
        any_row = next(iter(rows.values()))
        lines += [
            f"### Offered load {any_row['offered_load']:.2f} "
            f"({any_row['gpus']} GPUs, target {load})",
            "",
            *table([rows[p] for p in POLICIES if p in rows]),
            "",
        ]
    lines += ["### Ratios of average JCT, next to the papers", ""]
    lines += [
        "| load | fifo / tiresias-gittins | fifo / tiresias-las | gandiva / tiresias-las "
        "| tiresias-las / srtf | tiresias-gittins / srtf | philly / tiresias-las |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for load, rows in sorted(by_load.items()):
        lines.append(
            f"| {load} | {ratio(rows['fifo'], rows['tiresias-gittins']):.1f} "
            f"| {ratio(rows['fifo'], rows['tiresias-las']):.1f} "
            f"| {ratio(rows['gandiva'], rows['tiresias-las']):.2f} "
            f"| {ratio(rows['tiresias-las'], rows['srtf']):.2f} "
            f"| {ratio(rows['tiresias-gittins'], rows['srtf']):.2f} "
            f"| {ratio(rows['philly'], rows['tiresias-las']):.2f} |"
        )
    lines += [
        "",
        "Papers: Tiresias reports up to 5.5x lower average JCT than YARN-CS (60-GPU "
        "testbed) and about 2x lower than Gandiva, and comes close to SRTF.",
        "",
        "## Tiresias' 60-job trace, `--preset tiresias-sim`",
        "",
        "The preset reproduces the assumptions of Tiresias' simulator: GPUs counted "
        "without placement constraints, no locality slowdown, no switching cost, 3 queues "
        "at 3,250 / 7,200 GPU-seconds, Gittins from `yarn-gput1000` with delta 3,250, read "
        "from that simulator's own rounded table.",
        "",
    ]
    for cluster in ("tiresias", "uniform:4x4:P100"):
        rows = {
            r["policy"].split(" ")[0]: r
            for r in results
            if r["task"]["kind"] == "t60" and r["task"]["cluster"] == cluster
        }
        any_row = next(iter(rows.values()))
        lines += [
            f"### On `{cluster}` ({any_row['gpus']} GPUs, offered load "
            f"{any_row['offered_load']:.2f})",
            "",
            *table([rows[p] for p in POLICIES if p in rows]),
            "",
        ]
    sens = [r for r in results if r["task"]["kind"] == "sens"]
    lines += [
        "## Sensitivity at load 0.9 (whole Philly trace)",
        "",
        *table(sens, "setting"),
        "",
    ]
    notes = Path(__file__).with_name("validate_tiresias_notes.md")
    if notes.exists():
        lines += [notes.read_text(encoding="utf-8").rstrip(), ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
