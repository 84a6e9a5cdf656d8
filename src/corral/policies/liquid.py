"""Liquid: estimated needs, network-efficient placement, bursts packed together.

Liquid (Gu et al., IEEE TPDS 2021) schedules on events (arrivals and
completions, not polling), first come first served, skipping jobs that do not
fit now. Its parts, each here:

* **Placement**: network-cost-aware best fit
  (:class:`~corral.placement.network.NetworkBestFit`): a job goes where the
  communication between its instances costs least and the nodes it fills were
  already the busiest.
* **Batch scheduling**: when jobs arrive in a burst (``batch`` or more waiting
  jobs submitted within ``burst`` seconds, none batched before), they are
  packed together by a grouping genetic algorithm
  (:mod:`corral.placement.genetic`), bounded by ``generations`` and ``budget``
  seconds per batch. Jobs older than the burst are placed first.
* **Estimation**: random forests trained online on finished jobs predict
  each job's run time and its peak GPU memory
  (:mod:`corral.estimate.requirements`; memory as measured: live heartbeats,
  or in simulation the job type's footprint).
* **Pre-scheduling**: a start costs a launch phase of ``launch`` seconds
  (container start, input staging; 0 = none, as the other policies assume).
  When a running job is predicted to end within ``launch`` seconds, the job
  next in line for its GPUs starts staging its data at once, so when the
  GPUs free up only what is left of its launch remains (``prescheduling=false``
  pays the whole launch at every start).
* **Fine-grained sharing**: a one-GPU job predicted to run at most ``small``
  seconds (a dev/test run) may share the GPU of another such running job
  when no GPU is free and, by the two jobs' predicted memory, they fit in the
  GPU's together; at Gavel's measured pair speeds (a pair measured out of
  memory never shares) or, unmeasured, half speed each (time slicing).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from corral.estimate.requirements import MemoryEstimator, RunTimeEstimator
from corral.model.plan import Plan
from corral.model.state import DONE, RUNNING, IndexSet, SchedulerState
from corral.perf.memory import fits_gb
from corral.perf.throughputs import PAIR_GPU, ThroughputTable, gavel_throughputs
from corral.placement.genetic import BatchPacker
from corral.placement.network import NetworkBestFit
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder, Policy
from corral.policies.options import Option


class Liquid(Policy):
    name = "liquid"
    options: ClassVar[dict[str, Option]] = {
        "weight": Option(
            "lambda: weight of network cost against node fitness in placement", low=0, high=1
        ),
        "batch": Option("jobs arriving within a burst that are packed together", "integer", low=1),
        "burst": Option("window of a burst (s)", low=0),
        "generations": Option("generations of the grouping genetic algorithm", "integer", low=0),
        "budget": Option("seconds the genetic algorithm may spend on a burst", low=0),
        "launch": Option("seconds of launch phase (data staging) charged to every start", low=0),
        "prescheduling": Option(
            "stage the next job's data while the GPUs it waits for are about to free up", "flag"
        ),
        "small": Option(
            "jobs on one GPU predicted to run at most this many seconds share a GPU two by two "
            "(0: off)",
            low=0,
        ),
        "seed": Option("seed of the genetic algorithm and the forests", "integer", low=0),
    }
    description = (
        "event-driven first come first served: network-cost-aware best fit, bursts packed "
        "by a grouping genetic algorithm, random-forest run-time estimates for "
        "pre-scheduling and for small jobs sharing GPUs"
    )
    shares_gpus = True
    live_note = (
        "pre-scheduling runs a waiting job's 'stage' command (its inputs' staging) ahead of "
        "its start, as its user and without GPUs; its attempt then finds them staged. "
        "Before the forest is fitted, the owner's recent jobs give a job's estimate, else "
        "its VC's, else its stated duration. Set 'launch' to the jobs' typical staging "
        "time: it is charged to every start"
    )

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        weight: float = 0.5,
        batch: int = 4,
        burst: float = 60.0,
        generations: int = 20,
        budget: float = 0.05,
        launch: float = 0.0,
        prescheduling: Any = True,
        small: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__(placement or NetworkBestFit(weight))
        if batch < 2 or burst < 0 or generations < 0 or budget <= 0:
            raise ValueError("batch must be >= 2, burst and generations >= 0, budget > 0")
        if launch < 0 or small < 0:
            raise ValueError("launch and small must be >= 0 seconds")
        self.batch = int(batch)
        self.burst = float(burst)
        self.packer = BatchPacker(weight, generations=int(generations), budget_s=budget, seed=seed)
        self.launch = float(launch)
        self.prescheduling = str(prescheduling).strip().lower() in ("1", "true", "yes", "on")
        self.small = float(small)
        self.estimator = RunTimeEstimator(seed=seed)
        self.memory = MemoryEstimator(seed=seed)
        self.estimates = self.launch > 0 or self.small > 0
        """Run-time estimates are needed (pre-scheduling or sharing is on)."""
        self.table: ThroughputTable = gavel_throughputs()
        self.counts = {"batches": 0, "prestaged": 0, "shared": 0}
        self._n = -1

    @property
    def batches(self) -> int:
        """Bursts packed by the genetic algorithm (reports)."""
        return self.counts["batches"]

    def _init(self, state: SchedulerState) -> None:
        n = len(state.submit)
        self._n = n
        self._last_batched = -1
        """The last job a batch considered (each job is batched at most once)."""
        self.started = IndexSet(n)
        """Running jobs whose end the estimator will learn from."""
        self.expected_end = np.full(n, np.inf)
        """Predicted end of each running job (first start + predicted run time)."""
        self.staged_at = np.full(n, np.nan)
        """When a waiting job began staging its data (pre-scheduling)."""
        self._all: np.ndarray | None = None
        self._all_fits = -1
        self._all_memory: np.ndarray | None = None
        self._all_memory_fits = -1

    # ------------------------------------------------------------ the pass
    def schedule(self, state: SchedulerState) -> Plan:
        if self._n != len(state.submit):
            self._init(state)
        self._learn(state)
        builder = PlanBuilder(state)
        if not len(state.pending):
            return builder.build()
        order = state.pending_in_order()
        free = builder.free
        if self.launch > 0 and self.prescheduling:
            builder.plan.prestage.extend(self._prestage(state, order))
        fits = order[state.gpus[order] <= free.total]
        # a burst: enough jobs submitted lately that no earlier batch considered
        recent = fits[
            (state.submit[fits] >= state.now - self.burst)
            & (state.type_req[fits] < 0)
            & (fits > self._last_batched)
        ]
        batch = recent[: 4 * self.batch] if len(recent) >= self.batch else recent[:0]
        first = int(batch[0]) if len(batch) else -1
        for i in fits.tolist():
            if i == first:  # jobs older than the burst went first; now the burst, packed
                self._last_batched = int(batch[-1])
                self._pack(builder, state, batch)
            if free.total == 0:
                break
            if i not in builder.plan.starts and int(state.gpus[i]) <= free.total:
                builder.place(i, self.placement)
        self._account_starts(builder, state, list(builder.plan.starts))
        if self.small > 0 and free.total == 0:
            self._account_starts(builder, state, self._share_small(builder, state, order))
        return builder.build(self._wakeup(state, builder))

    def _pack(self, builder: PlanBuilder, state: SchedulerState, jobs: np.ndarray) -> None:
        """Place a burst together as the genetic algorithm packs it."""
        self.counts["batches"] += 1
        plans = self.packer.pack(builder.free, state.gpus[jobs].tolist())
        for i, per_node in zip(jobs.tolist(), plans, strict=True):
            if per_node:
                gpus = [g for node, n in per_node.items() for g in builder.free.in_node(node, n)]
                builder.start(i, gpus)

    # ------------------------------------------------------------ estimation
    def _predicted(self, state: SchedulerState, idx: list[int] | np.ndarray) -> np.ndarray:
        """Predicted run times. A trace's jobs are all predicted at once after
        each refit (their features are known at submission, and the owner
        history in them is as of the refit), so a pass costs no model call."""
        if not state.known_in_advance:  # live: the owner's statement is no oracle
            jobs = [int(i) for i in idx]
            return self.estimator.predict(state, jobs, state.duration[jobs])
        if self._all is None or self._all_fits != self.estimator.fits:
            self._all = self.estimator.predict(state, list(range(len(state.submit))))
            self._all_fits = self.estimator.fits
        return self._all[idx]

    def _predicted_memory(self, state: SchedulerState, idx: list[int]) -> np.ndarray:
        """Predicted peak GPU memory per GPU, GB (NaN: nothing learned yet). Live,
        and in a trace until the forest is first fitted (cheap: owners' means),
        predicted for these jobs; after that, a trace's jobs all at once after
        each refit, as their run times are."""
        if not state.known_in_advance or self.memory.model is None:
            return self.memory.predict(state, idx)
        if self._all_memory is None or self._all_memory_fits != self.memory.fits:
            self._all_memory = self.memory.predict(state, list(range(len(state.submit))))
            self._all_memory_fits = self.memory.fits
        return self._all_memory[idx]

    def view(self, state: SchedulerState, job: int) -> dict[str, str]:
        if job >= self._n or not self.estimates:
            return {}
        from corral.timespan import span

        run_time = float(self._predicted(state, [job])[0])
        memory = float(self._predicted_memory(state, [job])[0])
        out = {"predicted run time": span(run_time)}
        if math.isfinite(memory):
            out["predicted GPU memory"] = f"{memory:.1f} GB per GPU"
        return out

    def _learn(self, state: SchedulerState) -> None:
        """Teach the estimator the run times of the jobs that finished."""
        if not self.estimates:
            return
        started = self.started.array()
        if not len(started):
            return
        for i in started[state.status[started] != RUNNING].tolist():
            self.started.remove(i)
            if state.status[i] == DONE:  # its run time: after the launch phase, to the end
                self.estimator.observe(
                    state, i, float(state.finish_time[i] - state.progress_start[i])
                )
                used = float(state.measured_memory(np.array([i]))[0])
                if math.isfinite(used):
                    self.memory.observe(state, i, used)

    def _account_starts(
        self, builder: PlanBuilder, state: SchedulerState, starts: list[int]
    ) -> None:
        """Predict the end of each job of ``starts`` (started by this plan);
        charge its launch phase."""
        if not starts or not self.estimates:
            return
        for i in starts:
            if i not in self.started:
                self.started.add(i)
        predicted = self._predicted(state, starts)
        for i, run_time in zip(starts, predicted.tolist(), strict=True):
            left = 0.0
            if self.launch > 0:
                left = self.launch
                staged = self.staged_at[i]
                if self.prescheduling and math.isfinite(staged):
                    left = max(0.0, self.launch - (state.now - staged))
                builder.plan.overheads[i] = left
            self.expected_end[i] = state.now + left + run_time

    # ------------------------------------------------------------ pre-scheduling
    def _prestage(self, state: SchedulerState, order: np.ndarray) -> list[int]:
        """The jobs next in line for GPUs that free up within a launch phase
        start staging their data now; returns those that start now."""
        running = state.running.array()
        if not len(running):
            return []
        soon = running[self.expected_end[running] <= state.now + self.launch]
        freeing = int(state.free.total + state.gpus[soon].sum())
        if freeing == 0:
            return []
        room, staged = freeing, []
        for i in order.tolist():
            g = int(state.gpus[i])
            if g > room:
                continue
            room -= g
            if not math.isfinite(self.staged_at[i]):
                self.staged_at[i] = state.now
                self.counts["prestaged"] += 1
                staged.append(i)
            if room == 0:
                break
        return staged

    def _wakeup(self, state: SchedulerState, builder: PlanBuilder) -> float | None:
        """Wake when a running job is due to end within a launch phase, to stage
        its successor's data in time."""
        if self.launch <= 0 or not self.prescheduling:
            return None
        running = state.running.array()
        starting = np.fromiter(builder.plan.starts, dtype=np.int64)
        jobs = np.concatenate((running, starting))  # those this plan starts run too
        if not len(jobs):
            return None
        due = self.expected_end[jobs] - self.launch
        due = due[due > state.now]
        return float(due.min()) if len(due) else None

    # ------------------------------------------------------------ sharing
    def _share_small(
        self, builder: PlanBuilder, state: SchedulerState, order: np.ndarray
    ) -> list[int]:
        """Dev/test jobs (one GPU, predicted short) share a GPU two by two;
        returns the jobs started so."""
        plan = builder.plan
        waiting = order[state.gpus[order] == 1]
        if plan.starts:
            waiting = waiting[~np.isin(waiting, list(plan.starts))]
        if not len(waiting):
            return []
        guests = waiting[self._predicted(state, waiting) <= self.small].tolist()
        if not guests:
            return []
        running = state.running.array()
        alone = running[
            (state.gpus[running] == 1) & (state.host[running] < 0) & (state.guest[running] < 0)
        ]
        starting = [i for i in plan.starts if state.gpus[i] == 1 and i not in plan.packs]
        candidates = np.concatenate((alone, np.asarray(starting, dtype=np.int64)))
        short = self.expected_end[candidates] - state.now <= self.small + self.launch
        stopped = set(plan.stops)
        hosts = [h for h in candidates[short].tolist() if h not in stopped]
        if not hosts:
            return []
        memory = dict(
            zip(guests + hosts, self._predicted_memory(state, guests + hosts).tolist(), strict=True)
        )
        shared: list[int] = []
        # two by two in order, as Liquid pairs them (a pair that may not share
        # leaves both to run alone when GPUs free up)
        for guest, host in zip(guests, hosts, strict=False):
            factors = self._pair(state, host, guest, memory, plan.starts)
            if factors is None:
                continue
            builder.pack(guest, host, factors[1], factors[0])
            shared.append(guest)
            self.counts["shared"] += 1
        return shared

    def _pair(
        self,
        state: SchedulerState,
        host: int,
        guest: int,
        memory: dict[int, float],
        on: dict[int, tuple[int, ...]],
    ) -> tuple[float, float] | None:
        """(host, guest) speeds on one GPU, each relative to alone; None when they
        may not share: Gavel measured them out of memory together, or, unmeasured,
        their predicted memory does not fit the GPU's."""
        rel = self.table.relative_pair(
            (state.job_type[host], 1), (state.job_type[guest], 1), PAIR_GPU
        )
        if rel is not None:
            return None if min(rel) <= 0 else rel
        gpus = on.get(host) or state.alloc[host]
        if gpus and not fits_gb([memory[host], memory[guest]], state.cluster.type_name(gpus[0])):
            return None
        return (0.5, 0.5)
