"""corral beside the peers' own simulators, on the peers' own inputs.

Gavel: four 300-job traces Gavel's generator wrote (bundled in
``benchmarks/data/peers``: multi-GPU jobs and single-GPU ones, each at two
arrival rates), cluster 8:8:8; max-min fairness and finish-time fairness
(Gavel's heterogeneity-aware ``*_perf`` policies), then its baselines
(heterogeneity-agnostic max-min fairness, FIFO) and its Gandiva and AlloX, each
beside corral's policy of that name under ``--preset gavel-sim``: average JCT
per job class (GPUs per job), jobs left unfinished, and wall time.

Tiresias: the first 10,000 jobs of the bundled Philly trace written in
Tiresias' CSV format (integer seconds, model ``resnet50``), 64 GPUs (16 nodes
of 4), GPU counting; 2D-LAS and 2D-Gittins and the paper's two baselines
(YARN-CS as FIFO, and SRTF), corral under ``--preset tiresias-sim``: average
JCT, preemptions and wall time, and the paper's claims as ratios in each.

Without a peer checkout corral's figures are compared with the figures the
peers printed on the same inputs, recorded in
``benchmarks/data/peers/peer_figures.json``. To re-run a peer side by side,
point an environment variable at a local checkout (its dependencies
installed; nothing of it is copied into corral):

    GAVEL_SIM=<gavel>/scheduler  [GAVEL_PYTHON=python3]
    TIRESIAS_SIM=<tiresias>/simulator  [TIRESIAS_PYTHON=python2]

    python benchmarks/validate_peers.py [--only gavel|tiresias] [--json out.json]

Wall times are whole processes (interpreter start, imports, trace loading and
simulation) for both sides: the peer's driver script, and a process that calls
corral's library; corral's simulation alone is printed beside it. The
command a user runs, ``corral sim``, adds its command-line parsing, printed
table and output files (0.2-0.3 s on the Gavel traces; timed separately in
``docs/validation/peers.md``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "peers"
GAVEL_BASELINES = [  # (name, corral policy, Gavel policy, trace shapes)
    ("agnostic-max-min-fairness", "gavel-max-min-fairness-agnostic", "max_min_fairness", "ms"),
    ("fifo", "fifo", "fifo", "ms"),
    ("gandiva", "gandiva", "gandiva", "ms"),
    ("allox", "allox", "allox", "s"),  # (Gavel's AlloX takes single-GPU jobs only)
]
"""Gavel's heterogeneity-agnostic max-min fairness (its LAS baseline) and FIFO, and
its policies named for other papers' systems (Gandiva, AlloX): the baselines its
paper is measured against, each beside corral's policy of that name."""
GAVEL_RUNS = [  # (name, corral policy, Gavel policy, trace)
    *[
        (f"{name} {which}", f"gavel-{name}", f"{name.replace('-', '_')}_perf", f"m_{which}")
        for name in ("max-min-fairness", "finish-time-fairness")
        for which in ("l900", "l600")
    ],
    *[
        (f"{name} {shape} {which}", ours, theirs, f"{shape}_{which}")
        for name, ours, theirs, shapes in GAVEL_BASELINES
        for shape in shapes
        for which in ("l900", "l600")
    ],
]
"""Traces: ``m`` Gavel's generator with multi-GPU jobs (``-m``), ``s`` single-GPU
jobs only; ``l900`` and ``l600`` its mean gaps between arrivals (s)."""
TIRESIAS_RUNS = [
    ("dlas-gpu", "tiresias-las"),
    ("dlas-gpu-gittins", "tiresias-gittins"),
    ("fifo", "fifo"),  # the paper's YARN-CS baseline: arrival order, head-of-line blocking
    ("shortest", "srtf"),  # its SRTF: shortest remaining time first, preemptive, oracle
    ("shortest-gpu", "srtf[by=gpu-time]"),  # the same by GPU-time left (time x GPUs)
]
"""(the peer's schedule, corral's policy): Tiresias' two schedulers and the two
baselines its paper measures them against (Tiresias, NSDI 2019: up to 5.5x better
average JCT than YARN-CS, and close to SRTF, which needs every job's duration)."""
CLAIMS = [
    ("YARN-CS / 2D-LAS", "fifo", "dlas-gpu"),
    ("YARN-CS / 2D-Gittins", "fifo", "dlas-gpu-gittins"),
    ("2D-LAS / SRTF", "dlas-gpu", "shortest"),
    ("2D-Gittins / SRTF", "dlas-gpu-gittins", "shortest"),
]
"""The paper's claims as ratios of average JCT, read in both simulators."""
TIRESIAS_JOBS = 10_000
TIRESIAS_CLUSTER = "uniform:16x4:V100"


