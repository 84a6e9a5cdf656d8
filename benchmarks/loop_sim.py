"""The live loop under random schedules of inputs and faults, in virtual time.

Each seed gives one schedule (submissions valid and hostile, cancels,
suspends, priority changes, process kills, node failures and returns, a full
disk under the store, ``kill -9`` of the service, clock jumps, records
written behind the loop's back); the real loop, store and policy run it, and
the invariants of :mod:`corral.testing.fault_schedules` are checked after
every step. A failing seed's schedule is shrunk and printed: run it again
with ``--seeds 1 --first SEED`` to replay it exactly.

    python benchmarks/loop_sim.py --seeds 200 --policy tiresias-las

Prints passes per second and, last, ``N of N schedules held every invariant``.
"""

from __future__ import annotations

import argparse
import sys
import time

from corral.testing.fault_schedules import make_schedule, play, run_schedule, shrink


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--policy", default="tiresias-las")
    parser.add_argument("--length", type=int, default=40, help="operations per schedule")
    parser.add_argument("--no-shrink", action="store_true")
    args = parser.parse_args()

    held, passes, crashes, races, began = 0, 0, 0, 0, time.perf_counter()
    for seed in range(args.first, args.first + args.seeds):
        ops = make_schedule(seed, args.length)
        result = play(args.policy, ops)
        passes += result.passes
        crashes += result.crashes
        races += result.races
        violation = result.violation
        if violation is None:
            held += 1
            continue
        print(f"seed {seed} ({args.policy}): {violation}", flush=True)
        if not args.no_shrink:
            small = shrink(args.policy, ops)
            print(f"  shrunk to {len(small)} of {len(ops)} operations:")
            for op in small:
                print(f"    {op}")
            print(f"  which breaks: {run_schedule(args.policy, small)}", flush=True)
    seconds = time.perf_counter() - began
    print(
        f"{args.policy}: {passes} passes in {seconds:.1f} s "
        f"({passes / seconds:.0f} passes per second, "
        f"{args.seeds / seconds:.2f} schedules per second; {crashes} kills inside a pass, "
        f"{races} requests landing inside one)"
    )
    print(f"{held} of {args.seeds} schedules held every invariant")
    return 0 if held == args.seeds else 1


if __name__ == "__main__":
    sys.exit(main())
