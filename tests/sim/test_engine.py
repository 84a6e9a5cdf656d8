"""The engine on scenarios whose right answer is worked out by hand."""

from __future__ import annotations

import pytest

from corral.model.jobs import JobTable
from corral.model.plan import Plan, upcoming
from corral.model.state import SchedulerState
from corral.placement.strategies import PlacementStrategy
from corral.policies import make_policy
from corral.policies.base import Policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig
from tests.conftest import finish_times, jobs_table, run, uniform


def test_single_job_runs_for_its_duration():
    # the clock starts at the first submission: j1 arrives at 10
    result = run([(0.0, 1, 5.0), (10.0, 2, 100.0)], uniform(1, 4), "fifo")
    assert finish_times(result) == {"j0": 5.0, "j1": 110.0}
    assert result.state.first_start[1] == 10.0


def test_cross_node_gang_is_slowed_by_the_locality_factor():
    # 8 GPUs on 4-GPU nodes spans two nodes in one rack: speed 0.8 by default
    result = run([(0.0, 8, 80.0)], uniform(2, 4), "fifo")
    assert finish_times(result)["j0"] == pytest.approx(100.0)


def test_cross_rack_gang_uses_the_rack_factor():
    result = run([(0.0, 8, 70.0)], uniform(2, 4, rack_size=1), "fifo")
    assert finish_times(result)["j0"] == pytest.approx(100.0)


def test_same_instant_events_are_one_pass():
    # a job finishing at t=100 frees its GPUs for a job arriving at t=100
    result = run([(0.0, 4, 100.0), (100.0, 4, 50.0)], uniform(1, 4), "fifo")
    assert finish_times(result) == {"j0": 100.0, "j1": 150.0}
    assert result.state.first_start[1] == 100.0


def test_switch_cost_is_charged_on_restart():
    # SRTF: long job j0 preempted at t=10 by the short j1 (5 s), resumes at 15
    # and pays 7 s of switching before making progress again.
    result = run([(0.0, 1, 100.0), (10.0, 1, 5.0)], uniform(1, 1), "srtf", switch_cost=7.0)
    done = finish_times(result)
    assert done["j1"] == pytest.approx(15.0)
    assert done["j0"] == pytest.approx(15.0 + 7.0 + 90.0)
    assert result.state.preemptions.tolist() == [1, 0]
    assert result.state.overhead.tolist() == [7.0, 0.0]


def test_jobs_wider_than_the_cluster_are_rejected_not_hung():
    result = run([(0.0, 16, 10.0), (1.0, 1, 10.0)], uniform(1, 4), "fifo")
    assert result.rejected == [0]
    assert finish_times(result)["j1"] == 11.0


class _DoubleBooker(Policy):
    name = "double-booker"

    def schedule(self, state: SchedulerState) -> Plan:
        return Plan(starts={int(i): (0,) for i in state.pending})


class _StaleWakeup(Policy):
    """FIFO that asks on every pass to be woken at once (``now + x`` with ``x``
    tiny beside ``now`` rounds to ``now``)."""

    name = "stale-wakeup"

    def __init__(self, placement: PlacementStrategy | None = None) -> None:
        super().__init__(placement)  # (the live loop passes one)
        self.passes: list[float] = []

    def schedule(self, state: SchedulerState) -> Plan:
        self.passes.append(state.now)
        starts = {int(i): (int(i),) for i in state.pending}  # job i on GPU i
        return Plan(starts=starts, next_wakeup=state.now + 1e-17 * (state.now > 1))


class _WakesOnce(Policy):
    """Asks, on its first pass only, to be woken at 50; FIFO otherwise."""

    name = "wakes-once"

    def __init__(self) -> None:
        super().__init__()
        self.passes: list[float] = []

    def schedule(self, state: SchedulerState) -> Plan:
        self.passes.append(state.now)
        starts = {int(i): (int(i),) for i in state.pending}  # job i on GPU i
        return Plan(starts=starts, next_wakeup=50.0 if len(self.passes) == 1 else None)


def test_a_wakeup_lapses_when_the_next_pass_asks_for_none():
    # the second pass (an arrival at 10) asks for no wake-up: 50 is not an
    # instant the policy still cares about, so the next pass is at the first
    # finish (110), as in the live service
    policy = _WakesOnce()
    Simulator(jobs_table([(0.0, 1, 110.0), (10.0, 1, 300.0)]), uniform(1, 2), policy).run()
    assert policy.passes == [0.0, 10.0, 110.0, 310.0]


def test_a_plan_that_gives_a_gpu_twice_is_refused():
    jobs = jobs_table([(0.0, 1, 10.0), (0.0, 1, 10.0)])
    with pytest.raises(RuntimeError, match="already in use"):
        Simulator(jobs, uniform(1, 2), _DoubleBooker()).run()


