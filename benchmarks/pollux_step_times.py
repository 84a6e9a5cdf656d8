"""Are corral's step times the ones Pollux's artifact would charge, where Pollux runs?

corral's simulator runs a Pollux job at the communication model's step time
for its layout and local batch (``corral.perf.communication``, fitted to the
placements Pollux measured); Pollux's artifact interpolates its measurements
directly. This script runs corral's Pollux (set up as the artifact runs it)
on Pollux's workloads, records every running job's configuration at every
pass (model, GPUs per node, micro-batch, gradient-accumulation passes) with
the GPU-seconds it ran there, and prints corral's step time against the
artifact's for the same configurations, weighted by GPU time, per model and
per layout (one GPU, one node, across nodes).

The artifact's side needs its simulator's code (public, Apache-2.0, not part
of corral) and its requirements (an older pandas), so the comparison is a
second step, run in the artifact's environment: it reads the configurations
saved by the first and imports ``applications.py`` from the artifact's
simulator directory. Configurations below the smallest local batch it
measured (which it cannot interpolate) are counted apart.

    python benchmarks/pollux_step_times.py --workloads 6 --save configs.json
    ARTIFACT_PYTHON benchmarks/pollux_step_times.py --compare configs.json \
        --artifact-simulator DIR
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections import defaultdict
from typing import Any

CLUSTER = "uniform:16x4:T4"


def record(workloads: str) -> list[dict[str, Any]]:
    """Run corral's Pollux on the workloads; each configuration it ran jobs
    in, with corral's step time there and the GPU-seconds run in it."""
    from corral.model.cluster_specs import load_cluster
    from corral.model.state import SchedulerState
    from corral.perf.communication import Span, model_profile
    from corral.perf.pollux_models import largest_local_batch, micro_batches
    from corral.policies.pollux import Pollux
    from corral.sim.engine import Simulator
    from corral.sim.result import SimConfig
    from corral.traces import load_trace

    seconds: dict[tuple[str, tuple[int, ...], float, int], float] = defaultdict(float)

    class RecordingPollux(Pollux):
        """Pollux that notes, at each pass, where each running job ran since
        the last one (its GPUs and batch do not change between passes)."""

        last = 0.0

        def schedule(self, state: SchedulerState):  # type: ignore[no-untyped-def]
            elapsed, self.last = state.now - self.last, state.now
            for j in state.running.array().tolist():
                gpus = state.alloc[j]
                if not gpus or j not in self.batches:
                    continue
                model = state.model[j]
                per_gpu = self.batches[j] / len(gpus)
                passes, local = micro_batches(per_gpu, largest_local_batch(model))
                span = Span.of(state.cluster, gpus)
                seconds[(model, span.per_node, round(local, 3), passes)] += elapsed * len(gpus)
            return super().schedule(state)

    cluster = load_cluster(CLUSTER)
    for w in workloads.split(","):
        jobs = load_trace(f"pollux-{w}", cluster.total_gpus)
        Simulator(jobs, cluster, RecordingPollux(initial_batch="model"), SimConfig()).run()
    rows = []
    for (model, per_node, local, passes), s in sorted(seconds.items()):
        profile = model_profile(model)
        assert profile is not None
        step = profile.step_time(Span(per_node), cluster.links, local_batch=local)
        step += (passes - 1) * profile.compute_time(local)
        rows.append(
            {
                "model": model,
                "per_node": list(per_node),
                "local": local,
                "passes": passes,
                "corral_step": step,
                "gpu_seconds": s,
            }
        )
    return rows


def layout(per_node: tuple[int, ...]) -> str:
    if len(per_node) > 1:
        return "across nodes"
    return "one node" if per_node[0] > 1 else "one GPU"


def compare(rows: list[dict[str, Any]], simulator_dir: str) -> None:
    """Print corral's step times over the artifact's, weighted by GPU time."""
    sys.path.insert(0, simulator_dir)
    applications = importlib.import_module("applications").APPLICATIONS
    weight: dict[tuple[str, str], float] = defaultdict(float)
    ratio: dict[tuple[str, str], float] = defaultdict(float)
    unmeasured: dict[str, float] = defaultdict(float)
    for row in rows:
        model, per_node, s = row["model"], tuple(row["per_node"]), row["gpu_seconds"]
        try:
            step, sync = applications[model].get_throughput(per_node, row["local"])
        except ValueError:  # below the smallest local batch measured
            unmeasured[model] += s
            continue
        theirs = float(step) + (row["passes"] - 1) * float(step - sync)
        where = layout(per_node)
        for key in ((model, where), (model, "all"), ("all", where), ("all", "all")):
            weight[key] += s
            ratio[key] += s * row["corral_step"] / theirs
    print("corral's step time over the artifact's, weighted by GPU time:")
    print(f"{'model':<12} {'layout':<13} {'GPU-hours':>9} {'ratio':>6}")
    for key in sorted(weight):
        share = ratio[key] / weight[key]
        print(f"{key[0]:<12} {key[1]:<13} {weight[key] / 3600:>9.1f} {share:>6.3f}")
    for model, s in sorted(unmeasured.items()):
        print(f"{model}: {s / 3600:.1f} GPU-hours below the smallest local batch measured")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="6")
    parser.add_argument("--save", default=None, help="write the configurations here (JSON)")
    parser.add_argument("--compare", default=None, help="configurations saved by --save")
    parser.add_argument("--artifact-simulator", default=None)
    args = parser.parse_args()
    if args.compare:
        if not args.artifact_simulator:
            parser.error("--compare needs --artifact-simulator")
        with open(args.compare, encoding="utf-8") as fh:
            compare(json.load(fh), args.artifact_simulator)
        return
    rows = record(args.workloads)
    hours = sum(r["gpu_seconds"] for r in rows) / 3600
    print(f"workloads {args.workloads}: {len(rows)} configurations, {hours:.0f} GPU-hours")
    if args.save:
        with open(args.save, "w", encoding="utf-8") as fh:
            json.dump(rows, fh)


if __name__ == "__main__":
    main()
