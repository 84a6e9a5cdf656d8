"""The discrete-event engine.

Events are arrivals (read in submit order from the job table), completions
(a heap; a job's entry is invalidated by bumping its version when it is
stopped) and the policy's own wake-up. Everything that happens at one instant
is applied first, then the policy is asked once and its plan carried out:
stops before starts, a switching cost charged whenever a preempted job starts
again, speed from the locality model. The engine, not the policy, owns the
bookkeeping, so a buggy plan (a GPU given twice, a job started twice) raises.

Plans may also pack a job onto a running job's GPUs (both then run at their
measured shared speeds until one leaves; a guest whose host leaves
carries on alone on the GPUs), change running jobs' speeds, and give elastic policies a multiple
of the GPUs a job asked for. With ``failure_rate`` set, an attempt may fail at
a drawn step count: its progress is lost and it is retried up to
``max_retries`` times.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from types import MappingProxyType

import numpy as np

from corral.model.apply_plan import apply_plan
from corral.model.cluster import Cluster
from corral.model.jobs import JobTable
from corral.model.plan import Directive, Plan, PlanError, upcoming
from corral.model.state import RUNNING, SchedulerState
from corral.model.unsaved_work import keep_unsaved_work
from corral.policies.base import Policy
from corral.sim.invariants import InvariantChecker
from corral.sim.result import SimConfig, SimResult, Timeline

TIME_EPS = 1e-6
"""Completions and arrivals within this many seconds of an instant belong to it
(float noise: a round boundary and an arrival meant for the same instant must not
become two passes, as they are one live, where both are read off one clock)."""


STALE_FACTOR = 4
"""The completion heap is rebuilt without its outdated entries once it holds this
many times as many entries as jobs run."""

MAX_DELAYS = 100_000
"""Times admission may delay one job before the run stops as looping for ever."""


SIM_DIRECTIVES: Mapping[Directive, str] = MappingProxyType(
    {
        Directive.PACKS: "the pair runs at once, each at its factor of its speed alone",
        Directive.TIMESLICES: (
            "the group runs at the rates its packs or respeeds give; when one leaves, "
            "the others share its time"
        ),
        Directive.RESPEEDS: "the running job's speed changes from this instant",
        Directive.FACTORS: "the started job's speed is multiplied by its factor",
        Directive.LOW_PRIORITY: "nothing more: an opportunistic job's speed comes with its pack",
        Directive.BATCH_SIZES: "nothing more: the speeds account for the batch size (factors)",
        Directive.OVERHEADS: "the start costs these seconds instead of the switch cost",
        Directive.PRESTAGE: "nothing more: the policy charges what staging leaves (overheads)",
    }
)
"""What the simulator does with each directive a plan may carry."""


class Simulator:
    """Replays a job table on a cluster under a policy."""

    def __init__(
        self,
        jobs: JobTable,
        cluster: Cluster,
        policy: Policy,
        config: SimConfig | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.jobs = jobs
        self.cluster = cluster
        self.policy = policy
        self.config = config or SimConfig()
        self.progress = progress
        self.state = SchedulerState(cluster, jobs, self.config.speeds)
        self._heap: list[tuple[float, int, int, bool]] = []
        """(time, job, version, fails): the end of a job's current attempt."""
        self._rng = np.random.default_rng(self.config.seed)
        self._version = np.zeros(len(jobs), dtype=np.int64)
        self._fail_steps = np.full(len(jobs), np.nan)
        """Step count at which the current attempt fails (NaN: it will not)."""
        self._injects_failures = self.config.injects_failures
        self._delayed: list[tuple[float, int]] = []
        """(when to ask again, job): arrivals admission delayed (a heap)."""
        self._delays = np.zeros(len(jobs), dtype=np.int64)
        self._checker = (
            InvariantChecker(self.state, self.policy.resizes)
            if self.config.check_invariants
            else None
        )

    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        state = self.state
        submit = state.submit
        n = len(submit)
        heap = self._heap
        version = self._version
        timeline = Timeline()
        rejected: list[int] = []
        next_arrival = 0
        wakeup: float | None = None
        events = passes = 0
        busy_seconds = 0.0
        last_t = 0.0
        total_gpus = self.cluster.total_gpus
        report_every = max(1, n // 200)
        every = self.config.decide_every
        jobs_moved = False
        while True:
            while heap and heap[0][2] != version[heap[0][1]]:
                heapq.heappop(heap)
            t = math.inf
            if next_arrival < n:
                t = submit[next_arrival]
            if heap and heap[0][0] < t:
                t = heap[0][0]
            if wakeup is not None and wakeup < t:
                t = wakeup
            if self._delayed and self._delayed[0][0] < t:
                t = self._delayed[0][0]
            if t == math.inf or t > self.config.max_time:
                if t != math.inf:  # stopped by the limit: the run covers time up to it
                    busy_seconds += state.busy_gpus * (self.config.max_time - last_t)
                    last_t = self.config.max_time
                break
            t = float(t)
            # a wake-up or completion and an arrival within TIME_EPS of it are one
            # instant (the arrival's: no job starts before its submission)
            if next_arrival < n and t < submit[next_arrival] <= t + TIME_EPS:
                t = float(submit[next_arrival])
            busy_seconds += state.busy_gpus * (t - last_t)
            last_t = t
            state.now = t
            events_before = events
            while heap and heap[0][0] <= t + TIME_EPS:
                due = []
                while heap and heap[0][0] <= t + TIME_EPS:
                    due.append(heapq.heappop(heap))
                # a packed guest ending now leaves before its host does, so the
                # host's own ending is not mistaken for an eviction of the guest
                if len(due) > 1:
                    due.sort(key=lambda entry: state.host[entry[1]] < 0)
                for _, i, ver, fails in due:
                    if ver != version[i]:
                        continue
                    version[i] += 1
                    events += 1
                    self._leave(i)
                    if fails:
                        state.fail(i, final=state.failures[i] >= self.config.max_retries)
                        continue
                    state.finish(i)
                    if self._checker is not None:
                        self._checker.on_finish(i)
            while next_arrival < n and submit[next_arrival] <= t:
                i = next_arrival
                next_arrival += 1
                events += 1
                if state.gpus[i] > total_gpus:
                    state.reject(i)
                    rejected.append(i)
                else:
                    self._admit(i, rejected)
            while self._delayed and self._delayed[0][0] <= t + TIME_EPS:
                events += 1
                self._admit(heapq.heappop(self._delayed)[1], rejected)
            jobs_moved = jobs_moved or events > events_before  # a job ended, failed or arrived
            if every and not on_grid(t, every):
                # passes are on a grid: what happened waits for the next tick
                tick = next_tick(t, every)
                wakeup = tick if wakeup is None else min(wakeup, tick)
                continue
            if wakeup is not None and wakeup <= t:
                wakeup = None
                events += 1
            plan = self.policy.schedule(state)
            if not state.all_checkpoint:  # (a trace's jobs all checkpoint unless it says)
                plan = keep_unsaved_work(plan, state)
            passes += 1
            self._apply(plan)
            # each pass says when it next needs a pass of its own; a wake-up an
            # earlier pass asked for lapses (as in the live service), so a
            # policy is not run at instants it no longer cares about
            wakeup = upcoming(plan.next_wakeup, t)
            if every and wakeup is not None:  # (the tick at or after it, after now)
                wakeup = max(math.ceil((wakeup - TIME_EPS) / every) * every, next_tick(t, every))
            # (a pass in which no job moved and the plan changed nothing leaves the
            # state the last check saw: Pollux and Gavel wake every round to find so)
            if self._checker is not None and (jobs_moved or not (plan.empty and not plan.respeeds)):
                self._checker.after_pass()
            jobs_moved = False
            timeline.time.append(t)
            timeline.busy_gpus.append(state.busy_gpus)
            timeline.pending.append(len(state.pending))
            timeline.running.append(len(state.running))
            if self.progress is not None and (passes % 256 == 0 or next_arrival == n):
                self.progress(next_arrival - next_arrival % report_every, n)
        result = SimResult(
            state=state,
            policy=self.policy,
            cluster=self.cluster,
            jobs=self.jobs,
            config=self.config,
            events=events,
            passes=passes,
            wall_s=time.perf_counter() - wall0,
            end_time=last_t,
            busy_gpu_seconds=busy_seconds,
            rejected=rejected,
            timeline=timeline,
        )
        if self._checker is not None:
            self._checker.at_end(result)
        return result

    def _apply(self, plan: Plan) -> None:
        """Carry the plan out through the walk both engines share (checks, then
        stops, then starts: :func:`apply_plan`), then the speed changes it asks."""
        if plan.empty and not plan.respeeds:
            return
        state = self.state
        apply_plan(
            plan,
            state,
            self.cluster,
            _Carried(self, plan),
            "simulator",
            elastic=self.policy.elastic,
            resizes=self.policy.resizes,
        )
        if plan.respeeds:
            count = len(plan.respeeds)
            index = np.fromiter(plan.respeeds, dtype=np.int64, count=count)
            stray = index[state.status[index] != RUNNING]
            if len(stray):
                job = state.job_ids[int(stray[0])]
                raise PlanError(f"plan changes the speed of job {job}, not running")
            factors = np.fromiter(plan.respeeds.values(), dtype=np.float64, count=count)
            self._respeed_many(index, state.base_speed[index] * factors)
        if plan.free_after is not None:
            state.free = plan.free_after

    def _admit(self, i: int, rejected: list[int]) -> None:
        """Ask the policy's admission about arriving job ``i``: queue it, refuse it, or
        ask again later (see :mod:`corral.policies.admission`)."""
        state = self.state
        verdict = self.policy.admit(state, i)
        if verdict.action == "admit":
            state.arrive(i)
        elif verdict.action == "reject":
            state.reject(i)
            rejected.append(i)
        else:
            until = verdict.until
            job = state.job_ids[i]
            if until is None or not until > state.now + TIME_EPS:
                raise PlanError(
                    f"admission delayed job {job} to {until}, not after now ({state.now}): "
                    "a delay names a later time to ask again"
                )
            self._delays[i] += 1
            if self._delays[i] > MAX_DELAYS:
                raise PlanError(
                    f"admission delayed job {job} {MAX_DELAYS:,} times: it would wait for ever"
                )
            heapq.heappush(self._delayed, (float(until), i))

    def _draw_failure(self, i: int) -> None:
        """Decide whether the attempt just started fails, and at which step."""
        state = self.state
        if self._rng.random() < self.config.attempt_failure_rate(int(state.gpus[i])):
            left = state.total_steps[i] - state.steps_done[i]
            self._fail_steps[i] = state.steps_done[i] + self._rng.random() * left
        else:
            self._fail_steps[i] = np.nan

    def _push(self, i: int) -> None:
        """Schedule the end of job ``i``'s attempt (finish, or failure if one was drawn)."""
        state = self.state
        target = float(self._fail_steps[i])
        fails = target == target  # not NaN
        if not fails:
            target = float(state.total_steps[i])
        left = target - float(state.steps_done[i])
        at = float(state.progress_start[i]) + (left if left > 0.0 else 0.0) / float(state.speed[i])
        heapq.heappush(self._heap, (at, i, int(self._version[i]), fails))
        self._compact()

    def _compact(self) -> None:
        """Drop outdated entries from the completion heap once they outnumber the
        live ones: each change of speed leaves the job's old entry behind, and
        under processor sharing (every member of a group respeeded at each join
        and departure) they would pile up many times over."""
        heap = self._heap
        if len(heap) > STALE_FACTOR * len(self.state.running) + 1024:
            version = self._version
            heap[:] = [entry for entry in heap if entry[2] == version[entry[1]]]
            heapq.heapify(heap)

    def _respeed_many(self, index: np.ndarray, new: np.ndarray) -> None:
        """:meth:`_respeed` for several jobs (distinct) at once, with the same
        arithmetic in arrays: a time-sliced group's members change speed
        together whenever one joins or leaves."""
        state = self.state
        changed = state.speed[index] != new
        if not changed.all():
            index, new = index[changed], new[changed]
        if len(index) < 2:
            for i, speed in zip(index.tolist(), new.tolist(), strict=True):
                self._respeed(i, speed)
            return
        state.respeed_many(index, new)
        version = self._version
        version[index] += 1
        target = self._fail_steps[index]
        fails = ~np.isnan(target)
        if not fails.any():
            target = state.total_steps[index]
        else:
            target = np.where(fails, target, state.total_steps[index])
        at = state.progress_start[index] + np.maximum(target - state.steps_done[index], 0.0) / new
        heap = self._heap
        push = heapq.heappush
        for entry in zip(
            at.tolist(), index.tolist(), version[index].tolist(), fails.tolist(), strict=True
        ):
            push(heap, entry)
        self._compact()

    def _respeed(self, i: int, speed: float) -> None:
        state = self.state
        if state.speed[i] == speed:
            return
        state.respeed(i, speed)
        self._version[i] += 1
        self._push(i)

    def _leave(self, i: int) -> None:
        """Before job ``i`` stops running: end any sharing it is part of.

        Alone again, the job left on its GPU set runs at its speed alone (a
        guest takes its host's GPUs over, a host's guest has left). In a
        time-sliced group that keeps two or more jobs, the others share the time
        ``i`` had: each member's speed grows by ``n / (n - 1)`` (processor
        sharing, Gandiva's time-slicing of any number of jobs).
        """
        state = self.state
        if state.guest[i] < 0 and state.host[i] < 0:
            return
        group = state.sharing_group(i)
        n = len(group)
        if n == 2:
            other = group[1] if group[0] == i else group[0]
            self._respeed(other, float(state.base_speed[other]))
        else:
            others = np.array([j for j in group if j != i], dtype=np.int64)
            self._respeed_many(others, state.speed[others] * (n / (n - 1)))


_NOTHING = contextlib.nullcontext()


class _Carried:
    """The simulator as one plan's walk sees it (:class:`PlanTarget`): a refused
    stop or start stops the run; a stop ends the job's attempt and its packing;
    a start takes the plan's GPUs at the locality model's speed (times the plan's
    factor), draws its failure, and sets a packed pair to the plan's factors."""

    directives = SIM_DIRECTIVES

    def __init__(self, sim: Simulator, plan: Plan) -> None:
        self.sim = sim
        self.plan = plan
        self.take = plan.free_after is None  # (else the state adopts the plan's free GPUs)

    def about(self, i: int, what: str) -> AbstractContextManager[object]:
        return _NOTHING  # (an error stops the run, as a refusal does)

    def refuse(self, i: int, what: str, why: str) -> None:
        raise PlanError(f"plan {what}s job {self.sim.state.job_ids[i]}, but {why}")

    def stop(self, i: int) -> None:
        sim = self.sim
        sim._leave(i)
        sim.state.preempt(i, release=self.take)
        sim._version[i] += 1

    def start(self, i: int, gpus: tuple[int, ...], host: int) -> None:
        sim, plan = self.sim, self.plan
        state, cluster, config = sim.state, sim.cluster, sim.config
        restart = config.charge_first_start or state.preemptions[i] > 0 or state.failures[i] > 0
        overhead = plan.overheads.get(i, config.switch_cost if restart else 0.0)
        speed = config.speeds.gang_speed(
            cluster, gpus, state.job_type[i], state.model[i], float(state.ref_speed[i])
        )
        if plan.factors:
            speed *= plan.factors.get(i, 1.0)
        if speed <= 0:
            types = sorted({cluster.node_types[cluster.gpu_node[g]] for g in gpus})
            raise PlanError(
                f"plan starts job {state.job_ids[i]} ({state.job_type[i]}) on "
                f"{'/'.join(types)} GPUs, where its measured speed is 0 (it does not fit)"
            )
        state.start(i, gpus, speed, overhead, take=self.take, host=host)
        if sim._injects_failures:
            sim._draw_failure(i)
        sim._push(i)
        if host >= 0:
            _, guest_factor, host_factor = plan.packs[i]
            sim._respeed(i, state.base_speed[i] * guest_factor)
            sim._respeed(host, state.base_speed[host] * host_factor)


def on_grid(t: float, every: float) -> bool:
    """Whether ``t`` is a tick of a grid of passes ``every`` seconds apart from 0."""
    return abs(t - round(t / every) * every) <= TIME_EPS


def next_tick(t: float, every: float) -> float:
    """The grid's first tick after ``t`` (a tick within TIME_EPS of ``t`` is ``t``'s own)."""
    return (math.floor((t + TIME_EPS) / every) + 1) * every