def gavel_trace(which: str) -> Path:
    return DATA / f"gavel_300_{which}.trace"


# ------------------------------------------------------------------ corral's side
def corral_one(task: dict[str, Any]) -> dict[str, Any]:
    """One corral run, in this (fresh) process: figures per job class."""
    from corral import Experiment

    result = Experiment(
        trace=task["trace"], cluster=task["cluster"], policies=task["policy"], preset=task["preset"]
    ).simulate()
    s = result.state
    jct = s.finish_time - s.submit
    by_class: dict[str, float] = {}
    for g in sorted(set(s.gpus.tolist())):
        by_class[str(g)] = float(jct[s.gpus == g].mean())
    by_class["all"] = float(jct.mean())
    return {
        "avg_jct_s": by_class,
        "preemptions": int(s.preemptions.sum()),
        "unfinished": int((jct != jct).sum()),
        "sim_s": result.wall_s,
    }


def corral_run(task: dict[str, Any]) -> dict[str, Any]:
    """A corral run as a user's process: timed from the interpreter's start."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--corral-one", json.dumps(task)],
        capture_output=True,
        text=True,
        check=True,
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return figures | {"wall_s": time.perf_counter() - t0}


# -------------------------------------------------------------------- the peers
def run_gavel(checkout: Path, policy: str, trace: Path) -> dict[str, Any]:
    """Gavel's simulator on a trace; average JCT per job class from its per-job lines."""
    python = os.environ.get("GAVEL_PYTHON", "python3")
    args = [python, "scripts/drivers/simulate_scheduler_with_trace.py", "-t", str(trace)]
    args += ["-p", policy, "-c", "8:8:8", "--solver", "ECOS", "--seed", "0"]
    t0 = time.perf_counter()
    out = subprocess.run(args, cwd=checkout, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    sizes = [int(line.split("\t")[6]) for line in trace.read_text().splitlines() if line]
    jct: dict[int, float] = {
        int(m[1]): float(m[2]) for m in re.finditer(r"^Job (\d+): ([\d.]+)$", out.stdout, re.M)
    }
    by_class: dict[str, float] = {}
    for g in sorted(set(sizes)):
        values = [v for j, v in jct.items() if sizes[j] == g]
        by_class[str(g)] = sum(values) / len(values)
    by_class["all"] = sum(jct.values()) / len(jct)
    return {"avg_jct_s": by_class, "unfinished": len(sizes) - len(jct), "wall_s": wall}


def write_tiresias_trace(path: Path) -> None:
    """The first 10,000 Philly jobs as Tiresias' CSV (whole seconds, as it reads them)."""
    from corral.traces import TraceOptions, load_trace

    jobs = load_trace("philly", 64, TraceOptions(max_jobs=TIRESIAS_JOBS)).df
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration"])
        for k, row in enumerate(jobs.itertuples(index=False)):
            duration = max(1, round(row.duration))
            w.writerow([k + 1, row.num_gpus, round(row.submit_time), 1, "resnet50", duration])


def run_tiresias(checkout: Path, schedule: str, trace: Path) -> dict[str, Any]:
    """Tiresias' simulator on a trace; average JCT and preemptions from its job log."""
    python = os.environ.get("TIRESIAS_PYTHON", "python2")
    with tempfile.TemporaryDirectory() as log:
        args = [python, "run_sim.py", f"--trace_file={trace}", f"--schedule={schedule}"]
        args += ["--scheme=count", "--num_switch=1", "--num_node_p_switch=16"]
        args += ["--num_gpu_p_node=4", f"--log_path={log}"]
        t0 = time.perf_counter()
        subprocess.run(args, cwd=checkout, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        with open(Path(log) / "job.csv", newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    jct = [float(r["JCT"]) for r in rows]
    return {
        "avg_jct_s": {"all": sum(jct) / len(jct)},
        "preemptions": sum(int(r["preempt"]) for r in rows),
        "wall_s": wall,
    }


# --------------------------------------------------------------------- reports
def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def compare_gavel(recorded: dict[str, Any]) -> list[dict[str, Any]]:
    checkout = os.environ.get("GAVEL_SIM")
    rows = []
    print("\nGavel, 300 jobs on 8:8:8 (average JCT in hours per class)")
    print(f"{'run':36} {'class':>5} {'Gavel':>8} {'corral':>8} {'ratio':>6}")
    for name, ours, theirs, which in GAVEL_RUNS:
        trace = gavel_trace(which)
        task = {"cluster": "gavel:8:8:8", "trace": str(trace), "policy": ours}
        mine = corral_run(task | {"preset": "gavel-sim"})
        if checkout:
            peer = run_gavel(Path(checkout), theirs, trace)
            source = "re-run"
        else:
            peer = {
                "avg_jct_s": {k: v * 3600 for k, v in recorded[name]["avg_jct_h"].items()},
                "wall_s": recorded[name]["wall_s"],
                "unfinished": recorded[name].get("unfinished", 0),
            }
            source = "recorded"
        for cls, value in mine["avg_jct_s"].items():
            theirs_s = peer["avg_jct_s"].get(cls)
            shown = f"{theirs_s / 3600:8.2f}" if theirs_s is not None else f"{'-':>8}"
            print(f"{name:36} {cls:>5} {shown} {value / 3600:8.2f} {ratio(value, theirs_s):>6}")
        speed = peer["wall_s"] / mine["wall_s"]
        print(
            f"{'':36} unfinished: Gavel {peer['unfinished']}, corral {mine['unfinished']}; wall:"
            f" Gavel {peer['wall_s']:.2f} s ({source}), corral {mine['wall_s']:.2f} s"
            f" (simulation {mine['sim_s']:.2f} s): corral {speed:.2f}x faster"
        )
        rows.append({"peer": "gavel", "run": name, "corral": mine, "gavel": peer, "source": source})
    return rows


def compare_tiresias(recorded: dict[str, Any]) -> list[dict[str, Any]]:
    checkout = os.environ.get("TIRESIAS_SIM")
    rows = []
    print(f"\nTiresias, first {TIRESIAS_JOBS:,} Philly jobs on 64 GPUs")
    print(f"{'policy':17} {'measure':12} {'Tiresias':>10} {'corral':>10} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "philly_10000.csv"
        write_tiresias_trace(trace)
        for theirs, ours in TIRESIAS_RUNS:
            task = {"cluster": TIRESIAS_CLUSTER, "trace": str(trace), "policy": ours}
            mine = corral_run(task | {"preset": "tiresias-sim"})
            if checkout:
                peer, source = run_tiresias(Path(checkout), theirs, trace), "re-run"
            else:
                r = recorded[theirs]
                peer = r | {"avg_jct_s": {"all": r["avg_jct_s"]}}
                source = "recorded"
            a, b = mine["avg_jct_s"]["all"], peer["avg_jct_s"]["all"]
            print(f"{theirs:17} {'avg JCT (s)':12} {b:10,.0f} {a:10,.0f} {ratio(a, b):>6}")
            p, q = mine["preemptions"], peer["preemptions"]
            print(f"{'':17} {'preemptions':12} {q:10,} {p:10,} {ratio(p, q):>6}")
            speed = peer["wall_s"] / mine["wall_s"]
            print(
                f"{'':17} wall: Tiresias {peer['wall_s']:.1f} s ({source}), corral "
                f"{mine['wall_s']:.2f} s (simulation {mine['sim_s']:.2f} s): "
                f"corral {speed:.1f}x faster"
            )
            row = {"peer": "tiresias", "run": theirs, "source": source}
            rows.append(row | {"corral": mine, "tiresias": peer})
    print_claims(rows)
    return rows


def print_claims(rows: list[dict[str, Any]]) -> None:
    """The paper's claims (over YARN-CS, against SRTF) as each simulator reads them."""
    sides = ("tiresias", "corral")
    jct = {(r["run"], side): r[side]["avg_jct_s"]["all"] for r in rows for side in sides}
    print("\nThe paper's claims, as ratios of average JCT (paper: up to 5.5x over YARN-CS;")
    print("close to SRTF)")
    print(f"{'ratio':22} {'Tiresias':>9} {'corral':>9}")
    for name, top, bottom in CLAIMS:
        cells = [ratio(jct.get((top, side)), jct.get((bottom, side))) for side in sides]
        print(f"{name:22} {cells[0]:>9} {cells[1]:>9}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=["gavel", "tiresias"], default=None)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--corral-one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.corral_one:
        print(json.dumps(corral_one(json.loads(args.corral_one))))
        return
    recorded = json.loads((DATA / "peer_figures.json").read_text(encoding="utf-8"))
    rows: list[dict[str, Any]] = []
    if args.only in (None, "gavel"):
        rows += compare_gavel(recorded["gavel"])
    if args.only in (None, "tiresias"):
        rows += compare_tiresias(recorded["tiresias"])
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
