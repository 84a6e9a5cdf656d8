"""Optimus (Peng et al., EuroSys 2018): predict each job's work left from its
loss curve, and hand GPUs out one at a time where they cut completion time most.

Each scheduling interval (10 minutes by default, as in the paper) Optimus

1. predicts every active job's **remaining steps**: its loss curve refitted
   to the points seen so far (``estimate.convergence``), solved for the
   step at which the curve reaches the job's target;
2. predicts its **speed on w GPUs** from a curve fitted to the sizes it has
   been profiled or seen at;
3. gives each job one GPU, shortest predicted remaining time first, then each
   further GPU to the job whose predicted remaining time ``R / speed(w)`` drops
   most with it, until the GPUs run out or no job gains;
4. resizes running jobs to their new sizes (a restart from a checkpoint),
   unless the change would alter their predicted remaining time by less than
   ``min_change`` (10%): churn has a price the model does not see.

Between intervals, arriving jobs get free GPUs by the same rule (the pass is
``policies.resizing``'s, shared with Pollux). A job's ask is where it starts,
not a gang it must keep (Optimus' jobs are elastic), so the policy
``resizes``; the speed at another size is the performance model's
(``SpeedModel.size_factor``).

**Parameter servers** (``parameter_servers=N``, simulator only): the cluster
has N parameter-server slots besides its GPUs, and a job whose model the
communication model knows (``perf.communication``) synchronises through
servers instead of all-reduce. Each such job needs one server to run; then
each further worker or server goes, one at a time, to the job whose predicted
completion time drops most per share of that resource (a GPU is 1/G of the
GPUs, a server 1/N of the servers), as in the paper. Optimus believes
its own model of a step on ``w`` workers and ``p`` servers, fitted to a profile
at several (w, p) (``estimate.convergence.ServerSpeedCurve``); the speed the
job really gets is the communication model's. ``allocation=drf`` shares both
resources by dominant resource fairness instead, each job asking for a server
per ``drf_split`` workers as its user would set it (the paper does not give
its baseline's split).

Where the remaining steps come from:

* **Simulator**: jobs of Pollux's workloads carry their training curve (the
  bundled validation curve at their batch size). The policy sees the points
  up to the steps the job has done and fits them; the target is the curve's
  last value, what the run trained to. Optimus profiles a new job at a few
  sizes before it runs; here the profile is the performance model's speed at
  1, 2, 4, ... GPUs.
* **Live**: the loss curve the service fits to the job's heartbeats when it
  states a ``target_loss`` (``runtime.estimates.LossHistory``). Speeds are
  those measured by heartbeats at each size it ran at, scaled so that the
  size it asked for runs at its nominal speed.
* Jobs with no curve (most traces, live jobs without a target loss) are
  predicted to need twice the work done so far, and at least the median of
  finished jobs' work: the usual least-attained-service guess, stated. Not
  the trace's run time (an oracle) nor the owner's guess: the simulator and
  the service then decide alike.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from corral.errors import CorralError
from corral.estimate.convergence import (
    LossCurve,
    ServerSpeedCurve,
    SpeedCurve,
    fit_loss_curve,
    fit_server_speed,
    fit_speed,
    predicted_total_steps,
)
from corral.model.state import SchedulerState
from corral.perf.communication import model_profile, ps_factor
from corral.perf.pollux_models import pollux_model, training_curve
from corral.perf.speeds import SpeedModel
from corral.placement.strategies import PlacementStrategy
from corral.policies.base import PlanBuilder
from corral.policies.options import Option
from corral.policies.resizing import ResizingPolicy, admit_one_each, median_finished_seconds

SERVERS_LIVE = (
    "optimus: parameter_servers is for the simulator: the service runs no parameter "
    "servers (its jobs synchronise by all-reduce); leave the option out for 'corral serve'"
)

PRIOR_SECONDS = 3600.0
"""Work of a job with no curve before any job has finished (an hour at its speed)."""


class Optimus(ResizingPolicy):
    name = "optimus"
    options: ClassVar[dict[str, Option]] = {
        "interval": Option("seconds between re-allocations", above=0),
        "min_change": Option(
            "a job resizes only if its predicted time changes by more than this share", low=0
        ),
        "max_gpus": Option("most GPUs a job may get (0: no cap)", "integer", low=0),
        "parameter_servers": Option(
            "simulator: parameter-server slots (0: all-reduce)", "integer", low=0
        ),
        "predictions": Option(
            "curve: work left from the fitted loss curve; oracle (simulator): the trace's "
            "true work left, to measure what prediction errors cost",
            "choice",
            choices=("curve", "oracle"),
        ),
        "allocation": Option(
            "optimus: each GPU where predicted completion drops most, shortest first; drf: "
            "equal shares in arrival order (the paper's DRF baseline, same jobs and resizing)",
            "choice",
            choices=("optimus", "drf"),
        ),
        "drf_split": Option(
            "allocation=drf with parameter servers: workers per server each job asks for "
            "(its servers are its workers over this, rounded up)",
            "integer",
            low=1,
        ),
    }
    description = (
        "Optimus: loss curves fitted online predict work left; each GPU goes where it "
        "shortens predicted completion most; jobs resize"
    )
    simulator_only: ClassVar[dict[str, str]] = {
        "parameter_servers": SERVERS_LIVE,
        "predictions": "predictions=oracle reads the trace's true work, which a live job "
        "does not have",
    }
    live_note = (
        "work left comes from the loss curve fitted to heartbeats (jobs with a target_loss), "
        "speeds per size from heartbeats; a resize restarts the job from its checkpoint"
    )

    def __init__(
        self,
        placement: PlacementStrategy | None = None,
        interval: float = 600.0,
        min_change: float = 0.1,
        max_gpus: int = 0,
        parameter_servers: int = 0,
        predictions: str = "curve",
        allocation: str = "optimus",
        drf_split: int = 1,
        **params: Any,
    ) -> None:
        super().__init__(placement, interval, min_change, max_gpus, **params)
        if allocation not in ("optimus", "drf"):
            raise CorralError(f"optimus: allocation must be optimus or drf, got {allocation!r}")
        if int(drf_split) != drf_split or drf_split < 1:
            raise CorralError(f"optimus: drf_split must be a whole number >= 1, got {drf_split}")
        self.allocation = allocation
        self.drf_split = int(drf_split)
        if predictions not in ("curve", "oracle"):
            raise CorralError(f"optimus: predictions must be curve or oracle, got {predictions!r}")
        self.predictions = predictions
        if parameter_servers < 0:
            raise CorralError(
                f"optimus: parameter_servers must be >= 0 (0: all-reduce), got {parameter_servers}"
            )
        self.parameter_servers = int(parameter_servers)
        self._servers: dict[int, int] = {}
        """Running jobs' parameter servers."""
        self._planned_servers: dict[int, int] = {}
        self._server_curves: dict[int, ServerSpeedCurve] = {}
        """Jobs that use servers -> Optimus' model of their speed."""
        self._servers_free = 0
        self._loss_fits: dict[int, tuple[int, LossCurve | None]] = {}
        """job -> (curve points fitted, the fit)."""
        self._speed_fits: dict[int, tuple[int, SpeedCurve]] = {}
        self._fits_by_profile: dict[tuple[object, ...], SpeedCurve] = {}
        """Simulated jobs' speed curves by what the performance model reads of a job."""
        self._seen: dict[int, dict[int, float]] = {}
        """Live: job -> {GPUs: steps/s measured there}."""
        self._remaining: dict[int, float] = {}
        self._curves: dict[int, SpeedCurve] = {}
        self.counts["fits"] = 0

    # ---- predictions -------------------------------------------------------

    def _curve(self, state: SchedulerState, i: int) -> tuple[tuple[float, ...], ...] | None:
        model = pollux_model(state.model[i]) if state.model[i] else None
        batch = int(state.batch_size[i])
        if model is None or batch <= 0:
            return None
        try:
            return training_curve(model, batch)
        except CorralError:
            return None

    def predicted_total(self, state: SchedulerState, i: int, done: float, prior: float) -> float:
        """Steps job ``i`` is predicted to need in all: from its loss curve where
        there is one, else twice what it has done (at least the median finished
        job's work). Never the trace's or the owner's figure: Optimus does not
        take users' word for it."""
        if self.predictions == "oracle" and state.known_in_advance:
            return float(state.total_steps[i])
        fallback = max(2.0 * done, prior * float(state.ref_speed[i]))
        if not state.known_in_advance:  # live: the service fits the heartbeats' curve
            return max(float(state.total_steps[i]), done) if state.curve_predicted[i] else fallback
        curve = self._curve(state, i)
        if curve is None:
            return fallback
        steps, values = curve
        seen = int(np.searchsorted(np.asarray(steps), done, side="right"))
        cached = self._loss_fits.get(i)
        if cached is None or cached[0] != seen:
            fit: LossCurve | None = fit_loss_curve(steps[:seen], values[:seen]) if seen else None
            self._loss_fits[i] = (seen, fit)
            self.counts["fits"] += 1
        total = predicted_total_steps(self._loss_fits[i][1], values[-1], done)
        return fallback if total is None else total

    def speed_curve(self, state: SchedulerState, i: int, speeds: SpeedModel) -> SpeedCurve:
        """Steps/s of job ``i`` by GPU count, as Optimus believes it."""
        if not state.known_in_advance:
            seen = self._seen.setdefault(i, {})
            alloc = state.alloc[i]
            if alloc is not None and state.observed_speed[i] == state.observed_speed[i]:
                seen[len(alloc)] = float(state.observed_speed[i])
            key = hash(tuple(sorted(seen.items())))
            cached = self._speed_fits.get(i)
            if cached is None or cached[0] != key:
                asked = int(state.gpus[i])
                ref = float(state.ref_speed[i])
                fit = fit_speed(list(seen), list(seen.values())) if seen else None
                if fit is None:
                    fit = SpeedCurve(asked / ref, 0.0, 0.0)
                else:  # heartbeats count the job's own steps: rescale to the state's
                    c = 1.0 / (ref * float(fit.step_time(asked)))
                    fit = SpeedCurve(fit.theta0 * c, fit.theta1 * c, fit.theta2 * c)
                self._speed_fits[i] = (key, fit)
            return self._speed_fits[i][1]
        cached = self._speed_fits.get(i)
        if cached is None:
            # jobs alike (what the performance model reads of them) have the same
            # profile: measured and fitted once
            ref = float(state.ref_speed[i])
            alike = (
                state.job_type[i],
                state.model[i],
                int(state.gpus[i]),
                int(state.batch_size[i]),
                ref,
                id(speeds),
                id(state.cluster),
            )
            fit = self._fits_by_profile.get(alike)
            if fit is None:
                sizes = [w for w in (1, 2, 4, 8, 16, 32, 64) if w <= state.cluster.total_gpus]
                rates = self.model_speeds(state, i, np.asarray(sizes), speeds).tolist()
                fit = fit_speed(sizes, rates) or SpeedCurve(1.0 / ref, 0.0, 0.0)
                self._fits_by_profile[alike] = fit
            self._speed_fits[i] = (0, fit)
            cached = self._speed_fits[i]
        return cached[1]

    # ---- the resizing pass's hooks --------------------------------------------

    def prepare(self, state: SchedulerState, jobs: list[int], speeds: SpeedModel) -> None:
        done = state.done_steps(np.asarray(jobs, dtype=np.int64))
        prior = median_finished_seconds(state, PRIOR_SECONDS)
        self._remaining, self._curves = {}, {}
        for j, d in zip(jobs, done.tolist(), strict=True):
            self._remaining[j] = max(self.predicted_total(state, j, d, prior) - d, 1e-9)
            self._curves[j] = self.speed_curve(state, j, speeds)
        if self.parameter_servers:
            if not state.known_in_advance:
                raise CorralError(SERVERS_LIVE)
            running = set(state.running)
            self._servers = {j: p for j, p in self._servers.items() if j in running}
            deciding = set(jobs)
            held = sum(p for j, p in self._servers.items() if j not in deciding)
            self._servers_free = self.parameter_servers - held
            self._planned_servers = {}
            for j in jobs:
                if self.uses_servers(state, j) and j not in self._server_curves:
                    self._server_curves[j] = self._profile_servers(state, j, speeds)

    # ---- parameter servers ---------------------------------------------------

    def uses_servers(self, state: SchedulerState, j: int) -> bool:
        """Whether job ``j`` synchronises through parameter servers: they are on
        and the communication model knows its model."""
        return bool(self.parameter_servers) and model_profile(state.model[j]) is not None

    def true_server_factor(self, state: SchedulerState, j: int, gpus: int, servers: int) -> float:
        """The communication model's speed of ``j`` with ``servers`` servers,
        relative to its all-reduce speed at the same size."""
        profile = model_profile(state.model[j])
        assert profile is not None
        cluster = state.cluster
        return ps_factor(profile, gpus, servers, int(cluster.node_gpus.max()), cluster.links)

    def _profile_servers(
        self, state: SchedulerState, j: int, speeds: SpeedModel
    ) -> ServerSpeedCurve:
        """Optimus profiles a new job at a few (workers, servers) before it
        runs; here the profile is the performance model's speed there."""
        total = state.cluster.total_gpus
        sizes = [w for w in (1, 2, 4, 8, 16, 32) if w <= total]
        counts = [p for p in (1, 2, 4, 8) if p <= self.parameter_servers]
        bases = self.model_speeds(state, j, np.array(sizes), speeds).tolist()
        points = [(w, p, base) for w, base in zip(sizes, bases, strict=True) for p in counts]
        fit = fit_server_speed(
            [w for w, _, _ in points],
            [p for _, p, _ in points],
            [base * self.true_server_factor(state, j, w, p) for w, p, base in points],
        )
        return fit or ServerSpeedCurve((1.0 / float(state.ref_speed[j]), 0.0, 0.0, 0.0, 0.0))

    def server_cost(self, j: int, gpus: int, servers: int) -> float:
        """Predicted seconds to completion on ``gpus`` workers and ``servers`` servers."""
        return self._remaining[j] / self._server_curves[j].speed(gpus, servers)

    def _cost_at(self, j: int, gpus: int, servers: int) -> float:
        return self.server_cost(j, gpus, servers) if servers else self.cost(j, gpus)

    def allocate(
        self, jobs: list[int], capacity: int, pinned: dict[int, int], order: list[int]
    ) -> dict[int, int]:
        """Without parameter servers, the shared GPU rule. With them, Optimus'
        greedy over two resources: each admitted job gets a GPU (and a server,
        if it uses them), then each further GPU or server goes to the job whose
        predicted completion time drops most per share of that resource, until
        neither helps or both run out. Pinned jobs keep their servers too."""
        if self.allocation == "drf":
            return self._equal_shares(capacity, pinned, order)
        if not self.parameter_servers:
            return super().allocate(jobs, capacity, pinned, order)
        alloc, gpus_left, admitted, servers = self._admit_with_servers(capacity, pinned, order)
        servers_left = self._servers_free - sum(servers.values())
        cap = self.max_gpus or capacity
        gpu_share, server_share = float(capacity or 1), float(self.parameter_servers)
        heap: list[tuple[float, int, int]] = []

        def offer(j: int) -> None:
            w, p = alloc[j], servers.get(j, 0)
            now = self._cost_at(j, w, p)
            best = (0.0, 0)
            if gpus_left > 0 and w < cap:
                best = max(best, ((now - self._cost_at(j, w + 1, p)) * gpu_share, 0))
            if p and servers_left > 0:
                best = max(best, ((now - self._cost_at(j, w, p + 1)) * server_share, 1))
            if best[0] > 0:
                heapq.heappush(heap, (-best[0], j, best[1]))

        for j in admitted:
            offer(j)
        while heap and (gpus_left > 0 or servers_left > 0):
            _, j, kind = heapq.heappop(heap)
            if (kind == 0 and gpus_left <= 0) or (kind == 1 and servers_left <= 0):
                offer(j)  # that resource ran out: the job's other offer, if any
                continue
            if kind == 0:
                alloc[j] += 1
                gpus_left -= 1
            else:
                servers[j] += 1
                servers_left -= 1
            offer(j)
        self._planned_servers = servers
        return alloc

    def _equal_shares(
        self, capacity: int, pinned: dict[int, int], order: list[int]
    ) -> dict[int, int]:
        """Dominant resource fairness with GPUs the one resource: one GPU each in
        arrival order while they last, then each further GPU to the job holding
        fewest (earliest first among equals) while its predicted speed still grows,
        up to ``max_gpus``: water-filling, blind to work left."""
        if self.parameter_servers:
            return self._equal_dominant_shares(capacity, pinned, order)
        alloc, left, admitted = admit_one_each(order, pinned, capacity)
        cap = self.max_gpus or capacity
        rank = {j: k for k, j in enumerate(admitted)}
        heap = [(1, rank[j], j) for j in admitted]
        heapq.heapify(heap)
        while left > 0 and heap:
            held, _, j = heapq.heappop(heap)
            if held >= cap or self.cost(j, held + 1) >= self.cost(j, held):
                continue  # no faster with another GPU: it leaves the filling
            alloc[j] = held + 1
            left -= 1
            heapq.heappush(heap, (held + 1, rank[j], j))
        return alloc

    def _admit_with_servers(
        self, capacity: int, pinned: dict[int, int], order: list[int]
    ) -> tuple[dict[int, int], int, list[int], dict[int, int]]:
        """The first step of both allocations with servers: pinned jobs keep their GPUs
        and servers, the others get a GPU each in ``order``, a job that uses servers
        only with a server of its own. Returns (GPUs per job, GPUs left, the jobs
        admitted in order, servers per job)."""
        servers = {j: self._servers[j] for j in pinned if j in self._servers}
        left = self._servers_free - sum(servers.values())

        def with_server(j: int) -> bool:
            nonlocal left
            if j not in self._server_curves:
                return True
            if left <= 0:
                return False
            servers[j] = 1
            left -= 1
            return True

        alloc, gpus_left, admitted = admit_one_each(order, pinned, capacity, with_server)
        return alloc, gpus_left, admitted, servers

    def _equal_dominant_shares(
        self, capacity: int, pinned: dict[int, int], order: list[int]
    ) -> dict[int, int]:
        """Dominant resource fairness over two resources, GPUs (workers) and
        parameter-server slots, as the paper's DRF baseline shares a cluster: each
        job asks for its servers in a fixed split, as its user would (a server per
        ``drf_split`` workers, rounded up). One worker and one server each in
        arrival order while they last; then each further worker, with the server
        the split then needs, to the job whose dominant share (the larger of its
        shares of the GPUs and of the servers) is smallest, while its predicted
        speed still grows: water-filling, blind to work left."""
        alloc, left, admitted, servers = self._admit_with_servers(capacity, pinned, order)
        servers_left = self._servers_free - sum(servers.values())
        cap = self.max_gpus or capacity
        gpus, slots = float(capacity or 1), float(self.parameter_servers)

        def dominant(j: int) -> float:
            return max(alloc[j] / gpus, servers.get(j, 0) / slots)

        rank = {j: k for k, j in enumerate(admitted)}
        heap = [(dominant(j), rank[j], j) for j in admitted]
        heapq.heapify(heap)
        while left > 0 and heap:
            _, _, j = heapq.heappop(heap)
            w, p = alloc[j], servers.get(j, 0)
            need = max(p, -(-(w + 1) // self.drf_split)) if j in self._server_curves else 0
            if w >= cap or need - p > servers_left:
                continue  # at its cap, or no server left for its split: it leaves
            if self._cost_at(j, w + 1, need) >= self._cost_at(j, w, p):
                continue  # no faster with another worker
            alloc[j] = w + 1
            left -= 1
            if need:
                servers[j] = need
                servers_left -= need - p
            heapq.heappush(heap, (dominant(j), rank[j], j))
        self._planned_servers = servers
        return alloc

    def resized(self, state: SchedulerState, j: int, want: int) -> bool:
        if want != int(state.held[j]):
            return True
        return want > 0 and self._planned_servers.get(j, 0) != self._servers.get(j, 0)

    def _keeps_size(self, state: SchedulerState, j: int, want: int) -> bool:
        if j not in self._servers:
            return super()._keeps_size(state, j, want)
        now_w, now_p = int(state.held[j]), self._servers[j]
        want_p = self._planned_servers.get(j, 0)
        if want == 0:
            return False
        if (want, want_p) == (now_w, now_p):
            return True
        before = self.server_cost(j, now_w, now_p)
        after = self.server_cost(j, want, want_p)
        return abs(before - after) < self.min_change * abs(before)

    def start_factor(
        self, state: SchedulerState, j: int, gpus: Sequence[int], speeds: SpeedModel
    ) -> float:
        factor = super().start_factor(state, j, gpus, speeds)
        servers = self._planned_servers.get(j, 0)
        if servers:
            factor *= self.true_server_factor(state, j, len(gpus), servers)
        return factor

    def on_start(
        self, builder: PlanBuilder, state: SchedulerState, j: int, gpus: Sequence[int]
    ) -> None:
        servers = self._planned_servers.get(j, 0)
        if servers:
            self._servers[j] = servers
            self.counts["server_starts"] = self.counts.get("server_starts", 0) + 1
            self.counts["servers_started"] = self.counts.get("servers_started", 0) + servers

    def view(self, state: SchedulerState, job: int) -> dict[str, str]:
        servers = self._servers.get(job)
        return {"parameter servers": str(servers)} if servers else {}

    def cost(self, j: int, gpus: int) -> float:
        """Predicted seconds to completion on ``gpus`` GPUs."""
        return self._remaining[j] / float(self._curves[j].speed(gpus))

    def costs(self, j: int, sizes: np.ndarray) -> np.ndarray:
        return self._remaining[j] / np.asarray(self._curves[j].speed(sizes))

    def admission_key(self, state: SchedulerState, j: int) -> tuple[float, ...]:
        if self.allocation == "drf":
            return (float(state.submit[j]),)  # arrival order: DRF knows nothing of work left
        return (self.cost(j, 1),)
