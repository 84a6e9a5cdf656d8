"""Pollux (Qiao et al., OSDI 2021): co-adapt each job's GPUs and batch size to
maximise goodput, cluster-wide a fair mean of the jobs' speed-ups.

Every ``interval`` (60 s, as in the paper):

1. each job's **speed-up** on w GPUs is its best goodput there (the batch
   size that maximises throughput x statistical efficiency, ``perf.goodput``,
   at its gradient noise scale now) over its best goodput on one GPU;
2. the GPUs are divided to maximise the **generalised mean** of the speed-ups
   with exponent ``p`` (-1 by default, the paper's: a harmonic mean that
   keeps any job from being starved for the others' sake). Pollux searches
   allocations with a genetic algorithm; corral finds the best division of
   GPU counts exactly, by dynamic programming over jobs
   (``resizing.exact_division``), counting each size on its fewest nodes.
   ``search=greedy`` hands GPUs out one at a time to the job whose
   term gains most instead (Optimus' rule), exact only when every term is
   convex in its GPUs, which measured speed-ups are not: on Pollux's
   workload-6 the greedy's objective was worse in about a third of the
   divisions (``docs/validation/pollux.md``);
3. a running job's speed-up at any size but its own is scaled by Pollux's
   **re-allocation penalty** ``max(T - R d, 0) / (T + d)``, T the job's age,
   R how many times it has been re-allocated and d ``restart_delay`` (30 s,
   the paper's artifact's): a young job, or one re-allocated often for its
   age, moves only for a large gain, so jobs do not flap between two sizes;
4. jobs resize (a restart) unless their speed-up would change by less than
   ``min_change`` (0 by default: the penalty is Pollux's hysteresis); jobs
   that keep their GPUs re-pick their batch size, which changes their speed
   without a restart, as Pollux's agents do;
5. a job is placed where its goodput is best among the layouts the free GPUs
   allow, from its size down (Pollux's search scores the nodes a job spans
   too): where they are scattered, three GPUs of one node can be worth more
   than four of four nodes. Its batch is picked for the layout it got: a
   gang split across nodes synchronises over the network, and accumulating
   gradients into a larger batch pays there (``docs/validation/pollux.md``
   measures what picking it as if the gang were packed costs).

When there are more jobs than GPUs a p-mean with p < 0 is zero for every
allocation; the oldest jobs then get one GPU each and the rest wait (Pollux
keeps its queue first come first served too).

Where goodput comes from: a job of a model the communication model knows,
with its batch size (Pollux's workloads; live jobs that state ``model`` and
``batch_size``), gets Pollux's model: throughput from step times and
statistical efficiency from its gradient noise scale.

Step times are **learnt per job as it runs** (``throughput=fitted``, the
paper's way): at every pass each running job's step time at its present
configuration (nodes, GPUs, local batch) is recorded, in the simulator the
communication model's (the truth the engine runs it at), live the one its
heartbeats' throughput implies, and the job's own model is refitted to what
it has measured (``estimate.step_time``: optimistic where nothing is
measured, so an untried scale looks good until tried). A job that has not
run yet is assumed to scale perfectly, and no job gets more than twice the
GPUs it has been measured on, so a job grows 1, 2, 4 ... as its model
learns. ``throughput=known`` gives every job the communication model's step
times up front instead (an oracle; corral's behaviour before the fitting).
What the engine runs a job at is always the truth: only the policy's choices
come from what it has learnt.

The noise scale is, in the simulator
the one its bundled training curve records at its progress, live the one its
heartbeats report (``corral.train.GradientNoise``; until one is reported the
batch stays as given). The batch size chosen goes with the plan
(``batch_sizes``): live, at launch and in heartbeat answers. Any other job
(a trace known only by durations) has no batch size to tune: its speed-up is
the performance model's speed at w GPUs over one, linear for jobs nothing is
known about.

In the simulator a job's work is the steps its curve took at the batch it
was submitted with (B); at batch M it does ``throughput x (phi + B) /
(phi + M) / B`` of them per second, so a larger batch helps only as far as
its efficiency allows (and a smaller one, with ``initial_batch=model``, is
worth more per example).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from corral.errors import CorralError
from corral.estimate.step_time import StepTimeModel, StepTimeProfile, exploration_cap
from corral.model.cluster import Links
from corral.model.free_gpus import FreeGPUs
from corral.model.state import SchedulerState
from corral.perf.communication import Span, model_profile
from corral.perf.goodput import GoodputModel, efficiency, goodput_model, noise_at
from corral.perf.pollux_models import (
    largest_local_batch,
    micro_batches,
    pollux_model,
    trained_batches,
)
from corral.perf.speeds import SpeedModel
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder
from corral.policies.options import Option
from corral.policies.resizing import ResizingPolicy

AGENT_PERIOD = 60.0
"""Seconds between re-tunes of a running job's batch size (and so of its
speed) between re-allocations. Pollux's agents re-tune as the job trains,
whatever the scheduler's interval; a job's efficiency moves with its noise
scale, so a speed frozen until the next re-allocation would be stale."""

RESTART_DELAY = 30.0
"""Seconds a re-allocation is taken to cost in the penalty (Pollux's artifact's)."""
PENALTY_FLOOR = 1e-3
"""Least speed-up a penalised size is given (Pollux's objective adds 1e-3)."""


@lru_cache(maxsize=65536)
def _best(
    model: str,
    initial: int,
    node_size: int,
    links: Links,
    noise: float,
    gpus: int,
    fitted: StepTimeModel | None = None,
    span: Span | None = None,
) -> tuple[float, float]:
    """(batch, goodput) of a job at a gradient noise scale (NaN: unknown, the
    batch stays), by the communication model's step times or the job's own
    ``fitted`` ones, on ``gpus`` GPUs laid out as ``span`` (None: the fewest
    nodes): shared by every job of the same model, initial batch and fit
    (passes ask it thousands of times)."""
    profile = model_profile(model)
    assert profile is not None
    gm = goodput_model(profile, links, node_size, initial, fitted)
    if noise != noise:
        return float(initial), gm.throughput(gpus, float(initial), span)
    return gm.best(gpus, noise, span)


def _rounded(value: float) -> float:
    """Two significant digits: reported noise scales are estimates, and the
    cache above is keyed by them."""
    if math.isnan(value) or value <= 0:
        return value
    return float(f"{value:.2g}")


class Pollux(ResizingPolicy):
    name = "pollux"
    retune_period = AGENT_PERIOD
    options: ClassVar[dict[str, Option]] = {
        "interval": Option("seconds between re-allocations", above=0),
        "min_change": Option(
            "a job resizes only if its speed-up changes by more than this share", low=0
        ),
        "max_gpus": Option("most GPUs a job may get (0: no cap)", "integer", low=0),
        "p": Option("exponent of the generalised mean of speed-ups (-1: harmonic, 1: arithmetic)"),
        "adapt_batch": Option("jobs re-pick their batch size at each re-allocation", "flag"),
        "search": Option(
            "how GPUs are divided: greedy (one at a time to the largest gain) or exact "
            "(dynamic programming over jobs)",
            "choice",
            choices=("greedy", "exact"),
        ),
        "initial_batch": Option(
            "the batch a job starts from and scales up from: its own (job) or its model's "
            "smallest trained batch (model: how Pollux's artifact submits its workloads)",
            "choice",
            choices=("job", "model"),
        ),
        "throughput": Option(
            "step times learnt per job from its measurements (fitted, the paper's) or known "
            "up front (known: an oracle)",
            "choice",
            choices=("fitted", "known"),
        ),
        "speedup_base": Option(
            "what a speed-up is measured against: a fair share of the cluster (fair, the "
            "paper's: its GPUs over the jobs) or one GPU (one)",
            "choice",
            choices=("fair", "one"),
        ),
        "avoid_interference": Option(
            "at most one gang spanning nodes per node (Pollux's interference avoidance)",
            "flag",
        ),
        "restart_delay": Option(
            "seconds a re-allocation is taken to cost in Pollux's re-allocation penalty "
            "(0: no penalty)",
            low=0,
        ),
    }
    description = (
        "Pollux: each job's goodput (throughput x statistical efficiency) at its best batch "
        "size; GPUs divided to maximise the generalised mean of speed-ups; jobs resize"
    )
    live_note = (
        "jobs that state their model and batch_size have their step times learnt from their "
        "heartbeats' throughput and their batch tuned once they report a gradient noise scale "
        "(sent in heartbeat answers); other jobs' speed-ups come from the performance model "
        "(linear when it knows nothing); a resize restarts from a checkpoint"
    )

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        interval: float = 60.0,
        min_change: float = 0.0,
        max_gpus: int = 0,
        p: float = -1.0,
        adapt_batch: bool = True,
        throughput: str = "fitted",
        search: str = "exact",
        initial_batch: str = "job",
        restart_delay: float = RESTART_DELAY,
        speedup_base: str = "fair",
        avoid_interference: bool = True,
        **params: Any,
    ) -> None:
        super().__init__(placement, interval, min_change, max_gpus, **params)
        self.adapt_batch = bool(adapt_batch)
        """False: every job keeps its initial batch size (an ablation)."""
        if throughput not in ("fitted", "known"):
            raise CorralError(f"pollux: throughput must be fitted or known, got {throughput!r}")
        self.learns = throughput == "fitted"
        """True: each job's step times are learnt from its own measurements."""
        if search not in ("greedy", "exact"):
            raise CorralError(f"pollux: search must be greedy or exact, got {search!r}")
        self.search = search
        if initial_batch not in ("job", "model"):
            raise CorralError(f"pollux: initial_batch must be job or model, got {initial_batch!r}")
        self.from_model = initial_batch == "model"
        """True: a job starts from its model's smallest trained batch, whatever
        batch it was submitted with (Pollux's artifact's set-up)."""
        if not (math.isfinite(float(restart_delay)) and float(restart_delay) >= 0):
            raise CorralError(f"pollux: restart_delay must be >= 0 seconds, got {restart_delay}")
        self.restart_delay = float(restart_delay)
        if speedup_base not in ("fair", "one"):
            raise CorralError(f"pollux: speedup_base must be fair or one, got {speedup_base!r}")
        self.fair_base = speedup_base == "fair"
        """True: speed-ups are over a fair share's goodput (the paper's)."""
        self.avoid_interference = bool(avoid_interference)
        """True: a gang that spans nodes never shares a node with another such
        gang (Pollux's rule: two jobs synchronising over one node's network
        link slow each other down)."""
        self.profiles: dict[int, StepTimeProfile] = {}
        """Goodput job -> the step times it has measured and its model of them."""
        if p == 0 or not -10 <= p <= 1:
            raise CorralError(f"pollux: p must be in [-10, 1] and not 0, got {p}")
        self.p = float(p)
        self._noise: dict[int, float] = {}
        """Goodput job -> its gradient noise scale now (NaN: unknown)."""
        self._base: dict[int, float] = {}
        """Job -> its best goodput (or speed) on one GPU."""
        self._speeds: SpeedModel | None = None
        self._state: SchedulerState | None = None
        self._started: dict[int, float] = {}
        """Running job -> the speed factor it started at (a re-tune's ``respeeds``
        are relative to it, as the engine's are to the speed a job started at)."""
        self._linear_costs: dict[tuple[int, float, int], np.ndarray] = {}
        """Cost rows of jobs that scale linearly, by (sizes, first size, fair
        share): shared."""
        self._fair = 1
        """GPUs of a fair share in this pass (see :meth:`_fair_share`)."""
        self.batches: dict[int, float] = {}
        """Job -> the batch size it runs at now."""
        self.counts["retunes"] = 0
        if self.learns:
            self.counts["fits"] = 0

    # ---- goodput -------------------------------------------------------------

    def _goodput_job(self, state: SchedulerState, j: int) -> str | None:
        """The Pollux model of job ``j`` when its goodput can be modelled: its
        model is known to the communication model and its batch size is given."""
        model = pollux_model(state.model[j]) if state.model[j] else None
        if model is None or state.batch_size[j] <= 0 or model_profile(model) is None:
            return None
        return model

    def _initial(self, state: SchedulerState, j: int, model: str) -> int:
        """The batch job ``j`` starts from and scales up from (M0). Its work is
        counted in steps at the batch it was submitted with; progress at any
        other batch is converted by statistical efficiency."""
        own = int(state.batch_size[j])
        return min(own, trained_batches(model)[0]) if self.from_model else own

    def _noise_now(self, state: SchedulerState, j: int, model: str, done: float) -> float:
        """The job's noise scale: in the simulator its bundled curve's at its
        progress, live what its heartbeats report (NaN: nothing known, or batch
        tuning off)."""
        if not self.adapt_batch:
            return float("nan")
        if not state.known_in_advance:
            return _rounded(float(state.noise_scale[j]))
        try:
            return noise_at(model, int(state.batch_size[j]), done)
        except CorralError:  # no curve at this batch size
            return float("nan")

    def _rate(self, j: int, gpus: int, span: Span | None = None) -> tuple[float, float]:
        """(batch, goodput or speed) of job ``j`` on ``gpus`` GPUs now, laid out
        as ``span`` (None: the fewest nodes, as divisions assume)."""
        state, speeds = self._state, self._speeds
        assert state is not None and speeds is not None
        model = self._goodput_job(state, j)
        if model is None:
            return float(state.batch_size[j]), self.model_speed(state, j, gpus, speeds)
        initial = self._initial(state, j, model)
        fitted = None
        if self.learns:
            fitted = self.profiles[j].model if j in self.profiles else None
            if fitted is None:  # never measured: perfect scaling at its initial batch
                return float(initial), float(gpus)
        node = int(state.cluster.node_gpus.max())
        if span is not None and span.racks == 1 and span == Span.packed(gpus, node):
            span = None  # (the divisions' layout: one cache entry)
        batch, goodput = _best(
            model,
            initial,
            node,
            state.cluster.links,
            self._noise[j],
            gpus,
            fitted,
            span,
        )
        return float(batch), float(goodput)

    # ---- learning step times -------------------------------------------------

    def _measure(self, state: SchedulerState, j: int, model: str) -> None:
        """Record running job ``j``'s step time at its configuration now and
        refit its model when the configuration is new. The simulator's step
        time is the communication model's at the job's actual placement;
        live it is what the job's heartbeats report."""
        gpus = state.alloc[j]
        if not gpus:
            return
        held = len(gpus)
        span = Span.of(state.cluster, gpus)
        local = self.batches.get(j, float(self._initial(state, j, model))) / held
        if state.known_in_advance:
            # a local batch beyond one GPU's runs as micro-batches: what is measured
            # (and what the fitted model predicts) is one synchronised micro-step
            _, local = micro_batches(local, largest_local_batch(model))
            profile = model_profile(model)
            assert profile is not None
            step = profile.step_time(span, state.cluster.links, local_batch=local)
            compute = profile.compute_time(local)
        else:
            step, compute = float(state.step_time[j]), float("nan")
        job_profile = self.profiles.setdefault(j, StepTimeProfile())
        if job_profile.record(span.nodes, held, local, step, compute):
            job_profile.refit()
            self.counts["fits"] += 1

    def _cap(self, j: int) -> int:
        """Most GPUs job ``j`` may be given while its scaling is being learnt."""
        profile = self.profiles.get(j)
        return exploration_cap(profile.max_gpus if profile is not None else 0)

    # ---- the resizing pass's hooks --------------------------------------------

    def prepare(self, state: SchedulerState, jobs: list[int], speeds: SpeedModel) -> None:
        self._state, self._speeds = state, speeds
        self._fair = self._fair_share(state)
        done = state.done_steps(np.asarray(jobs, dtype=np.int64)).tolist()
        for j, d in zip(jobs, done, strict=True):
            model = self._goodput_job(state, j)
            if model is not None:
                self._noise[j] = self._noise_now(state, j, model, d)
            elif speeds.scales_linearly(state.job_type[j], state.model[j]):
                continue  # its costs are the shared linear row: no base needed
            self._base[j] = self._rate(j, self._fair)[1]

    def _fair_share(self, state: SchedulerState) -> int:
        """GPUs of a fair share, the allocation speed-ups are measured against:
        the cluster's GPUs over the jobs running or waiting (rounded up, as
        Pollux does), or one GPU with ``speedup_base=one``."""
        if not self.fair_base:
            return 1
        active = len(state.running) + len(state.pending_order)
        return max(1, math.ceil(state.cluster.total_gpus / max(active, 1)))

    def observe(self, state: SchedulerState, jobs: list[int]) -> None:
        """Learning: each running goodput job's step time at its configuration now."""
        if not self.learns:
            return
        for j in jobs:
            model = self._goodput_job(state, j)
            if model is not None and j in state.running:
                self._measure(state, j, model)

    def inputs_key(self, state: SchedulerState, jobs: list[int]) -> object | None:
        """Speed-ups change only with the jobs' noise scales, their learnt step
        times, their re-allocation penalties (to two places: they creep towards
        1 as jobs age) and the GPUs each holds (a resize may not have placed a
        job at its size)."""
        index = np.asarray(jobs, dtype=np.int64)
        done = state.done_steps(index).tolist()
        held = state.held[index].tolist()
        factors = self._realloc_factors(state, index).tolist()
        key = []
        for j, d, h, factor in zip(jobs, done, held, factors, strict=True):
            model = self._goodput_job(state, j)
            noise = self._noise_now(state, j, model, d) if model is not None else None
            fits = self.profiles[j].fits if j in self.profiles else 0
            key.append((j, int(h), noise, fits, round(factor, 2)))
        return tuple(key)

    def _realloc_factors(self, state: SchedulerState, jobs: np.ndarray) -> np.ndarray:
        """:meth:`_realloc_factor` of many jobs at once, the same floats (the key is
        made at every pass: one job at a time it took half of a simulation's time)."""
        if self.restart_delay <= 0:
            return np.ones(len(jobs))
        age = np.maximum(float(state.now) - state.submit[jobs].astype(np.float64), 0.0)
        moved = state.preemptions[jobs].astype(np.int64)
        factor = np.maximum(age - moved * self.restart_delay, 0.0) / (age + self.restart_delay)
        return np.where(state.held[jobs] > 0, factor, 1.0)

    def cost(self, j: int, gpus: int) -> float:
        return float(self.costs(j, np.array([gpus]))[0])

    def costs(self, j: int, sizes: np.ndarray) -> np.ndarray:
        state, speeds = self._state, self._speeds
        assert state is not None and speeds is not None
        if self._goodput_job(state, j) is not None:
            # no further than the job's scaling has been tried
            tried = np.minimum(sizes, self._cap(j)) if self.learns else sizes
            s = np.array([self._rate(j, int(w))[1] for w in tried]) / self._base[j]
        elif speeds.scales_linearly(state.job_type[j], state.model[j]):
            if self._realloc_factor(state, j) != 1.0:
                s = sizes / self._fair
            else:  # speed-up w / fair on w GPUs: one row for all
                key = (len(sizes), float(sizes[0]), self._fair)
                if key not in self._linear_costs:
                    row = sizes / self._fair
                    self._linear_costs[key] = row**self.p if self.p < 0 else -(row**self.p)
                return self._linear_costs[key]
        else:
            s = self.model_speeds(state, j, sizes, speeds) / self._base[j]
        s = self._penalised(state, j, sizes, s)
        return s**self.p if self.p < 0 else -(s**self.p)

    def _realloc_factor(self, state: SchedulerState, j: int) -> float:
        """Pollux's re-allocation penalty for running job ``j``: ``(T - R d) /
        (T + d)`` (at least 0), T its age, R its re-allocations so far (the
        state's preemption count: every stop of a running job, kept across a
        service restart). 1 for a job not running (it is not being moved) or
        with the penalty off."""
        if self.restart_delay <= 0 or state.held[j] <= 0:
            return 1.0
        age = max(float(state.now - state.submit[j]), 0.0)
        moved = int(state.preemptions[j])
        return max(age - moved * self.restart_delay, 0.0) / (age + self.restart_delay)

    def _penalised(
        self, state: SchedulerState, j: int, sizes: np.ndarray, speedups: np.ndarray
    ) -> np.ndarray:
        """Speed-ups at every size but the one job ``j`` holds, scaled by its
        re-allocation penalty (floored, as Pollux's objective adds 1e-3, so that
        a job that may not move costs a finite amount anywhere else)."""
        factor = self._realloc_factor(state, j)
        if factor == 1.0:
            return speedups
        moved = np.maximum(speedups * factor, PENALTY_FLOOR)
        return np.where(sizes == int(state.held[j]), speedups, moved)

    def admission_key(self, state: SchedulerState, j: int) -> tuple[float, ...]:
        return (float(state.submit[j]),)

    def start_factor(
        self, state: SchedulerState, j: int, gpus: Sequence[int], speeds: SpeedModel
    ) -> float:
        model = self._goodput_job(state, j)
        if model is None:
            factor = super().start_factor(state, j, gpus, speeds)
        else:
            factor = self._progress_factor(state, j, gpus)
        self._started[j] = factor
        return factor

    compares_placements = True

    def spread_free(self, b: PlanBuilder, state: SchedulerState, free: FreeGPUs) -> FreeGPUs:
        """With ``avoid_interference``: the free GPUs of nodes that hold no gang
        spanning nodes (those running on, and those this plan starts)."""
        if not self.avoid_interference:
            return free
        node_of = state.cluster.gpu_node
        stopped = set(b.plan.stops)
        gangs = [state.alloc[j] for j in state.running.array().tolist() if j not in stopped]
        gangs += list(b.plan.starts.values())
        taken: set[int] = set()
        for gpus in gangs:
            nodes = {int(node_of[g]) for g in gpus or ()}
            if len(nodes) > 1:
                taken |= nodes
        if not taken:
            return free
        return FreeGPUs(state.cluster, free.mask & ~np.isin(node_of, sorted(taken)))

    def pick_placement(
        self, state: SchedulerState, j: int, options: list[tuple[int, ...]]
    ) -> tuple[int, ...]:
        """The placement with the best goodput the job's model believes in: a
        division counts GPUs as if on their fewest nodes, and where the free
        GPUs are scattered, fewer GPUs on fewer nodes can be worth more than
        the size given (Pollux's search weighs the nodes a job spans too). A
        running job's own GPUs are among the options when still free; any
        other placement is scaled by its re-allocation penalty, so it moves
        only where the layout it can get is worth the restart."""
        if len(options) == 1 or self._goodput_job(state, j) is None:
            return options[0]
        cluster = state.cluster
        held = tuple(state.alloc[j] or ())
        penalty = self._realloc_factor(state, j) if held else 1.0
        rated = []
        for g in options:
            goodput = self._rate(j, len(g), Span.of(cluster, g))[1]
            rated.append((goodput if g == held else goodput * penalty, len(g), g == held, g))
        return max(rated, key=lambda r: r[:3])[3]

    def _progress_factor(self, state: SchedulerState, j: int, gpus: Sequence[int]) -> float:
        """Steps (at the submitted batch, in which its work is counted) per
        second at the batch the policy picks on these GPUs, relative to the
        speed the engine gives the job there on its own (its submitted batch on
        the GPUs asked for, times the placement's locality). The batch is
        picked for the GPUs' actual layout, from what the policy believes (its
        fit, when learning): a gang split across nodes syncs over the network
        and is worth a larger batch (gradient accumulation). The speed is the
        truth at that batch and layout, as the engine runs the job."""
        w = len(gpus)
        span = Span.of(state.cluster, gpus)
        batch, goodput = self._rate(j, w, span)
        self.batches[j] = batch
        model = self._goodput_job(state, j)
        assert model is not None
        profile = model_profile(model)
        assert profile is not None
        node = int(state.cluster.node_gpus.max())
        own, initial = int(state.batch_size[j]), self._initial(state, j, model)
        gm: GoodputModel = goodput_model(profile, state.cluster.links, node, own)
        noise = self._noise[j]
        if self.learns:
            gain = efficiency(noise, initial, batch) if noise == noise else 1.0
            goodput = gm.throughput(w, batch, span) * gain
        if initial != own and noise == noise:  # goodput at M0's efficiency -> at its own
            goodput *= efficiency(noise, own, initial)
        speeds = self._speeds or SpeedModel()
        locality = speeds.locality.factor(state.cluster, gpus, state.model[j])
        return goodput / gm.throughput(int(state.gpus[j]), float(own)) / locality

    def retune(self, builder: PlanBuilder, state: SchedulerState, kept: list[int]) -> None:
        for j in kept:
            gpus = state.alloc[j]
            if self._goodput_job(state, j) is None or j not in self._started or not gpus:
                continue
            before = self.batches.get(j)
            factor = self._progress_factor(state, j, gpus)
            if abs(factor - self._started[j]) > 1e-9 * self._started[j]:
                builder.plan.respeeds[j] = factor / self._started[j]
                self.counts["retunes"] += 1
            if self.batches[j] != before:
                builder.plan.batch_sizes[j] = round(self.batches[j])

    def on_start(
        self, builder: PlanBuilder, state: SchedulerState, j: int, gpus: Sequence[int]
    ) -> None:
        if j in self.batches and self._goodput_job(state, j) is not None:
            builder.plan.batch_sizes[j] = round(self.batches[j])
