"""The sim/live parity check: one small trace through the simulator and through
the live service (real processes on virtual GPUs), compared decision by
decision. Used by ``test_parity.py``; runnable on its own to print the
comparison for every policy (``python -m tests.e2e.parity [policy ...]``).

The trace: 20 jobs of 1 or 2 GPUs and 1.2-4 s of work on 4 virtual GPUs of
two types (the service's test cluster), arriving over 8 s. Live, each job is
:mod:`parity_job` (it keeps its progress across preemptions, as the
simulator assumes). The simulator replays the jobs at the times the service
recorded their submissions, with every start costing ``LAUNCH`` seconds (the
measured time from a start decision to the job's first step: the launcher
and Python starting) and no locality slowdown (virtual GPUs have none).
Policy options are the defaults, with time scales meant for hours shortened
to seconds, the same in both runs.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from corral.model.jobs import JobTable
from corral.perf.locality import LocalityModel
from corral.perf.speeds import SpeedModel
from corral.policies import make_policy
from corral.runtime.execution.executor import virtual_slots
from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.loop.loop_base import cluster_from_slots
from corral.runtime.storage.store import JobRow
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig

JOB = str(Path(__file__).with_name("parity_job.py"))
GPUS = [GpuGroup(type="V100", count=2), GpuGroup(type="K80", count=2)]
GROW_EFFICIENCY = 0.8
LAUNCH = 0.1
"""Seconds from a start decision to the job's first step, live (launcher,
Python); the simulator charges it on every start."""

RESTART = 0.2
"""Seconds a preempted job loses when it starts again, live (its stop order,
exit, the pass that sees it and its launch)."""

TRACE: list[tuple[float, int, float]] = [  # (submit, GPUs, seconds of work)
    (0.0, 1, 3.1),
    (0.3, 2, 2.3),
    (0.7, 1, 1.4),
    (1.1, 1, 3.7),
    (1.6, 2, 1.8),
    (2.0, 1, 2.6),
    (2.4, 1, 1.2),
    (2.9, 2, 3.3),
    (3.3, 1, 1.9),
    (3.8, 1, 2.8),
    (4.2, 2, 1.5),
    (4.6, 1, 3.9),
    (5.1, 1, 1.3),
    (5.5, 2, 2.1),
    (5.9, 1, 2.4),
    (6.4, 1, 1.7),
    (6.8, 2, 2.9),
    (7.2, 1, 1.6),
    (7.7, 1, 3.4),
    (8.1, 1, 2.0),
]

TIME_SCALE: dict[str, dict[str, Any]] = {
    "las": {"quantum": 1.0},
    "tiresias-las": {"thresholds": "4,12,30"},
    "tiresias-gittins": {"thresholds": "4,12,30", "delta": 4.0},
    "philly": {"relax_after": "2,6", "backoff": 0.01, "backoff_max": 0.01},
    "gandiva": {"quantum": 2.0, "grow_efficiency": GROW_EFFICIENCY},
    "themis": {"lease": 3.0},
    # virtual GPUs: jobs sharing one do not slow each other, so the simulator's
    # pair model is told so (the stated model's 0.95 / 0.3 is for real GPUs)
    "antman": {"slowdown": 0.0, "idle_share": 1.0},
}


def options_for(name: str) -> dict[str, Any]:
    if name.startswith("gavel"):
        return {"round": 2.0, "reset_window": 0.0}
    return dict(TIME_SCALE.get(name, {}))


@dataclass
class Outcome:
    """What a run decided, per job of the trace (in trace order)."""

    submit: list[float]
    first_start: list[float]
    preemptions: list[int]
    finish: list[float]

    @property
    def mean_jct(self) -> float:
        return float(np.mean(np.subtract(self.finish, self.submit)))


def simulate(
    name: str,
    submits: list[float],
    restart: float | None = None,
    launch: float = LAUNCH,
    options: dict[str, Any] | None = None,
) -> Outcome:
    cluster = cluster_from_slots(virtual_slots(GPUS))
    records = [
        {
            "job_id": f"j{k}",
            "submit_time": float(t),
            "num_gpus": gpus,
            "duration": work + launch,
            "total_steps": work + launch,
        }
        for k, ((_, gpus, work), t) in enumerate(zip(TRACE, submits, strict=True))
    ]
    jobs = JobTable.from_records(records, source="parity")
    jobs.df["submit_time"] = submits  # on the service's clock (a table starts at 0)
    config = SimConfig(
        switch_cost=RESTART if restart is None else restart,
        speeds=SpeedModel(locality=LocalityModel(1.0, 1.0, False)),
        check_invariants=True,
    )
    chosen = options_for(name) if options is None else options
    result = Simulator(jobs, cluster, make_policy(name, **chosen), config).run()
    st = result.state
    return Outcome(
        list(submits), st.first_start.tolist(), st.preemptions.tolist(), st.finish_time.tolist()
    )


def run_live(name: str, folder: Path) -> Outcome:
    """The trace through the live loop, submitted at its times (real processes)."""
    from tests.runtime.harness import PY, Harness

    h = Harness(folder, policy=name, policy_options=options_for(name), gpus=GPUS)
    try:
        t0 = time.time()
        ids = []
        for k, (at, gpus, work) in enumerate(TRACE):
            time.sleep(max(t0 + at - time.time(), 0.0))
            spec = {
                "name": f"j{k}",
                "command": [PY, JOB, str(work), str(gpus), str(GROW_EFFICIENCY)],
                "gpus": gpus,
                "duration": work + LAUNCH,
            }
            ids.append(h.submit(**spec)["id"])
        jobs = h.wait_done(ids, timeout=180)
        bad = [j for j in jobs if j["status"] != "SUCCEEDED"]
        assert not bad, bad
        return stored_outcome(h.store, ids)
    finally:
        h.close()


def stored_outcome(store: Any, ids: list[int]) -> Outcome:
    """What the live run decided for jobs ``ids``, from its store, on the
    store's clock (seconds from its epoch)."""
    epoch = store.epoch
    with store.session() as s:
        rows = {r.id: r for r in s.query(JobRow).filter(JobRow.id.in_(ids))}
        return Outcome(
            [rows[j].submit_time - epoch for j in ids],
            [float(rows[j].first_start or np.nan) - epoch for j in ids],
            [rows[j].preemptions for j in ids],
            [float(rows[j].end_time or np.nan) - epoch for j in ids],
        )


