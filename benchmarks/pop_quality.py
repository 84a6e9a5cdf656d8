"""POP's allocations against the full LP's, for Gavel's LP policies: the objective
each loses and the time each takes.

The setting is Gavel's at cluster scale: a third each of V100, P100 and K80 GPUs
(``--gpus`` in all), Gavel's typed workload (``gavel-synthetic``: measured
throughputs per job type and GPU type, gangs of 1-8 GPUs with ``--multi``), all
jobs present at once. For each policy and number of jobs, the full problem
(``pop=1``) and POP's parts (``pop=K`` for each ``--parts``, and the size's own
choice) are solved by the policy's own ``_solve``, and the allocation measured
as the objective the policy maximises or minimises:

* max-min fairness (aware and agnostic): the least normalised throughput of a
  job that can run (the max-min level), and the total normalised throughput;
* finish-time fairness: the largest rho (lower is better);
* min makespan: the makespan of the jobs present, 1 / v (lower is better).

Each row: the objective as a ratio to the full LP's, and the solve's time.

    python benchmarks/pop_quality.py [--jobs 1000,2000,5000,10000] [--parts 4,16]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from corral.model.cluster_specs import load_cluster
from corral.model.state import SchedulerState
from corral.optimize.gavel_lp import _max_min_norm
from corral.policies import make_policy
from corral.policies.gavel import GavelPolicy, remaining_steps
from corral.traces.loading import load_trace

POLICIES = [
    "gavel-max-min-fairness",
    "gavel-max-min-fairness-agnostic",
    "gavel-finish-time-fairness",
    "gavel-min-makespan",
]


def state_of(jobs: int, gpus: int, multi: int, seed: int) -> SchedulerState:
    third = gpus // 3
    where = load_cluster(f"gavel:{third}:{third}:{gpus - 2 * third}")
    spec = f"gavel-synthetic:jobs={jobs},rate=3600,multi={multi},seed={seed}"
    table = load_trace(spec, where.total_gpus)
    state = SchedulerState(where, table)
    state.now = float(table.df["submit_time"].max())
    for i in range(len(table)):
        state.arrive(i)
    return state


def allocation(policy: GavelPolicy, state: SchedulerState, active: np.ndarray) -> np.ndarray:
    """The policy's X (jobs x types), rows in ``active``'s order."""
    policy._solve(state, active)
    x = np.zeros((len(active), len(state.cluster.gpu_type_names)))
    row = {int(j): r for r, j in enumerate(active)}
    for combo, share in zip(policy._combos, policy._x, strict=True):
        x[row[combo[0]]] += share
    return x


def objective(name: str, policy: GavelPolicy, state: SchedulerState, active: np.ndarray,
              x: np.ndarray) -> list[tuple[str, float]]:  # fmt: skip
    """(what, value) of the allocation under the policy's own objective (max-min: its
    level, then the total it fills spare capacity with)."""
    problem = policy._problem(state, active)
    throughput = (problem.throughput * x).sum(axis=1)
    can_run = problem.fits().any(axis=1)
    if name.startswith("gavel-max-min-fairness"):
        if name.endswith("agnostic"):  # (its objective sees every type as equally fast)
            sized = problem.gpus[:, None] <= problem.capacity[None, :]
            throughput = (sized * x).sum(axis=1)
            problem.throughput = sized.astype(float)
        level = throughput / _max_min_norm(problem)
        return [("max-min level", float(level[can_run].min())),
                ("total (normalised)", float(level[can_run].sum()))]  # fmt: skip
    remaining = remaining_steps(state, active)
    if name == "gavel-min-makespan":
        with np.errstate(divide="ignore"):
            return [("makespan (s)", float((remaining / throughput)[can_run].max()))]
    elapsed = state.now - state.submit[active]
    isolated = remaining / np.maximum(problem.isolated_throughput(), 1e-6)
    with np.errstate(divide="ignore"):
        rho = (elapsed + remaining / throughput) / isolated
    return [("largest rho", float(rho[can_run].max()))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="1000,2000,5000,10000")
    parser.add_argument("--parts", default="4,16")
    parser.add_argument("--gpus", type=int, default=1002)
    parser.add_argument("--multi", type=int, default=1, help="gangs of 1-8 GPUs (0: 1 GPU)")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = [int(n) for n in args.jobs.split(",")]
    parts = [int(k) for k in args.parts.split(",")]
    print(f"{args.gpus} GPUs (V100, P100, K80 a third each); Gavel's typed workload, "
          f"multi={args.multi}; all jobs present")  # fmt: skip
    print(f"{'policy':<34}{'jobs':>7}{'parts':>10}  {'objective':<19}{'value':>12}"
          f"{'vs full':>9}{'solve':>10}")  # fmt: skip
    for name in args.policies.split(","):
        for n in sizes:
            state = state_of(n, args.gpus, args.multi, args.seed)
            active = np.arange(n)
            full: list[tuple[str, float]] | None = None
            for k in [1, *parts, None]:
                policy = make_policy(name, pop=k)
                assert isinstance(policy, GavelPolicy)
                began = time.perf_counter()
                x = allocation(policy, state, active)
                took = time.perf_counter() - began
                found = objective(name, policy, state, active, x)
                full = found if k == 1 else full
                label = str(k) if k is not None else f"{policy.pop_parts} (auto)"
                for (what, value), (_, whole) in zip(found, full or found, strict=True):
                    ratio = value / whole if whole else float("nan")
                    print(f"{name:<34}{n:>7,}{label:>10}  {what:<19}{value:>12.4g}{ratio:>9.3f}"
                          f"{took:>9.2f}s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
