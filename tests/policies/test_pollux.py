"""Pollux: statistical efficiency, goodput-optimal batch sizes, the p-mean
allocation against brute force, and the policy on Pollux's own jobs."""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.model.cluster import Links
from corral.model.state import DONE
from corral.perf.communication import Span, model_profile
from corral.perf.goodput import efficiency, goodput_model, noise_at
from corral.perf.pollux_models import largest_local_batch, micro_batches, noise_curve
from corral.policies.base import PlanBuilder
from corral.policies.pollux import Pollux
from corral.policies.resizing import ResizingPolicy, exact_division
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig
from corral.traces import load_trace
from tests.conftest import uniform


def test_statistical_efficiency():
    assert efficiency(1000.0, 128, 128) == 1.0
    assert efficiency(1000.0, 128, 1024) < efficiency(1000.0, 128, 256) < 1.0
    # a large noise scale makes large batches nearly free
    assert efficiency(1e9, 128, 4096) == pytest.approx(1.0, abs=1e-5)


def test_noise_scale_grows_along_a_curve_and_batches_follow_it():
    steps, noise = noise_curve("cifar10", 512)
    assert noise[-1] > 10 * noise[0]
    assert noise_at("cifar10", 512, 0) == noise[0]
    assert noise_at("cifar10", 512, steps[-1] + 1) == noise[-1]
    profile = model_profile("cifar10")
    assert profile is not None
    gm = goodput_model(profile, Links(), 4, 512)
    early, late = gm.best(8, noise[0]), gm.best(8, noise[-1])
    assert 512 <= early[0] < late[0] <= gm.max_batch
    # the best batch's goodput beats the initial batch's at the same size
    assert early[1] >= gm.throughput(8, 512) * efficiency(noise[0], 512, 512)
    # more GPUs never lower the best goodput here (the search may keep the batch)
    assert gm.best(4, noise[-1])[1] <= gm.best(8, noise[-1])[1]


class _Fixed(ResizingPolicy):
    """A resizing policy with given speed-up curves and Pollux's p = -1 cost."""

    name = "fixed"

    def __init__(self, curves: dict[int, tuple[float, float]]) -> None:
        super().__init__()
        self.curves = curves

    def speedup(self, j: int, w: int) -> float:
        slope, sync = self.curves[j]
        return 1.0 + slope * (w - 1) / (1.0 + sync * (w - 1))

    def prepare(self, state, jobs, speeds):  # pragma: no cover - not used here
        pass

    def cost(self, j: int, gpus: int) -> float:
        return 1.0 / self.speedup(j, gpus)

    def admission_key(self, state, j):  # pragma: no cover - not used here
        return (j,)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 2.0)), min_size=1, max_size=4),
    st.integers(1, 7),
)
def test_harmonic_mean_allocation_matches_brute_force(curves, capacity):
    """Concave speed-ups make each job's 1/speed-up convex, so the greedy
    allocation maximises the harmonic mean; checked against every allocation."""
    policy = _Fixed(dict(enumerate(curves)))
    jobs = list(range(len(curves)))
    got = policy.allocate(jobs, capacity, {}, jobs)
    if capacity < len(jobs):  # too few GPUs: the first in order get one each
        assert got == {j: 1 for j in jobs[:capacity]}
        return
    best = min(
        sum(policy.cost(j, w) for j, w in enumerate(ws))
        for ws in itertools.product(range(1, capacity + 1), repeat=len(jobs))
        if sum(ws) <= capacity
    )
    assert sum(policy.cost(j, w) for j, w in got.items()) == pytest.approx(best, rel=1e-9)


def test_pollux_runs_pollux_jobs_with_goodput_and_batch_sizes():
    jobs = load_trace("pollux-6", 32).head(24)
    policy = Pollux()
    cluster = uniform(8, 4, gpu_type="T4")
    result = Simulator(jobs, cluster, policy, SimConfig(check_invariants=True)).run()
    s = result.state
    assert (s.status == DONE).all()
    assert policy.counts["resizes"] > 0 and policy.counts["retunes"] > 0
    # every job ran at or above its initial batch size, within what was trained
    for j, batch in policy.batches.items():
        assert batch >= s.batch_size[j]
    # some job ran faster than on the GPUs it asked for (more GPUs, larger batch)
    assert (s.max_speedup > 1.0).any()


