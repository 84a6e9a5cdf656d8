"""The state's ordered views of the waiting jobs stay equal to the plain answer.

``pending_in_order`` is kept between calls and ``pending_by_size`` is kept
at every queue change, so policies can read a backlog without sorting it;
any sequence of arrivals, starts, preemptions, failures, finishes, holds and
resizes must leave both as a full re-computation would.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.model.state import PENDING, RUNNING, SchedulerState
from tests.conftest import jobs_table, uniform

JOBS = 6


def _expected(state: SchedulerState) -> tuple[list[int], dict[int, list[int]]]:
    pending = [i for i in range(JOBS) if state.status[i] == PENDING]
    by_size: dict[int, list[int]] = {}
    for i in pending:
        by_size.setdefault(int(state.gpus[i]), []).append(i)
    return pending, by_size


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 2, 4]), min_size=JOBS, max_size=JOBS),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["arrive", "arrive", "start", "preempt", "fail", "finish", "resize"])
            | st.just("read"),
            st.integers(0, JOBS - 1),
            st.sampled_from([1, 2, 4]),
        ),
        min_size=10,
        max_size=60,
    ),
)
def test_ordered_waiting_views_match_a_recomputation(
    sizes: list[int], ops: list[tuple[str, int, int]]
) -> None:
    state = SchedulerState(uniform(64, 4), jobs_table([(0.0, g, 100.0) for g in sizes]))
    state.gpus = state.gpus.copy()  # a trace's columns are read-only; live ones are not
    arrived = 0
    for op, k, size in ops:
        waiting = [i for i in range(JOBS) if state.status[i] == PENDING]
        running = [i for i in range(JOBS) if state.status[i] == RUNNING]
        if op == "arrive" and arrived < JOBS:  # arrivals come in submit order
            state.arrive(arrived)
            arrived += 1
        elif op in ("start", "resize") and waiting:
            i = waiting[k % len(waiting)]
            if op == "start":
                state.start(i, tuple(state.free.fullest_first(int(state.gpus[i]))), 1.0, 0.0)
            else:
                state.resize(i, size)
        elif op in ("preempt", "fail", "finish") and running:
            i = running[k % len(running)]
            if op == "preempt":
                state.preempt(i)
            elif op == "fail":
                state.fail(i, final=False)
            else:
                state.finish(i)
        pending, by_size = _expected(state)
        if op == "read":  # now and then, so that changes pile up between reads
            assert state.pending_in_order().tolist() == pending
        assert {g: q for g, q in state.pending_by_size.items() if q} == by_size
        assert state.pending_order == pending
    assert state.pending_in_order().tolist() == _expected(state)[0]
