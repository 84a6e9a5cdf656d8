"""Jobs that restart from scratch when preempted still end, under every policy with
a quantum, and are started a bounded number of times (see corral.model.unsaved_work)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.model.jobs import JobTable
from corral.model.plan import Plan
from corral.model.state import SchedulerState
from corral.model.unsaved_work import GROWTH, keep_unsaved_work
from corral.policies import make_policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig
from tests.conftest import uniform

QUANTUM_POLICIES = [
    "las",
    "tiresias-las",
    "tiresias-gittins",
    "themis",
    "gandiva",
    "gavel-max-min-fairness",
    "optimus",
    "pollux",
]
TIME_OPTION = {  # each policy's own time scale (quantum, lease, round, interval)
    "las": "quantum",
    "gandiva": "quantum",
    "themis": "lease",
    "gavel-max-min-fairness": "round",
    "optimus": "interval",
    "pollux": "interval",
}


def scratch_jobs(lengths: list[float], gpus: list[int]) -> JobTable:
    return JobTable(
        pd.DataFrame(
            {
                "job_id": [f"j{k}" for k in range(len(lengths))],
                "submit_time": [0.0] * len(lengths),
                "num_gpus": gpus,
                "duration": lengths,
                "checkpoints": [False] * len(lengths),
            }
        )
    )


def starts_bound(length: float, first_run: float) -> int:
    """Runs of at least q, 2q, 4q, ... (each at least twice the longest lost one)."""
    return 2 + math.ceil(math.log2(max(length / first_run, 1.0))) + 1


def test_eight_six_second_jobs_on_four_gpus_under_las_all_end() -> None:
    """The live livelock, in the simulator: 8 x 6 s jobs that lose their work, 4 GPUs,
    LAS with a 3 s quantum. Without the rule every run is cut at 3 s for ever."""
    jobs = scratch_jobs([6.0] * 8, [1] * 8)
    config = SimConfig(check_invariants=True, switch_cost=0.0, max_time=3600.0)
    result = Simulator(jobs, uniform(1, 4), make_policy("las", quantum=3.0), config).run()
    s = result.state
    assert np.isfinite(s.finish_time).all()
    assert (s.finish_time - s.submit >= 6.0).all()
    assert int(s.preemptions.max()) <= 2


def test_jobs_that_checkpoint_are_untouched() -> None:
    """The rule never acts on a job that saves its work (the papers' assumption)."""
    table = scratch_jobs([6.0] * 8, [1] * 8)
    table.df["checkpoints"] = True
    config = SimConfig(switch_cost=0.0)
    result = Simulator(table, uniform(1, 4), make_policy("las", quantum=3.0), config).run()
    s = result.state
    # LAS takes turns every 3 s as it always did: each job cut once, no work lost
    assert s.preemptions.tolist() == [1] * 8
    assert float(np.nanmax(s.finish_time)) == pytest.approx(12.0)


@pytest.mark.parametrize("name", QUANTUM_POLICIES)
@settings(max_examples=15, deadline=None)
@given(
    quantum=st.sampled_from([1.0, 3.0, 10.0]),
    lengths=st.lists(st.sampled_from([2.0, 6.0, 15.0, 40.0, 200.0]), min_size=2, max_size=12),
    data=st.data(),
)
def test_every_job_ends_and_starts_a_bounded_number_of_times(
    name: str, quantum: float, lengths: list[float], data: st.DataObject
) -> None:
    gpus = data.draw(
        st.lists(st.sampled_from([1, 2]), min_size=len(lengths), max_size=len(lengths))
    )
    options: dict[str, object] = {}
    if name in TIME_OPTION:
        options = {TIME_OPTION[name]: quantum}
    if name.startswith("tiresias"):
        options = {"thresholds": f"{quantum * 2:g},{quantum * 8:g}"}
    config = SimConfig(check_invariants=True, switch_cost=0.0, max_time=1e6)
    policy = make_policy(name, **options)
    result = Simulator(scratch_jobs(lengths, gpus), uniform(1, 4), policy, config).run()
    s = result.state
    assert np.isfinite(s.finish_time).all(), "a job never ended"
    first_run = min(quantum, min(lengths))
    for k, length in enumerate(lengths):
        starts = int(s.preemptions[k]) + 1
        assert starts <= starts_bound(length, first_run) + 1, (name, k, length, starts)
        # (elastic policies may run it faster than on its own gang)
        assert s.finish_time[k] - s.submit[k] >= length / s.max_speedup[k] - 1e-6


def test_the_filter_keeps_a_protected_jobs_gpus_and_asks_for_a_pass() -> None:
    table = scratch_jobs([100.0, 100.0], [1, 1])
    state = SchedulerState(uniform(1, 1), table)
    state.arrive(0)
    state.arrive(1)
    state.start(0, (0,), 1.0, 0.0)
    state.now = 5.0
    state.preempt(0)  # 5 s thrown away
    assert state.lost_run[0] == 5.0
    state.start(0, (0,), 1.0, 0.0)
    state.now = 8.0
    plan = keep_unsaved_work(Plan(starts={1: (0,)}, stops=[0], next_wakeup=9.0), state)
    assert plan.stops == [] and plan.starts == {}
    assert plan.next_wakeup == 9.0
    plan = keep_unsaved_work(Plan(starts={1: (0,)}, stops=[0]), state)
    assert plan.next_wakeup == 5.0 + GROWTH * 5.0
    state.now = 15.0
    plan = keep_unsaved_work(Plan(starts={1: (0,)}, stops=[0]), state)
    assert plan.stops == [0] and plan.starts == {1: (0,)}


def test_a_job_that_saved_as_it_stopped_keeps_its_progress_and_is_not_held() -> None:
    """Live, a job's checkpointing is learned: a process that leaves a preemption with
    the exit code of a checkpointed stop saved its work after all, so the state
    gives its progress back and the rule no longer holds it."""
    table = scratch_jobs([100.0, 100.0], [1, 1])
    state = SchedulerState(uniform(1, 1), table)
    state.arrive(0)
    state.arrive(1)
    state.start(0, (0,), 1.0, 0.0)
    state.now = 2.0
    state.preempt(0)  # 2 s thought thrown away ...
    state.start(1, (0,), 1.0, 0.0)
    assert state.lost_run[0] == 2.0 and state.steps_done[0] == 0.0
    state.saved_on_stop(0)  # ... but the job saved them as it left
    assert state.checkpoints[0] and state.lost_run[0] == 0.0 and state.steps_done[0] == 2.0
    state.preempt(1)
    state.start(0, (0,), 1.0, 0.0)
    state.now = 3.0
    plan = keep_unsaved_work(Plan(starts={1: (0,)}, stops=[0]), state)
    assert plan.stops == [0]  # not held: a preemption no longer loses its work
    state.saved_on_stop(0)  # a second report changes nothing
    assert state.steps_done[0] == 2.0