def run_virtual(name: str, folder: Path, options: dict[str, Any] | None = None) -> Outcome:
    """The trace through the live loop in virtual time: each job is a virtual
    ``work`` process (its progress kept across stops, faster when granted more
    GPUs, as :mod:`parity_job`), and a pass runs at each arrival, each process
    end and each wake-up the loop asks for, at that instant, with no launch
    or restart cost: the simulator's assumptions, so the two may agree exactly."""
    from corral.runtime.storage.store import Store
    from corral.testing.virtual import VirtualClock, VirtualExecutor, virtual_scheduler
    from tests.runtime.harness import make_config
    from tests.runtime.virtual_loop import queue

    chosen = options_for(name) if options is None else options
    config = make_config(folder, policy=name, policy_options=chosen, gpus=GPUS)
    store = Store(config.store_url)
    clock = VirtualClock(store.epoch + 1.0)  # times near the store's epoch, as live
    executor = VirtualExecutor(config, clock, store)
    scheduler = virtual_scheduler(config, store, clock, executor)
    arrivals = [(clock() + at, gpus, work) for at, gpus, work in TRACE]
    ids: list[int] = []
    try:
        for _ in range(100_000):
            now = clock()
            while len(ids) < len(arrivals) and arrivals[len(ids)][0] <= now + 1e-9:
                _, gpus, work = arrivals[len(ids)]
                command = ["work", str(work), str(gpus), str(GROW_EFFICIENCY)]
                spec = {"name": f"j{len(ids)}", "command": command, "gpus": gpus}
                ids.append(queue(store, "alice", clock, duration=work, **spec))
            for _ in range(10):  # passes at this instant until nothing moves
                before = (dict(scheduler.attempts), dict(scheduler.book.placed), scheduler.dirty)
                scheduler.step()
                after = (dict(scheduler.attempts), dict(scheduler.book.placed), scheduler.dirty)
                if before == after and executor.next_end() != now:
                    break
            with store.session() as s:
                done = s.query(JobRow).filter(JobRow.end_time.is_not(None)).count()
            if len(ids) == len(arrivals) and done == len(ids):
                break
            times = [scheduler.next_wakeup, scheduler.turn_wakeup, executor.next_end()]
            if len(ids) < len(arrivals):
                times.append(arrivals[len(ids)][0])
            later = [t for t in times if t is not None and t > now + 1e-9]
            clock.now = min(later) if later else now + config.tick
        with store.session() as s:
            rows = s.query(JobRow).filter(JobRow.id.in_(ids)).all()
            bad = [(r.id, r.status) for r in rows if r.status != "SUCCEEDED"]
        assert not bad, bad
        return stored_outcome(store, ids)
    finally:
        store.dispose()


