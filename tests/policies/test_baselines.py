"""FIFO, SJF, SRTF and LAS on small scenarios worked out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.errors import CorralError
from corral.policies import POLICIES, make_policy
from corral.policies.base import greedy_fit
from tests.conftest import finish_times, run, uniform

# 4 GPUs. j0 takes 3 for 100 s; j1 wants 2 (cannot fit beside j0); j2 wants 1.
BLOCKING = [(0.0, 3, 100.0), (1.0, 2, 10.0), (2.0, 1, 10.0)]


def test_fifo_blocks_behind_the_head_of_the_queue():
    done = finish_times(run(BLOCKING, uniform(1, 4), "fifo"))
    # j2 would fit at t=2 but must wait behind j1 (strict order)
    assert done == {"j0": 100.0, "j1": 110.0, "j2": 110.0}


def test_sjf_skips_jobs_that_do_not_fit():
    done = finish_times(run(BLOCKING, uniform(1, 4), "sjf"))
    assert done == {"j0": 100.0, "j1": 110.0, "j2": 12.0}


def test_sjf_orders_waiting_jobs_by_duration():
    rows = [(0.0, 1, 50.0), (1.0, 1, 30.0), (2.0, 1, 10.0)]
    done = finish_times(run(rows, uniform(1, 1), "sjf"))
    assert done == {"j0": 50.0, "j2": 60.0, "j1": 90.0}


def test_srtf_preempts_for_a_shorter_job():
    rows = [(0.0, 1, 100.0), (10.0, 1, 20.0)]
    result = run(rows, uniform(1, 1), "srtf")
    assert finish_times(result) == {"j0": 120.0, "j1": 30.0}
    assert result.state.preemptions.tolist() == [1, 0]


def test_srtf_does_not_preempt_a_job_with_less_left():
    rows = [(0.0, 1, 100.0), (90.0, 1, 20.0)]  # j0 has 10 s left when j1 comes
    result = run(rows, uniform(1, 1), "srtf")
    assert finish_times(result) == {"j0": 100.0, "j1": 120.0}
    assert result.state.preemptions.sum() == 0


def test_srtf_by_gpu_time_puts_a_wide_job_behind_a_narrow_one_of_the_same_length():
    # 2 GPUs. j0 (2 GPUs, 100 s) and j1 (1 GPU, 150 s) both wait at time 0: by time
    # j0 goes first; by GPU-time (200 against 150) j1 does, and j0 waits for it.
    rows = [(0.0, 2, 100.0), (0.0, 1, 150.0)]
    assert finish_times(run(rows, uniform(1, 2), "srtf")) == {"j0": 100.0, "j1": 250.0}
    by_gpu = run(rows, uniform(1, 2), "srtf", by="gpu-time")
    assert finish_times(by_gpu) == {"j0": 250.0, "j1": 150.0}
    with pytest.raises(CorralError, match="option 'by' must be one of time, gpu-time"):
        make_policy("sjf", by="gpus")


def test_las_time_shares_by_attained_service_with_a_quantum():
    # 1 GPU, quantum 50. j1 arrives at 10 while j0 is pinned; at the tick t=50
    # j0 (attained 50) yields to j1 (0); at t=100 they tie at 50 and the
    # earlier job wins; at t=150 j0 (100) yields to j1 (50), which ends at 200.
    result = run([(0.0, 1, 1000.0), (10.0, 1, 100.0)], uniform(1, 1), "las", quantum=50.0)
    assert finish_times(result) == {"j0": 1100.0, "j1": 200.0}
    assert result.state.preemptions.tolist() == [2, 1]


def test_las_minimum_run_is_a_quantum_of_progress_not_of_switching():
    # Quantum 10 s, switch cost 30 s: counted from the start, the quantum ended
    # inside the switch-in, so the two jobs took the GPU from each other with no
    # progress and the run never ended. Now a restarted job runs 30 + 10 s:
    # j0 0-10 and j1 10-20 (first starts are free), then turns of 40 s from 20,
    # each giving 10 s of progress: j0 needs 9 of them (ends 60 + 8 x 80 = 700),
    # j1 9 as well (ends 100 + 8 x 80 = 740).
    result = run(
        [(0.0, 1, 100.0), (1.0, 1, 100.0)], uniform(1, 1), "las", switch_cost=30.0, quantum=10.0
    )
    assert finish_times(result) == {"j0": 700.0, "j1": 740.0}
    assert result.state.preemptions.tolist() == [9, 9]
    assert result.state.overhead.tolist() == [270.0, 270.0]


def test_las_attained_service_is_gpus_times_time():
    # j0 (2 GPUs) and j1 (1 GPU) both ran 100 s: 2D service is 200 and 100
    from corral.model.state import SchedulerState
    from tests.conftest import jobs_table

    state = SchedulerState(uniform(1, 4), jobs_table([(0.0, 2, 500.0), (0.0, 1, 500.0)]))
    for i in (0, 1):
        state.arrive(i)
    state.start(0, (0, 1), 1.0, 0.0)
    state.start(1, (2,), 1.0, 0.0)
    state.now = 100.0
    import numpy as np

    assert state.attained(np.array([0, 1])).tolist() == [200.0, 100.0]


def test_greedy_fit_skips_what_does_not_fit():
    import numpy as np

    take = greedy_fit(np.array([2, 3, 1, 2, 1]), 4)
    assert take.tolist() == [True, False, True, False, True]
    assert greedy_fit(np.array([5]), 4).tolist() == [False]
    assert greedy_fit(np.array([1, 1]), 0).tolist() == [False, False]


@given(
    st.lists(st.integers(min_value=1, max_value=16), max_size=40),
    st.integers(min_value=0, max_value=64),
)
def test_greedy_fit_is_the_plain_walk(sizes: list[int], capacity: int) -> None:
    import numpy as np

    left, expected = capacity, []
    for g in sizes:  # the definition: in order, take each job that still fits
        expected.append(g <= left)
        left -= g if g <= left else 0
    assert greedy_fit(np.array(sizes, dtype=np.int64), capacity).tolist() == expected


def test_every_policy_has_a_description_and_oracles_are_marked():
    for name, cls in POLICIES.items():
        assert cls.description, name
    assert {n for n, c in POLICIES.items() if c.oracle} == {"sjf", "srtf"}
    assert make_policy("srtf").label == "srtf (oracle)"


def test_the_registry_names_each_policy_by_its_own_name_and_loads_it_on_demand():
    import subprocess
    import sys

    for name, cls in POLICIES.items():
        assert cls.name == (name if name != "gavel" else "gavel-max-min-fairness")
    # a run imports the policy it asks for, not every policy module
    code = (
        "import sys; from corral.policies import make_policy; make_policy('las'); "
        "print(sorted(m for m in sys.modules if m.startswith('corral.policies.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout
    assert "corral.policies.las" in loaded
    assert "corral.policies.gavel" not in loaded and "corral.policies.hived" not in loaded


def test_unknown_policy_and_bad_option_are_user_errors():
    with pytest.raises(CorralError, match="unknown policy"):
        make_policy("nope")
    with pytest.raises(CorralError, match="quantum"):
        make_policy("las", quantum=-1)
    with pytest.raises(CorralError, match="no option"):
        make_policy("fifo", quantum=3)