def test_pollux_on_a_trace_without_batch_sizes_divides_gpus_by_speed_ups():
    rows = [(0.0, 1, 3600.0), (0.0, 2, 7200.0), (100.0, 1, 600.0)]
    from tests.conftest import run

    result = run(rows, uniform(2, 4), "pollux")
    assert (result.state.status == DONE).all()


def test_bad_options_are_refused():
    with pytest.raises(Exception, match="p must be"):
        Pollux(p=0)
    with pytest.raises(Exception, match="interval"):
        Pollux(interval=-1)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.floats(-5.0, 5.0), min_size=4, max_size=4), min_size=1, max_size=4),
    st.integers(0, 6),
)
def test_exact_division_matches_brute_force_for_any_costs(rows, left):
    """The dynamic programme finds the least total cost for costs of any shape
    (here random, far from convex), as enumerating every division does."""
    arrays = [np.array(r) for r in rows]
    extras = exact_division(arrays, left)
    assert extras.sum() <= left and (extras >= 0).all() and (extras < 4).all()
    best = min(
        sum(r[e] for r, e in zip(arrays, es, strict=True))
        for es in itertools.product(range(4), repeat=len(rows))
        if sum(es) <= left
    )
    got = sum(r[e] for r, e in zip(arrays, extras, strict=True))
    assert got == pytest.approx(best, abs=1e-9)


def test_the_greedy_misses_what_the_exact_search_finds_on_non_convex_speed_ups():
    """A job whose second GPU helps little but whose fourth (a whole node)
    helps much: the greedy gives the spare GPUs to the other job one by one;
    the exact search gives the first job its node. The cost is Pollux's
    1/speed-up."""

    class _Two(ResizingPolicy):
        name = "two"
        speedups: ClassVar[dict[int, list[float]]] = {
            0: [1.0, 1.05, 1.1, 3.6],
            1: [1.0, 1.5, 1.8, 2.0],
        }

        def prepare(self, state, jobs, speeds):  # pragma: no cover - not used here
            pass

        def cost(self, j: int, gpus: int) -> float:
            return 1.0 / self.speedups[j][gpus - 1]

        def admission_key(self, state, j):  # pragma: no cover - not used here
            return (j,)

    greedy, exact = _Two(), _Two()
    exact.search = "exact"
    total = {
        "greedy": greedy.allocate([0, 1], 5, {}, [0, 1]),
        "exact": exact.allocate([0, 1], 5, {}, [0, 1]),
    }
    assert total["exact"] == {0: 4, 1: 1}
    cost = {k: sum(greedy.cost(j, w) for j, w in a.items()) for k, a in total.items()}
    assert cost["exact"] < cost["greedy"]
    assert exact.search_gaps and exact.search_gaps[0] > 0


