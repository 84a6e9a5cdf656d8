"""Time of one Hare planning pass and one Gavel LP solve, on 1,000 GPUs of three types.

For 100, 1,000 and 5,000 jobs of Gavel's workload (types, 1-8 GPUs, weights),
all waiting at once on 1,000 GPUs (336 V100, 332 P100, 332 K80): one Hare
planning pass (its relaxation LP, then list scheduling of every task) and
one solve of Gavel's max-min fairness LP (both stages). Target: <= 1 s at
1,000 jobs. Prints the median of ``--repeat`` timings.

    python benchmarks/plan_speed.py [--jobs 100,1000,5000] [--repeat 3] [--growth 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from corral.model.cluster_specs import load_cluster
from corral.model.state import SchedulerState
from corral.optimize.gavel_lp import AllocationProblem, max_min_fairness
from corral.perf.speeds import SpeedModel
from corral.policies.rounds.listsched import PlanView
from corral.policies.rounds.planners import HarePlanner
from corral.policies.rounds.workload import build_workload
from corral.traces import load_trace

CLUSTER = "gavel:336:332:332"
TARGET_S = 1.0


def timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="100,1000,5000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--growth", type=float, default=2.0, help="Hare's LP interval ratio")
    args = parser.parse_args()
    cluster = load_cluster(CLUSTER)
    print(f"cluster: {cluster.describe()}")
    print(
        f"{'jobs':>6} {'tasks':>8} {'hare LP (s)':>12} {'hare list (s)':>14} "
        f"{'hare pass (s)':>14} {'gavel LP (s)':>13}"
    )
    for n in (int(x) for x in args.jobs.split(",")):
        jobs = load_trace(
            f"gavel-synthetic:jobs={n},rate=1e9,weights=1,short=1", cluster.total_gpus
        )
        work = build_workload(jobs, cluster)
        idx = np.arange(n)
        view = PlanView(
            now=0.0,
            jobs=idx,
            next_round=np.zeros(n, np.int64),
            placed_in_round=np.zeros(n, np.int64),
            ready=np.zeros(n),
            partial_end=np.full(n, -np.inf),
            prev_gpus=[[] for _ in range(n)],
            gpu_free=np.zeros(cluster.total_gpus),
            gpu_last=np.full(cluster.total_gpus, -1),
            switch_s=0.003,
        )
        planner = HarePlanner(growth=args.growth)
        order_s = timed(lambda: planner.order(work, view), args.repeat)  # noqa: B023
        pass_s = timed(lambda: planner.plan(work, view), args.repeat)  # noqa: B023
        state = SchedulerState(cluster, jobs, SpeedModel())
        problem = AllocationProblem(
            state.type_speed,
            state.gpus,
            cluster.type_gpus,
            state.weight,
        )
        lp_s = timed(lambda: max_min_fairness(problem), args.repeat)  # noqa: B023
        tasks = int((work.rounds * work.tasks).sum())
        print(
            f"{n:>6} {tasks:>8} {order_s:>12.3f} {pass_s - order_s:>14.3f} {pass_s:>14.3f} "
            f"{lp_s:>13.3f}"
        )
        if n == 1000:
            verdict = "meets" if max(pass_s, lp_s) <= TARGET_S else "misses"
            print(f"       at 1,000 jobs: {verdict} the {TARGET_S:g} s target")


if __name__ == "__main__":
    main()
