"""The live service at cluster scale, in virtual time: the real loop, store and API
routes on the virtual executor (:mod:`corral.testing.virtual`), with ``--nodes``
nodes of 8 V100s and Helios-like arrivals.

The workload: ``--jobs`` jobs a virtual day (100,000 by default: Helios' busiest
clusters ran 1,700-2,700 an hour), arriving as a Poisson process whose rate
follows the day (twice as many at 14:00 as at 04:00), over ``--hours`` virtual
hours. Sizes as Helios' (mostly 1 GPU; 2, 4 and 8 GPUs; gangs of 16 and 32 over
nodes), run times log-normal (median 10 minutes, a few for a day); one
submission in twenty is an array of 10-50 tasks. Fifty users. Each job runs
``sleep`` on the virtual executor: what a job does costs the loop nothing
beyond what a real one's process would.

The loop runs as ``corral serve`` runs it: a pass at each tick (``tick``: 0.5 s),
at each process's end and each wake-up the policy asks for. Every ``--sample``
virtual seconds, while it runs, one user's listing of their jobs (``GET
/v1/jobs?mine``) and one submission (``POST /v1/jobs``) go through the API's own
route code, timed. Printed per policy: the passes' wall time (p50, p99, max), the
listing's and the submission's (p50, p99), the process's resident memory and the
store's size as the day goes, and the goals (pass p99 <= 1 s, listing <= 0.3 s,
memory <= 2 GB).

    python benchmarks/loop_scale.py --policy fifo,tiresias-las --hours 2
    python benchmarks/loop_scale.py --store postgresql+psycopg://user@host/db
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import create_engine, text

from corral.api import jobs as routes
from corral.api.common import Context
from corral.runtime.jobspec.config import GpuGroup, ServiceConfig, UserConfig
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.loop.scheduler import Scheduler
from corral.runtime.storage.store import Store
from corral.testing.virtual import VirtualClock, VirtualExecutor

USERS = 50
SIZES = ([1, 2, 4, 8, 16, 32], [0.62, 0.1, 0.1, 0.12, 0.04, 0.02])
Submission = tuple[float, str, dict[str, Any]]
"""(virtual second, user, spec)."""


def workload(jobs_a_day: int, hours: float, seed: int) -> list[Submission]:
    """(virtual second, user, spec) of each submission, in time order."""
    rng = np.random.default_rng(seed)
    out = []
    t, end = 0.0, hours * 3600
    mean_rate = jobs_a_day / 86400 / 1.6  # (arrays bring 0.6 more tasks a submission)
    while True:
        hour = (t / 3600) % 24
        rate = mean_rate * (1 + 0.33 * math.sin((hour - 8) / 24 * 2 * math.pi))
        t += rng.exponential(1 / rate)
        if t >= end:
            return out
        gpus = int(rng.choice(SIZES[0], p=SIZES[1]))
        run = float(min(rng.lognormal(math.log(600), 1.6), 86400))
        spec: dict[str, Any] = {"command": ["sleep", f"{run:.0f}"], "gpus": gpus}
        if rng.random() < 0.05:
            spec["array"] = f"0-{int(rng.integers(10, 50))}"
        out.append((t, f"user{int(rng.integers(USERS)):02d}", spec))


def config(state: Path, policy: str, nodes: int, store: str | None) -> ServiceConfig:
    return ServiceConfig(
        state_dir=state,
        store=store,
        policy=policy,
        gpus=[GpuGroup(type="V100", count=8, node=f"node{k:04d}") for k in range(nodes)],
        users=[
            UserConfig(name=f"user{k:02d}", token=f"user{k:02d}-token-0123456789")
            for k in range(USERS)
        ],
        max_jobs_per_user=100_000,
        max_array_size=1000,
    )


class _Front:
    """The loop as the routes see it; a route never waits for a pass here."""

    def __init__(self, loop: Scheduler) -> None:
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)

    def notify(self) -> None:
        return None


def rss_gb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def store_mb(conf: ServiceConfig) -> float:
    url = conf.store_url
    if url.startswith("sqlite:///"):
        db = Path(url.removeprefix("sqlite:///"))
        return sum(p.stat().st_size for p in db.parent.glob(db.name + "*")) / 2**20
    engine = create_engine(url)
    with engine.connect() as conn:
        size = conn.execute(text("select pg_database_size(current_database())")).scalar()
    engine.dispose()
    return float(size or 0) / 2**20


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run(
    policy: str, args: argparse.Namespace, subs: list[tuple[float, str, dict[str, Any]]]
) -> None:
    with tempfile.TemporaryDirectory(prefix="corral-scale-") as scratch:
        conf = config(Path(scratch), policy, args.nodes, args.store)
        store = Store(conf.store_url)
        clock = VirtualClock(1_800_000_000.0)
        store.clock = clock
        executor = VirtualExecutor(conf, clock, store)
        loop = Scheduler(conf, store, executor, clock=clock)
        loop.recover()
        ctx = Context(conf, store, _Front(loop))  # type: ignore[arg-type]
        users = {u.name: u for u in conf.users}
        start, end = clock(), clock() + args.hours * 3600
        passes: list[float] = []
        listings: list[float] = []
        submissions: list[float] = []
        samples: list[tuple[float, int, float, float]] = []
        k, next_sample, began = 0, start, time.perf_counter()
        while clock() < end:
            while k < len(subs) and start + subs[k][0] <= clock():
                _, who, raw = subs[k]
                routes.submit(ctx, JobSpec(**raw), users[who])
                k += 1
            t0 = time.perf_counter()
            loop.step()
            passes.append(time.perf_counter() - t0)
            if clock() >= next_sample:
                next_sample += args.sample
                who = users[subs[min(k, len(subs) - 1)][1]]
                t0 = time.perf_counter()
                routes.queue(ctx, who, mine=True)
                listings.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                routes.submit(ctx, JobSpec(command=["sleep", "60"], gpus=1), who)
                submissions.append(time.perf_counter() - t0)
                running = len(loop.attempts)
                samples.append((clock() - start, running, rss_gb(), store_mb(conf)))
            soonest = clock() + max(loop.sleep_for(), 0.01)
            ends = executor.next_end()
            if ends is not None:
                soonest = min(soonest, max(ends, clock() + 0.01))
            if k < len(subs):
                soonest = min(soonest, max(start + subs[k][0], clock() + 0.01))
            clock.now = min(soonest, end)
        took = time.perf_counter() - began
        store.dispose()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\n{policy}: {k:,} submissions ({args.hours:g} virtual h) on {args.nodes * 8:,} GPUs, "
          f"{len(passes):,} passes in {took:.0f} s of wall time")  # fmt: skip
    print(f"  pass        p50 {pct(passes, 50) * 1e3:7.1f} ms   p99 {pct(passes, 99) * 1e3:7.1f} ms"
          f"   max {max(passes) * 1e3:7.1f} ms   (goal p99 <= 1 s)")  # fmt: skip
    print(f"  listing     p50 {pct(listings, 50) * 1e3:7.1f} ms   p99 "
          f"{pct(listings, 99) * 1e3:7.1f} ms   (a user's jobs; goal <= 0.3 s)")  # fmt: skip
    print(f"  submission  p50 {pct(submissions, 50) * 1e3:7.1f} ms   p99 "
          f"{pct(submissions, 99) * 1e3:7.1f} ms")  # fmt: skip
    print(f"  memory      peak {peak:.2f} GB (goal <= 2 GB)")
    print("  virtual h   running   memory GB   store MB")
    step = max(1, len(samples) // 8)
    for at, running, mem, size in samples[::step] + samples[-1:]:
        print(f"  {at / 3600:9.1f} {running:9,} {mem:11.2f} {size:10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="fifo,tiresias-las,gavel-max-min-fairness,pollux")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs a virtual day")
    parser.add_argument("--hours", type=float, default=24.0, help="virtual hours run")
    parser.add_argument("--sample", type=float, default=600.0, help="virtual s between samples")
    parser.add_argument("--store", help="a SQLAlchemy URL (default: SQLite in a scratch folder)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    subs = workload(args.jobs, args.hours, args.seed)
    for policy in args.policy.split(","):
        run(policy, args, subs)


if __name__ == "__main__":
    main()
