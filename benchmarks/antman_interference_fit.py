"""Can Gavel's measured pairs tell how much a packed job slows its partner?

AntMan's claim that guaranteed jobs keep their speed rests on its GPU
operator manager giving the guaranteed job's kernels priority; corral states
it as an input (``slowdown``). One way to derive it instead would be a model
of each job type's GPU busy fraction u, fitted to the pairs Gavel measured
packed on a V100 without priority (each job's throughput relative to alone),
from which a priority scheduler's split would follow (the guaranteed job
keeps u_g, the other gets what is left). This script fits two such models
(max-min shares of GPU time, and proportional sharing) by least squares and
prints how much of the measured pair throughputs they explain.

    python benchmarks/antman_interference_fit.py
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from corral.perf.throughputs import PAIR_GPU, gavel_throughputs


def measured_pairs() -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(job types, index of a, index of b, a's and b's throughput relative to alone)
    for every single-GPU pair Gavel measured fitting together."""
    table = gavel_throughputs()
    rows = []
    for a, partners in table.paired[PAIR_GPU].items():
        for b in partners:
            if a[1] != 1 or b[1] != 1:
                continue
            rel = table.relative_pair(a, b)
            if rel is not None and min(rel) > 0:
                rows.append((a[0], b[0], *rel))
    types = sorted({r[0] for r in rows} | {r[1] for r in rows})
    at = {name: k for k, name in enumerate(types)}
    a = np.array([at[r[0]] for r in rows])
    b = np.array([at[r[1]] for r in rows])
    return types, a, b, np.array([r[2] for r in rows]), np.array([r[3] for r in rows])


def max_min(u_self: np.ndarray, u_other: np.ndarray) -> np.ndarray:
    """Relative speed when GPU time is shared max-min fairly between two jobs
    that alone keep it busy u_self and u_other of the time."""
    share = np.where(
        u_self + u_other <= 1,
        u_self,
        np.where(u_self <= 0.5, u_self, np.where(u_other <= 0.5, 1 - u_other, 0.5)),
    )
    return share / u_self


def proportional(u_self: np.ndarray, u_other: np.ndarray) -> np.ndarray:
    """Relative speed when contention slows both alike (demand above 1 is scaled down)."""
    return 1.0 / np.maximum(u_self + u_other, 1.0)


def main() -> None:
    types, a, b, ra, rb = measured_pairs()
    measured = np.concatenate([ra, rb])
    print(f"{len(ra)} measured pairs of {len(types)} job types (V100, one GPU each)")
    print(
        f"sum of the pair's relative speeds: median {np.median(ra + rb):.2f}, "
        f"range {np.min(ra + rb):.2f}-{np.max(ra + rb):.2f}"
    )
    for name, model in (("max-min shares", max_min), ("proportional", proportional)):

        def residuals(u: np.ndarray, model=model) -> np.ndarray:
            return np.concatenate([model(u[a], u[b]), model(u[b], u[a])]) - measured

        fit = least_squares(residuals, np.full(len(types), 0.7), bounds=(0.05, 1.0))
        r = residuals(fit.x)
        r2 = 1 - float((r**2).sum()) / float(((measured - measured.mean()) ** 2).sum())
        print(f"{name:>15}: RMSE {np.sqrt((r**2).mean()):.3f}, R^2 {r2:.2f}")


if __name__ == "__main__":
    main()