class _Watching(Pollux):
    """Pollux that notes, at every start, the GPUs given and the cap then."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.starts: list[tuple[int, int, int]] = []

    def on_start(self, builder, state, j, gpus):
        self.starts.append((j, len(gpus), self._cap(j)))
        super().on_start(builder, state, j, gpus)


def test_pollux_learns_each_jobs_scaling_by_running_it():
    """With step times learnt (the default), a job is never given more than
    twice the GPUs it has been measured on, so jobs grow 1, 2, 4 ...; every job
    that ran has a fitted model; an oracle of the step times gives large
    allocations at once."""
    jobs = load_trace("pollux-6", 32).head(24)
    cluster = uniform(8, 4, gpu_type="T4")
    learning = _Watching()
    result = Simulator(jobs, cluster, learning, SimConfig(check_invariants=True)).run()
    assert (result.state.status == DONE).all()
    assert learning.starts and all(w <= cap for _, w, cap in learning.starts)
    first = {}
    for j, w, _ in learning.starts:
        first.setdefault(j, w)
    assert set(first.values()) == {1}  # nothing measured: one GPU
    assert max(w for _, w, _ in learning.starts) >= 4  # and grown by learning
    assert learning.counts["fits"] > 0
    assert all(p.model is not None for p in learning.profiles.values())
    oracle = _Watching(throughput="known")
    Simulator(jobs, cluster, oracle, SimConfig(check_invariants=True)).run()
    oracle_first: dict[int, int] = {}
    for j, w, _ in oracle.starts:
        oracle_first.setdefault(j, w)
    assert max(oracle_first.values()) > 1


def test_what_a_learning_pollux_believes_does_not_change_how_fast_a_job_runs():
    """The engine runs a job at the truth: at the batch the policy picks, a
    learning Pollux and the oracle give the same speed factor."""
    jobs = load_trace("pollux-6", 32).head(8)
    cluster = uniform(8, 4, gpu_type="T4")
    learning, oracle = Pollux(), Pollux(throughput="known")
    Simulator(jobs, cluster, learning, SimConfig()).run()
    state = Simulator(jobs, cluster, oracle, SimConfig()).run().state
    j = next(iter(learning.profiles))
    for policy in (learning, oracle):
        policy._state = state
        policy._noise[j] = float("nan")  # batch stays: both pick the initial one
    assert learning._progress_factor(state, j, range(4)) == pytest.approx(
        oracle._progress_factor(state, j, range(4)), rel=1e-12
    )


def test_starting_from_the_models_smallest_batch_counts_progress_in_the_jobs_own_steps():
    """With ``initial_batch=model`` a job may run below the batch it was
    submitted with, and its goodput is converted to steps at its own batch
    by statistical efficiency: where both settings pick the same batch (a
    large noise scale favours the largest), they give the same speed; where
    the small batch is picked, its steps are worth more than one each."""
    jobs = load_trace("pollux-6", 32).head(8)
    cluster = uniform(8, 4, gpu_type="T4")
    own, small = Pollux(throughput="known"), Pollux(throughput="known", initial_batch="model")
    state = Simulator(jobs, cluster, own, SimConfig()).run().state
    j = next(i for i in range(len(state.model)) if state.model[i] == "bert")
    for policy in (own, small):
        policy._state = state
        policy._speeds = state.speed_model()
        policy._noise[j] = 1e7
    assert small._initial(state, j, "bert") == 12 < state.batch_size[j]
    assert small._progress_factor(state, j, range(8)) == pytest.approx(
        own._progress_factor(state, j, range(8))
    )
    assert small.batches[j] == own.batches[j]
    small._noise[j] = own._noise[j] = 50.0  # little noise: small batches are efficient
    assert small._progress_factor(state, j, [0]) > own._progress_factor(state, j, [0])
    assert small.batches[j] < state.batch_size[j]
    with pytest.raises(Exception, match="initial_batch"):
        Pollux(initial_batch="tiny")


def _prepared(state, j: int, **options) -> Pollux:
    """A Pollux whose pass is prepared for job ``j`` alone on ``state``."""
    policy = Pollux(throughput="known", **options)
    policy.prepare(state, [j], state.speed_model())
    return policy


def test_a_running_job_moves_only_past_pollux_reallocation_penalty():
    """Pollux's penalty: at every size but the one it holds, a running job's
    speed-up is scaled by (T - R d) / (T + d); a job re-allocated as often as
    its age allows may not move at all (its other sizes cost as if it got
    nothing), and with ``restart_delay=0`` nothing is scaled."""
    jobs = load_trace("pollux-6", 32).head(8)
    state = Simulator(jobs, uniform(8, 4, gpu_type="T4"), Pollux(), SimConfig()).run().state
    j = 0
    state.held[j] = 2
    state.now = float(state.submit[j]) + 600.0
    sizes = np.arange(1, 9, dtype=np.float64)
    free = _prepared(state, j, restart_delay=0)
    penalised = _prepared(state, j)
    state.preemptions[j] = 3
    factor = (600.0 - 3 * 30.0) / (600.0 + 30.0)
    assert penalised._realloc_factor(state, j) == pytest.approx(factor)
    base, cost = free.costs(j, sizes), penalised.costs(j, sizes)
    held = sizes == 2
    assert cost[held] == pytest.approx(base[held])  # where it is: no penalty
    assert cost[~held] == pytest.approx(base[~held] / factor)  # p = -1: cost / factor
    state.preemptions[j] = 20  # moved 20 times in 600 s: may not move
    assert penalised._realloc_factor(state, j) == 0.0
    assert penalised.costs(j, sizes)[~held] == pytest.approx(1 / 1e-3)
    state.held[j] = 0  # a job not running is not being moved
    assert penalised._realloc_factor(state, j) == 1.0
    with pytest.raises(Exception, match="restart_delay"):
        Pollux(restart_delay=-1)


def test_speed_ups_are_measured_against_a_fair_share_of_the_cluster():
    """The paper's speed-up is over the goodput of a fair share (the cluster's
    GPUs over the jobs, rounded up); ``speedup_base=one`` measures it against
    one GPU instead. A job nothing is known about scales linearly: w / fair."""
    rows = [(0.0, 1, 3600.0), (0.0, 2, 7200.0), (100.0, 1, 600.0)]
    from tests.conftest import run

    state = run(rows, uniform(2, 4), "pollux").state  # 8 GPUs
    state.pending_order = [0, 1, 2]
    fair, one = _prepared(state, 0), _prepared(state, 0, speedup_base="one")
    assert fair._fair == 3 and one._fair == 1  # ceil(8 / 3)
    sizes = np.arange(1, 7, dtype=np.float64)
    assert fair.costs(0, sizes) == pytest.approx(3 / sizes)
    assert one.costs(0, sizes) == pytest.approx(1 / sizes)
    with pytest.raises(Exception, match="speedup_base"):
        Pollux(speedup_base="half")


def test_the_penalty_stops_jobs_flapping_between_sizes():
    """On Pollux's workload the penalty (the default) restarts jobs less
    often than a Pollux without it, and every job still finishes."""
    jobs = load_trace("pollux-6", 32).head(40)
    cluster = uniform(8, 4, gpu_type="T4")
    runs = {}
    for delay in (0.0, 30.0):
        policy = Pollux(restart_delay=delay)
        state = Simulator(jobs, cluster, policy, SimConfig(check_invariants=True)).run().state
        assert (state.status == DONE).all()
        runs[delay] = policy.counts["resizes"]
    assert runs[30.0] < runs[0.0], runs


def test_a_jobs_batch_and_speed_follow_its_noise_scale_between_reallocations():
    """A job's efficiency moves with its noise scale as it trains, so its
    batch and speed are re-tuned every minute (Pollux's agents) whatever the
    re-allocation interval. Frozen until the next re-allocation, a lone
    CIFAR-10 job kept the speed of its first minute (when small batches are
    worth most per example) and finished faster with a 10-minute interval
    than with a 1-minute one."""
    jobs = load_trace("pollux-6", 64)
    lone = jobs._replace(jobs.df[jobs.df.job_id == "cifar10-0"].reset_index(drop=True))
    lone.df["submit_time"] = 0.0
    jct = {}
    for interval in (60.0, 600.0):
        policy = Pollux(throughput="known", initial_batch="model", interval=interval)
        state = Simulator(lone, uniform(16, 4, gpu_type="T4"), policy, SimConfig()).run().state
        jct[interval] = float(state.finish_time[0] - state.submit[0])
        assert jct[interval] > 120 and policy.counts["retunes"] >= 2, (interval, policy.counts)
    assert jct[600.0] >= jct[60.0], jct


def _split_and_packed(state, j: int, noise: float) -> tuple[Pollux, list[int], list[int]]:
    """An oracle Pollux prepared for job ``j`` at this noise scale, with four
    GPUs on one node and four GPUs on four nodes of an 8x4 cluster; jobs
    start from their model's smallest batch (12 for BERT)."""
    policy = _prepared(state, j, initial_batch="model")
    policy._noise[j] = noise
    return policy, [0, 1, 2, 3], [0, 4, 8, 12]


def test_a_job_split_across_nodes_runs_at_its_layouts_goodput():
    """The batch is picked for the GPUs' actual layout, and the speed is the
    truth there: a BERT job split over four nodes synchronises over the
    network, so it accumulates gradients into a larger batch than on one
    node, and the engine's speed (its reference speed times the layout's
    locality times the policy's factor) is the communication model's goodput
    at that batch and layout (computed here from the step times directly)."""
    jobs = load_trace("pollux-6", 32).head(8)
    state = Simulator(jobs, uniform(8, 4, gpu_type="T4"), Pollux(), SimConfig()).run().state
    j = next(i for i in range(len(state.model)) if state.model[i] == "bert")
    policy, packed, split = _split_and_packed(state, j, 1000.0)
    f_packed = policy._progress_factor(state, j, packed)
    b_packed = policy.batches[j]
    f_split = policy._progress_factor(state, j, split)
    b_split = policy.batches[j]
    assert b_split > b_packed
    cluster, profile = state.cluster, model_profile("bert")
    assert profile is not None
    own = int(state.batch_size[j])
    locality = state.speed_model().locality.factor(cluster, split, "bert")
    assert locality < 1.0
    reference = goodput_model(profile, cluster.links, 4, own).throughput(int(state.gpus[j]), own)
    micro = int(np.ceil(b_split / 4 / 12 - 1e-9))
    local = b_split / 4 / micro
    span = Span.of(cluster, split)
    step = profile.step_time(span, cluster.links, local_batch=local)
    step += (micro - 1) * profile.compute_time(local)
    truth = b_split / step * efficiency(1000.0, own, b_split)
    assert f_split * locality == pytest.approx(truth / reference, rel=1e-9)
    assert f_split * locality < f_packed  # split, it is slower all the same


def test_pollux_may_start_a_job_on_fewer_gpus_of_fewer_nodes():
    """Where the free GPUs are scattered, Pollux starts a job where its
    goodput is best: early in training (a small noise scale: accumulating
    into large batches does not pay) BERT on three GPUs of one node rather
    than four GPUs of four nodes, later (a large one) on the four; the other
    resizing policies take the largest size that fits."""
    jobs = load_trace("pollux-6", 32).head(8)
    state = Simulator(jobs, uniform(8, 4, gpu_type="T4"), Pollux(), SimConfig()).run().state
    j = next(i for i in range(len(state.model)) if state.model[i] == "bert")
    policy, _, split = _split_and_packed(state, j, 200.0)
    options = [tuple(split), (0, 1, 2), (0, 1), (0,)]
    assert policy.pick_placement(state, j, options) == (0, 1, 2)
    policy._noise[j] = 1e5
    assert policy.pick_placement(state, j, options) == tuple(split)
    assert ResizingPolicy.pick_placement(policy, state, j, options) == tuple(split)


class _CheckingSpeeds(Pollux):
    """Pollux that, at every pass, checks each running job's engine speed
    against the communication model's goodput at its actual layout."""

    def __init__(self, **kw):
        super().__init__(throughput="known", **kw)
        self.checked: list[tuple[int, ...]] = []

    def schedule(self, state):
        for j in state.running.array().tolist():
            gpus = state.alloc[j]
            if not gpus or j not in self.batches or j not in self._noise:
                continue
            model, own, batch = state.model[j], int(state.batch_size[j]), self.batches[j]
            profile = model_profile(model)
            span = Span.of(state.cluster, gpus)
            micro, local = micro_batches(batch / len(gpus), largest_local_batch(model))
            step = profile.step_time(span, state.cluster.links, local_batch=local)
            step += (micro - 1) * profile.compute_time(local)
            noise = self._noise[j]
            gain = efficiency(noise, own, batch) if noise == noise else 1.0
            examples = batch / step * gain
            reference = goodput_model(profile, state.cluster.links, 4, own).throughput(
                int(state.gpus[j]), own
            )
            truth = float(state.ref_speed[j]) * examples / reference
            assert state.speed[j] == pytest.approx(truth, rel=1e-9), (j, span, batch)
            self.checked.append(span.per_node)
        return super().schedule(state)


def test_the_engine_runs_pollux_jobs_at_the_goodput_of_their_actual_layout():
    """Across a run, every running job's speed is its reference speed scaled
    by the communication model's goodput at its batch and actual layout
    (split gangs included) over its goodput as submitted."""
    jobs = load_trace("pollux-6", 32).head(30)
    policy = _CheckingSpeeds()
    result = Simulator(jobs, uniform(8, 4, gpu_type="T4"), policy, SimConfig()).run()
    assert (result.state.status == DONE).all()
    assert len(policy.checked) > 100
    assert any(len(p) > 1 and any(g < 4 for g in p[:-1]) for p in policy.checked)  # split


def test_pollux_keeps_gangs_that_span_nodes_off_each_others_nodes():
    """Interference avoidance (Pollux's rule): a gang spanning nodes is never
    placed on a node that holds another such gang, checked at every pass of a
    run; with ``avoid_interference`` off, such gangs do share nodes."""

    def shared_nodes(policy: Pollux) -> tuple[int, int]:
        """(passes with a node under two spanning gangs, spanning gangs seen)."""
        seen = {"shared": 0, "spanning": 0}
        inner = policy.schedule

        def checking(state):
            node_of = state.cluster.gpu_node
            owner: dict[int, int] = {}
            clash = False
            for j in state.running.array().tolist():
                nodes = {int(node_of[g]) for g in state.alloc[j] or ()}
                if len(nodes) > 1:
                    seen["spanning"] += 1
                    for n in nodes:
                        clash |= owner.setdefault(n, j) != j
            seen["shared"] += clash
            return inner(state)

        policy.schedule = checking  # type: ignore[method-assign]
        jobs = load_trace("pollux-6", 32).head(40)
        result = Simulator(jobs, uniform(8, 4, gpu_type="T4"), policy, SimConfig()).run()
        assert (result.state.status == DONE).all()
        return seen["shared"], seen["spanning"]

    shared, spanning = shared_nodes(Pollux(initial_batch="model"))
    assert spanning > 50 and shared == 0
    shared, _ = shared_nodes(Pollux(initial_batch="model", avoid_interference=False))
    assert shared > 0


class _Probed(Exception):
    """Ends a run once the probe below has looked at a pass."""


def test_a_job_to_grow_may_stay_where_it_is_and_one_to_shrink_may_not():
    """When a running job is resized, Pollux is offered its own GPUs among
    the placements if it is to grow (staying is no restart: the job is
    unstopped and keeps its GPUs), never if it is to shrink (it must give
    GPUs up for the others)."""
    offered: dict[str, list[tuple[int, ...]]] = {}

    class Probe(Pollux):
        def schedule(self, state):
            plan = super().schedule(state)
            running = [j for j in state.running.array().tolist() if j in self._started]
            big = [j for j in running if len(state.alloc[j]) >= 2 and j not in plan.stops]
            if not big:
                return plan
            j = big[0]
            held = tuple(state.alloc[j])
            offered["held"] = [held]
            speeds = state.speeds or state.speed_model()

            def stay(st, i, options, name):
                offered[name] = list(options)
                return held if held in options else options[0]

            grow = PlanBuilder(state)
            grow.stop(j)
            self.pick_placement = lambda st, i, o: stay(st, i, o, "grow")
            assert self._place(grow, state, j, len(held) + 1, speeds) == "kept"
            assert j not in grow.plan.stops and j not in grow.plan.starts
            assert not grow.free.mask[list(held)].any()  # still its own
            shrink = PlanBuilder(state)
            shrink.stop(j)
            self.pick_placement = lambda st, i, o: stay(st, i, o, "shrink")
            assert self._place(shrink, state, j, len(held) - 1, speeds) == "started"
            assert j in shrink.plan.stops and len(shrink.plan.starts[j]) == len(held) - 1
            raise _Probed

    jobs = load_trace("pollux-6", 32).head(24)
    with pytest.raises(_Probed):
        Simulator(jobs, uniform(8, 4, gpu_type="T4"), Probe(), SimConfig()).run()
    [held] = offered["held"]
    assert held in offered["grow"]
    assert held not in offered["shrink"] and offered["shrink"]
