"""Liquid's claims re-run in simulation; writes docs/validation/liquid.md.

Liquid (IEEE TPDS 2021) reports that its network-efficient scheduling speeds
jobs' execution up by 18% on average and shortens the average JCT by 21%
against other schedulers, that its random-forest estimates are accurate, and
that pre-scheduling data transfer and fine-grained GPU sharing each help.

Workload: the whole Philly trace (82,247 jobs) with Gavel's job types (so that
small jobs sharing a GPU have measured pair speeds) on Philly's cluster x 0.17
(422 GPUs). Schemes, each a first-come-first-served queue without preemption
so that only the part under test differs:

* ``fifo``: YARN-CS order with head-of-line blocking, consolidated placement;
* ``liquid``: Liquid's queue (skipping jobs that do not fit) with its network
  best fit and burst packing; ``liquid (consolidate)``: the same queue with
  corral's consolidating placement instead;
* with a 60-s launch phase at every start: ``liquid +launch`` (no
  pre-scheduling), ``liquid +launch +pre-scheduling``, and that plus sharing
  by one-GPU jobs predicted to run 15 minutes or less (``+sharing``).

Figures: average JCT and wait; *execution stretch* = (finish - first start) /
run time alone (what network-aware placement shortens: a gang spread over
nodes or racks runs slower); launch seconds hidden by pre-scheduling. The
estimator is scored separately: jobs in submit order, in blocks of 2,000,
each predicted by a forest trained on the jobs that ended before the block
began, against the owner's mean so far (R^2 and RMSE of log run time).

    python benchmarks/validate_liquid.py [--workers 2] [--jobs N]
    python benchmarks/validate_liquid.py --from-json docs/validation/data/liquid-results.json
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from typing import Any

from validation_io import notes_for, option_words, philly_with_gavel_types, validation_main

LAUNCH = 60.0
SMALL = 900.0
SCHEMES: list[tuple[str, str, str | None, dict[str, Any]]] = [
    ("fifo", "fifo", None, {}),
    ("liquid", "liquid", None, {}),
    ("liquid (consolidate)", "liquid", "consolidate", {}),
    ("liquid +launch", "liquid", None, {"launch": LAUNCH, "prescheduling": False}),
    ("liquid +launch +pre-scheduling", "liquid", None, {"launch": LAUNCH}),
    ("liquid +launch +pre-scheduling +sharing", "liquid", None, {"launch": LAUNCH, "small": SMALL}),
]


def load(jobs: int | None) -> tuple[Any, Any]:
    from corral.model.cluster_specs import load_cluster
    from corral.traces import TraceOptions, load_trace

    cluster = load_cluster("philly", scale=0.17)
    table = load_trace("philly", cluster.total_gpus, TraceOptions(max_jobs=jobs, job_types="gavel"))
    return cluster, table


def run(task: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    t0 = time.perf_counter()
    out = dict(task)
    if task["scheme"] == "estimator":
        cluster, jobs = load(task["jobs"])
        out |= score_estimator(jobs, cluster)
    else:
        result = philly_with_gavel_types(
            task["jobs"],
            task["policy"],
            placement=task["placement"],
            policy_opt=option_words(task["options"]),
        ).simulate()
        s = result.state
        done = np.isfinite(s.finish_time)
        stretch = (s.finish_time - s.first_start)[done] / s.duration[done]
        multi = s.gpus[done] > 1
        out |= {
            "avg_jct_h": float(np.mean((s.finish_time - s.submit)[done]) / 3600),
            "avg_wait_h": float(np.mean((s.first_start - s.submit)[done]) / 3600),
            "stretch": float(stretch.mean()),
            "stretch_multi": float(stretch[multi].mean()),
            "launch_paid_h": float(s.overhead.sum() / 3600),
            "sim_s": round(result.wall_s, 1),
        }
        counts = getattr(result.policy, "counts", None)
        if counts:
            out["counts"] = dict(counts)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def score_estimator(jobs: Any, cluster: Any, block: int = 2000) -> dict[str, Any]:
    """Online scores of the run-time forest against two simple baselines. Each job is
    predicted at its submission, from the jobs finished by then (taken as finished at
    submit + run time, before any queueing: what the estimator could know at best);
    the forest is refitted every ``block`` finished jobs, as in the policy."""
    import numpy as np

    from corral.estimate.requirements import RunTimeEstimator
    from corral.model.state import SchedulerState

    state = SchedulerState(cluster, jobs)
    est = RunTimeEstimator(refit_every=block)
    end = state.submit + state.duration
    by_end = np.argsort(end, kind="stable")
    order = np.argsort(state.submit, kind="stable")
    learned = 0
    truth: list[float] = []
    groups: dict[int, tuple[Any, list[list[float]]]] = {}  # fit number -> (model, rows)
    owner: list[float] = []
    owners: dict[str, list[float]] = {}
    vc_recent: list[float] = []
    vcs: dict[str, deque[float]] = {}
    logs: list[float] = []
    for i in order.tolist():
        now = state.submit[i]
        while learned < len(by_end) and end[by_end[learned]] <= now:
            j = int(by_end[learned])
            logged = float(np.log(state.duration[j]))
            est.observe(state, j, float(state.duration[j]))
            owners.setdefault(state.user[j], []).append(logged)
            vcs.setdefault(state.vc[j], deque(maxlen=50)).append(logged)
            logs.append(logged)
            learned += 1
        if est.model is None:
            continue
        groups.setdefault(est.fits, (est.model, []))[1].append(est.features(state, i))
        truth.append(float(np.log(state.duration[i])))
        past = owners.get(state.user[i])
        team = vcs.get(state.vc[i])
        fallback = float(np.median(logs)) if not (past and team) else 0.0
        owner.append(float(np.mean(past)) if past else fallback)
        vc_recent.append(float(np.mean(team)) if team else fallback)
    forest = np.concatenate(
        [model.predict(np.nan_to_num(np.asarray(x), nan=-1.0)) for model, x in groups.values()]
    )
    t, f, o = np.array(truth), forest, np.array(owner)

    def scores(pred: np.ndarray) -> dict[str, float]:
        rmse = float(np.sqrt(np.mean((pred - t) ** 2)))
        r2 = float(1 - np.sum((pred - t) ** 2) / np.sum((t - t.mean()) ** 2))
        return {"rmse": rmse, "r2": r2}

    return {
        "scored": len(t),
        "forest": scores(f),
        "owner_mean": scores(o),
        "vc_recent": scores(np.array(vc_recent)),
        "fits": est.fits,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=0, help="0: the whole trace")


def make_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    jobs = args.jobs or None
    tasks = [
        {"scheme": label, "policy": p, "placement": pl, "options": o, "jobs": jobs}
        for label, p, pl, o in SCHEMES
    ]
    tasks.append(
        {"scheme": "estimator", "policy": "", "placement": None, "options": {}, "jobs": jobs}
    )
    return tasks


def render(results: list[dict[str, Any]]) -> str:
    by = {r["scheme"]: r for r in results}
    lines = [
        "# Liquid: network-efficient placement, estimates, pre-scheduling, sharing, re-run",
        "",
        "Generated by `benchmarks/validate_liquid.py` (see its docstring for the set-up): "
        "the whole Philly trace with Gavel's job types, 422 GPUs.",
        "",
        "| scheme | avg JCT (h) | avg wait (h) | execution stretch | of multi-GPU jobs "
        "| launch paid (h) | sim (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, *_ in SCHEMES:
        r = by.get(label)
        if r:
            lines.append(
                f"| {label} | {r['avg_jct_h']:.2f} | {r['avg_wait_h']:.2f} | {r['stretch']:.3f} "
                f"| {r['stretch_multi']:.3f} | {r['launch_paid_h']:,.0f} | {r['sim_s']} |"
            )
    full = by.get("liquid +launch +pre-scheduling +sharing", {}).get("counts")
    if full:
        lines += [
            "",
            f"With every part on: {full['batches']:,} bursts packed, {full['prestaged']:,} jobs "
            f"pre-staged, {full['shared']:,} small jobs started on a shared GPU.",
        ]
    est = by.get("estimator")
    if est:
        f, o = est["forest"], est["owner_mean"]
        lines += [
            "",
            f"Run-time estimates (log seconds), {est['scored']:,} jobs scored online, "
            f"{est['fits']} fits:",
            "",
            "| estimator | RMSE | R^2 |",
            "|---|---:|---:|",
            f"| random forest | {f['rmse']:.3f} | {f['r2']:.3f} |",
            f"| owner's mean so far | {o['rmse']:.3f} | {o['r2']:.3f} |",
            *(
                [
                    f"| the VC's last 50 finished jobs | {est['vc_recent']['rmse']:.3f} "
                    f"| {est['vc_recent']['r2']:.3f} |"
                ]
                if "vc_recent" in est
                else []
            ),
        ]
    lines.append("")
    return "\n".join(lines + notes_for(__file__))


if __name__ == "__main__":
    validation_main("Liquid's claims, re-run", "liquid", add_arguments, make_tasks, run, render)
