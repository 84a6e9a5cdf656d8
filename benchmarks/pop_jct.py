"""POP's cost in average JCT on Gavel's own traces: each of Gavel's LP policies run
whole (``pop=1``) and split into 2 and 4 parts, beside the figure Gavel's simulator
printed on the same trace (``benchmarks/data/peers/peer_figures.json``).

The traces are the peers page's: 300 jobs on 8:8:8 GPUs, single-GPU jobs (``s``)
and jobs of 1-8 GPUs (``m``), at two arrival rates. A part must hold the largest
gang in its share of a type, so on the ``m`` traces (8-GPU jobs on types of 8)
no split is possible and the parts stay 1: they are listed to say so.

    python benchmarks/pop_jct.py [--parts 2,4]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corral import Experiment
from corral.policies import make_policy
from corral.policies.gavel import GavelPolicy

DATA = Path(__file__).resolve().parent / "data" / "peers"
RUNS = [  # (the peers page's row, corral policy)
    ("max-min-fairness", "gavel-max-min-fairness"),
    ("finish-time-fairness", "gavel-finish-time-fairness"),
    ("agnostic-max-min-fairness", "gavel-max-min-fairness-agnostic"),
]
TRACES = ["s_l900", "s_l600", "m_l900", "m_l600"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="2,4")
    args = parser.parse_args()
    parts = [int(k) for k in args.parts.split(",")]
    recorded = json.loads((DATA / "peer_figures.json").read_text())["gavel"]
    print("average JCT (hours) on Gavel's 300-job traces, 8:8:8; ratio to the whole LP's "
          "and to Gavel's simulator")  # fmt: skip
    print(f"{'policy':34}{'trace':>8}{'parts':>6}{'JCT h':>8}{'vs whole':>10}{'Gavel h':>9}"
          f"{'vs Gavel':>10}")  # fmt: skip
    worst = 0.0
    for row, name in RUNS:
        for trace in TRACES:
            shape, rate = trace.split("_")
            key = f"{row} {shape} {rate}" if row.startswith("agnostic") else f"{row} {rate}"
            if not row.startswith("agnostic") and shape == "s":
                key = ""  # (Gavel's aware policies were recorded on the m traces only)
            theirs = recorded.get(key, {}).get("avg_jct_h", {}).get("all")
            whole, done = None, set()
            for k in [1, *parts]:
                policy = make_policy(name, pop=k)
                assert isinstance(policy, GavelPolicy)
                if k in done:
                    continue
                result = Experiment(
                    trace=str(DATA / f"gavel_300_{trace}.trace"),
                    cluster="gavel:8:8:8",
                    policies=f"{name}[pop={k}]",
                    preset="gavel-sim",
                ).simulate()
                s = result.state
                jct = float((s.finish_time - s.submit).mean()) / 3600
                whole = jct if k == 1 else whole
                assert whole is not None
                # (the parts a solve can have: a part holds the largest gang)
                cap = int(s.cluster.type_gpus.max() // s.gpus.max())
                split = min(k, cap)
                done |= {j for j in parts if j > k and min(j, cap) == split}  # (the same run)
                if k > 1:
                    worst = max(worst, jct / whole)
                vs_gavel = f"{jct / theirs:>10.3f}" if theirs else f"{'-':>10}"
                shown = f"{theirs:>9.2f}" if theirs else f"{'-':>9}"
                print(f"{name:34}{trace:>8}{split:>6}{jct:>8.2f}"
                      f"{jct / whole:>10.3f}{shown}{vs_gavel}", flush=True)  # fmt: skip
    print(f"largest JCT ratio of a split to the whole LP: {worst:.3f}")


if __name__ == "__main__":
    main()
