"""The live loop under random schedules of inputs and faults, in virtual time.

Each seed gives one schedule (submissions valid and hostile, cancels,
suspends, priority changes, process kills, node failures and returns, a full
disk under the store, ``kill -9`` of the service, clock jumps, records
written behind the loop's back); the real loop, store and policy run it, and
the invariants of :mod:`corral.testing.fault_schedules` are checked after
every step. A failing seed's schedule is shrunk and printed: run it again
with ``--seeds 1 --first SEED`` to replay it exactly.

    python benchmarks/loop_sim.py --seeds 200 --policy tiresias-las
    python benchmarks/loop_sim.py --seeds 10000 --processes 2 --progress 500

Prints passes per second and, last, ``N of N schedules held every invariant``.
With ``--processes`` the seeds are shared among that many processes (each seed's
run is the same wherever it runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from functools import partial

from corral.testing.fault_schedules import Result, make_schedule, play, run_schedule, shrink


def run_one(policy: str, length: int, seed: int) -> tuple[int, Result]:
    return seed, play(policy, make_schedule(seed, length))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--policy", default="tiresias-las")
    parser.add_argument("--length", type=int, default=40, help="operations per schedule")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--processes", type=int, default=1, help="processes sharing the seeds")
    parser.add_argument("--progress", type=int, default=0, help="a line every N seeds (0: none)")
    args = parser.parse_args()

    held, passes, crashes, races, began = 0, 0, 0, 0, time.perf_counter()
    seeds = range(args.first, args.first + args.seeds)
    work = partial(run_one, args.policy, args.length)
    with ProcessPoolExecutor(args.processes) if args.processes > 1 else nullcontext() as pool:
        results = pool.map(work, seeds, chunksize=4) if pool else map(work, seeds)
        for done, (seed, result) in enumerate(results, 1):
            passes, held = report(args, seed, result, passes, held)
            crashes += result.crashes
            races += result.races
            if args.progress and done % args.progress == 0:
                print(f"  {done} seeds in {time.perf_counter() - began:.0f} s, {held} held",
                      flush=True)  # fmt: skip
    seconds = time.perf_counter() - began
    print(
        f"{args.policy}: {passes} passes in {seconds:.1f} s "
        f"({passes / seconds:.0f} passes per second, "
        f"{args.seeds / seconds:.2f} schedules per second with {args.processes} process(es); "
        f"{crashes} kills inside a pass, {races} requests landing inside one)"
    )
    print(f"{held} of {args.seeds} schedules held every invariant")
    return 0 if held == args.seeds else 1


def report(
    args: argparse.Namespace, seed: int, result: Result, passes: int, held: int
) -> tuple[int, int]:
    """Count one seed's run; print a failing one's violation and its shrunk schedule."""
    passes += result.passes
    violation = result.violation
    if violation is None:
        return passes, held + 1
    print(f"seed {seed} ({args.policy}): {violation}", flush=True)
    if not args.no_shrink:
        ops = make_schedule(seed, args.length)
        small = shrink(args.policy, ops)
        print(f"  shrunk to {len(small)} of {len(ops)} operations:")
        for op in small:
            print(f"    {op}")
        print(f"  which breaks: {run_schedule(args.policy, small)}", flush=True)
    return passes, held


if __name__ == "__main__":
    sys.exit(main())