def test_a_wakeup_at_now_means_the_next_event():
    # neither an error nor a second pass at the same instant: passes come at the
    # arrivals and the finishes only
    policy = _StaleWakeup()
    result = Simulator(jobs_table([(0.0, 1, 10.0), (5.0, 1, 20.0)]), uniform(1, 2), policy).run()
    assert finish_times(result) == {"j0": 10.0, "j1": 25.0}
    assert policy.passes == [0.0, 5.0, 10.0, 25.0]


def test_upcoming_keeps_only_a_future_wakeup():
    assert upcoming(None, 5.0) is None
    assert upcoming(5.0, 5.0) is None and upcoming(4.0, 5.0) is None
    assert upcoming(5.5, 5.0) == 5.5


def test_same_seed_gives_identical_jobs_csv(tmp_path):
    from corral.sim.output import write_run
    from corral.traces import load_trace

    cluster = uniform(4, 4)
    jobs = load_trace("synthetic:jobs=300,load=1.2", cluster.total_gpus)
    outputs = []
    for k in range(2):
        policy = make_policy("las", placement="random", seed=3, quantum=120.0)
        result = Simulator(jobs, cluster, policy, SimConfig()).run()
        write_run(result, tmp_path / str(k))
        outputs.append((tmp_path / str(k) / "jobs.csv").read_bytes())
    assert outputs[0] == outputs[1]
    other = Simulator(
        jobs, cluster, make_policy("las", placement="random", seed=4, quantum=120.0)
    ).run()
    write_run(other, tmp_path / "other")
    assert (tmp_path / "other" / "jobs.csv").read_bytes() != outputs[0]


def test_max_time_stops_early():
    jobs: JobTable = jobs_table([(0.0, 1, 100.0), (500.0, 1, 100.0)])
    result = Simulator(jobs, uniform(1, 1), make_policy("fifo"), SimConfig(max_time=200.0)).run()
    assert result.state.status.tolist()[1] == 0  # never arrived


def _on_a_grid(rows: list[tuple[float, int, float]], policy: str, **config: object):
    cfg = SimConfig(check_invariants=True, **config)  # type: ignore[arg-type]
    return Simulator(jobs_table(rows), uniform(1, 1), make_policy(policy), cfg).run()


def test_on_a_grid_arrivals_and_freed_gpus_wait_for_the_next_tick():
    # passes every 60 s: j0 arrives at 0 (a tick) and runs 70 s, to 70; j1 arrives
    # at 10 and waits for the GPU; freed at 70, it is handed on at the tick of 120
    result = _on_a_grid([(0.0, 1, 70.0), (10.0, 1, 5.0)], "fifo", decide_every=60.0)
    assert finish_times(result) == {"j0": 70.0, "j1": 125.0}
    assert result.state.first_start.tolist() == [0.0, 120.0]
    # at events instead, j1 starts the instant the GPU is free
    assert finish_times(_on_a_grid([(0.0, 1, 70.0), (10.0, 1, 5.0)], "fifo")) == {
        "j0": 70.0,
        "j1": 75.0,
    }


def test_on_a_grid_an_arrival_between_ticks_starts_at_the_next():
    result = _on_a_grid([(0.0, 1, 1.0), (61.0, 1, 1.0)], "fifo", decide_every=60.0)
    assert result.state.first_start.tolist() == [0.0, 120.0]
    assert finish_times(result)["j1"] == 121.0


def test_on_a_grid_a_policys_wakeup_is_rounded_up_to_a_tick():
    # LAS with a 10-s quantum asks to be woken at 10; on a 25-s grid the pass is at
    # 25: j0 (arrived at 0) runs until then, and j1 (arrived at 1) takes over
    result = Simulator(
        jobs_table([(0.0, 1, 100.0), (1.0, 1, 100.0)]),
        uniform(1, 1),
        make_policy("las", quantum=10.0),
        SimConfig(check_invariants=True, decide_every=25.0),
    ).run()
    assert result.state.first_start.tolist() == [0.0, 25.0]
    assert all(t % 25.0 == 0.0 for t in result.timeline.time)


def test_the_first_start_is_charged_only_when_asked():
    plain = _on_a_grid([(0.0, 1, 10.0)], "fifo", switch_cost=30.0)
    assert finish_times(plain) == {"j0": 10.0}
    charged = _on_a_grid([(0.0, 1, 10.0)], "fifo", switch_cost=30.0, charge_first_start=True)
    assert finish_times(charged) == {"j0": 40.0}
    assert charged.state.overhead.tolist() == [30.0]


def test_a_grid_must_be_a_finite_number_of_seconds():
    with pytest.raises(Exception, match="decide_every"):
        SimConfig(decide_every=float("inf"))
    with pytest.raises(Exception, match="decide_every"):
        SimConfig(decide_every=-1.0)