TIE = 1.0
"""Seconds within which two first starts count as a tie: real timing (a process
ending 50 ms later than modelled, a pass that sees two exits apart instead of
together) may order them either way."""


@dataclass
class Comparison:
    order_inversions: list[tuple[int, int]]
    """(a, b): both runs separate the two first starts by more than ``TIE``, the
    simulator starting a first and the service b."""
    preempted_sim: set[int]
    preempted_live: set[int]
    preemptions: tuple[int, int]
    """Total preemptions (simulated, live)."""
    mean_jct: tuple[float, float]
    """Average JCT in seconds (simulated, live)."""

    @property
    def jct_error(self) -> float:
        """Live average JCT relative to the simulated one, minus 1."""
        return self.mean_jct[1] / self.mean_jct[0] - 1.0

    @property
    def misplaced(self) -> list[int]:
        """The fewest jobs (found greedily) whose removal leaves the two orders
        agreeing: one job started much earlier or later in one run shows as many
        inverted pairs but is one misplaced job."""
        pairs = list(self.order_inversions)
        out: list[int] = []
        while pairs:
            counts: dict[int, int] = {}
            for a, b in pairs:
                counts[a] = counts.get(a, 0) + 1
                counts[b] = counts.get(b, 0) + 1
            worst = max(sorted(counts), key=lambda k: counts[k])
            out.append(worst)
            pairs = [p for p in pairs if worst not in p]
        return sorted(out)

    @property
    def preempted_differ(self) -> set[int]:
        """Jobs preempted in one run only."""
        return self.preempted_sim ^ self.preempted_live


def compare(sim: Outcome, live: Outcome, tie: float = TIE) -> Comparison:
    """First-start order outside ties, and which jobs were preempted."""
    n = len(sim.first_start)
    inversions = [
        (a, b)
        for a in range(n)
        for b in range(n)
        if sim.first_start[a] + tie < sim.first_start[b]
        and live.first_start[b] + tie < live.first_start[a]
    ]
    return Comparison(
        inversions,
        {k for k, p in enumerate(sim.preemptions) if p},
        {k for k, p in enumerate(live.preemptions) if p},
        (sum(sim.preemptions), sum(live.preemptions)),
        (sim.mean_jct, live.mean_jct),
    )


def run_pair(name: str) -> tuple[Outcome, Outcome]:
    """(simulated, live) outcomes of the trace under ``name``."""
    with tempfile.TemporaryDirectory() as tmp:
        live = run_live(name, Path(tmp) / "state")
    return simulate(name, live.submit), live


def run_all(names: list[str], parallel: int = 3) -> dict[str, tuple[Outcome, Outcome]]:
    """Every policy's pair of runs, ``parallel`` live runs at a time (the jobs
    sleep; more at once would load the loop threads enough to add jitter)."""
    results: dict[str, tuple[Outcome, Outcome]] = {}
    errors: dict[str, BaseException] = {}
    lock = threading.Lock()
    queue = list(names)

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                name = queue.pop(0)
            try:
                pair = run_pair(name)
            except BaseException as exc:  # reported by the caller
                with lock:
                    errors[name] = exc
                continue
            with lock:
                results[name] = pair

    threads = [threading.Thread(target=worker) for _ in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        name, exc = next(iter(errors.items()))
        raise RuntimeError(f"{name}: the live run failed: {exc!r}") from exc
    return results


def main(names: list[str]) -> None:
    from corral.policies import POLICIES

    for name, (sim, live) in run_all(names or list(POLICIES)).items():
        c = compare(sim, live)
        print(
            f"{name:34s} misplaced {c.misplaced} "
            f"preemptions sim {c.preemptions[0]:2d} live {c.preemptions[1]:2d} "
            f"preempted in one run only {sorted(c.preempted_differ)} "
            f"JCT sim {c.mean_jct[0]:.2f} live {c.mean_jct[1]:.2f} ({c.jct_error:+.1%})",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
