"""Tiresias: each mechanism on a scenario whose answer is worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import CorralError, InputError
from corral.estimate.gittins import (
    GittinsTable,
    OnlineGittins,
    SteppedGittinsTable,
    load_distribution,
    round_half_away,
    round_half_away_array,
)
from corral.model.free_gpus import FreeGPUs
from corral.model.state import SchedulerState
from corral.placement.sensitivity import ModelAware
from corral.policies import make_policy
from corral.policies.tiresias import TiresiasGittins
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig
from corral.sim.run import RunSpec

from ..conftest import finish_times, jobs_table, run, uniform


def test_gittins_index_matches_hand_computation() -> None:
    table = GittinsTable([100, 200, 1000], delta=150)
    # a=0: one of three finishes within 150 (the 100); E[min(S, 150)] = (100 + 150 + 150) / 3
    # a=100: survivors 200, 1000; one finishes within 150; E = (100 + 150) / 2
    # a=1000: nothing is left to learn about: index 0
    got = table.index(np.array([0.0, 100.0, 1000.0, 5000.0]))
    assert got == pytest.approx([1 / 400, 1 / 250, 0.0, 0.0])


def test_rounding_is_python_2s_halves_away_from_zero() -> None:
    assert round_half_away(0.125, 2) == 0.13  # an exact binary half: Python 3 gives 0.12
    assert round(0.125, 2) == 0.12
    assert round_half_away(2.675, 2) == 2.67  # stored just below the half
    assert round_half_away(-0.5, 0) == -1.0


@given(
    st.lists(
        st.one_of(
            st.floats(0, 1e6, allow_nan=False),
            st.integers(0, 10**9).map(lambda k: k / 2**12),  # exact binary halves, many
        ),
        min_size=1,
        max_size=50,
    ),
    st.integers(0, 6),
)
def test_vectorised_rounding_equals_the_exact_rule(values: list[float], digits: int) -> None:
    got = round_half_away_array(np.array(values), digits)
    assert got.tolist() == [round_half_away(v, digits) for v in values]


def test_stepped_table_follows_the_simulators_arithmetic() -> None:
    # sizes 100, 200, 1000 and delta 140. Entry k is computed at a = size_k - 1
    # with the survivors' whole sizes in E, E an integer division, P rounded to
    # 5 decimals and P / E x 10^6 to 4:
    #   a=99:  3 left, 2 within 239 (100, 200): P = 0.66667,
    #          E = (100 + 200 + 140) // 3 = 146 (not 146.67): 4566.2329
    #   a=199: 2 left, 1 within 339 (200): P = 0.5, E = (200 + 140) // 2 = 170
    #   a=999: 1 left; a + delta reaches the largest, where the simulator counts
    #          the largest as not finishing: P = 0, index 0
    table = SteppedGittinsTable([200, 1000, 100], delta=140)
    assert table.entries.tolist() == [4566.2329, 2941.1765, 0.0, 0.0]
    # a job's index is the entry of the first size above its whole GPU-seconds
    got = table.index(np.array([0.0, 99.9, 100.0, 150.5, 199.9, 999.9, 1000.0]))
    assert got.tolist() == [4566.2329, 4566.2329, 2941.1765, 2941.1765, 2941.1765, 0.0, 0.0]


def test_stepped_bundled_table_has_python_2s_entries() -> None:
    # the two entries of yarn-gput1000 where Python 2's rounding and Python 3's
    # differ (Tiresias' simulator printed under each: 18.6735 / 18.6711 and
    # 2.4128 / 2.4112)
    table = load_distribution("yarn-gput1000", stepped=True)
    assert isinstance(table, SteppedGittinsTable)
    at = {int(v): e for v, e in zip(table.sizes, table.entries, strict=False)}
    assert at[14159] == 18.6735 and at[209852] == 2.4128


def test_bundled_distribution_loads_and_bad_file_names_line(tmp_path) -> None:
    table = load_distribution("yarn-gput1000")
    assert len(table) == 1001 and table.sizes[0] == 121
    bad = tmp_path / "sizes.csv"
    bad.write_text("duration\n10\nlots\n")
    with pytest.raises(InputError, match=r"sizes.csv:3: field 'duration'"):
        load_distribution(str(bad))
    with pytest.raises(CorralError, match="no such file"):
        load_distribution(str(tmp_path / "missing.csv"))


def test_online_distribution_waits_for_samples_then_rebuilds_on_growth() -> None:
    online = OnlineGittins(delta=10, min_samples=3, regrow=0.5)
    online.add(np.array([5.0, 50.0]))
    assert online.table() is None
    online.add(np.array([500.0]))
    first = online.table()
    assert first is not None and len(first) == 3
    online.add(np.array([7.0]))  # 4 < 3 * 1.5: same table
    assert online.table() is first
    online.add(np.array([8.0]))
    assert len(online.table()) == 5  # type: ignore[arg-type]


def test_demotion_at_threshold_lets_newcomer_preempt() -> None:
    # One GPU, two queues split at 100 GPU-s. A runs alone; B arrives at 50 and
    # waits (same queue, A is ahead). At 100 A crosses the threshold, drops to
    # queue 1, and B (queue 0) preempts it: B 100-130, A 130-1030.
    result = run(
        [(0, 1, 1000), (50, 1, 30)],
        uniform(1, 1),
        "tiresias-las",
        queues=2,
        thresholds="100",
    )
    done = finish_times(result)
    assert done == {"j0": pytest.approx(1030), "j1": pytest.approx(130)}
    assert result.state.preemptions.tolist() == [1, 0]


def test_threshold_counts_gpu_seconds_not_seconds() -> None:
    # A 2-GPU job reaches 100 GPU-s after 50 s, so B preempts it at 50, not 100.
    result = run(
        [(0, 2, 1000), (10, 2, 30)],
        uniform(1, 2),
        "tiresias-las",
        queues=2,
        thresholds="100",
    )
    assert finish_times(result)["j1"] == pytest.approx(80)


def test_promote_knob_returns_starved_job_to_top_queue() -> None:
    # One GPU, threshold 100. A (1000 s) is demoted at 100. B (100-190), C
    # (190-280) are short newcomers. With knob 1, A has waited 100 s = 1 x its
    # 100 s of run time at t=200 and is promoted into queue 0 (entry 200), so
    # at 280 it runs before D (entry 250) until it is demoted again at 380:
    # D runs 380-470. Without the knob D runs at 280 and ends at 370.
    rows = [(0, 1, 1000), (100, 1, 90), (150, 1, 90), (250, 1, 90)]
    kw = {"queues": 2, "thresholds": "100"}
    plain = run(rows, uniform(1, 1), "tiresias-las", **kw)
    knob = run(rows, uniform(1, 1), "tiresias-las", promote_knob=1.0, **kw)
    assert finish_times(plain)["j3"] == pytest.approx(370)
    assert finish_times(knob)["j3"] == pytest.approx(470)
    assert finish_times(knob)["j0"] == pytest.approx(1270)
    assert knob.policy.promotions[0] == 1  # type: ignore[attr-defined]
    assert plain.policy.promotions[0] == 0  # type: ignore[attr-defined]


def test_gittins_orders_by_index_within_a_queue(tmp_path) -> None:
    # Sizes {50, 1000, 1000}, delta 60: G(0) = 1/170, G(40) = 1/130, G(60) = 0.
    # At 40 A (40 GPU-s in) outranks newcomer B; at 60 A's index falls to 0 and
    # newcomer C's arrival re-ranks: B (first of the equal newcomers) runs
    # 60-560, C 560-1060, A last, 1060-1500. FIFO LAS would run A first to 500.
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("duration\n50\n1000\n1000\n")
    rows = [(0, 1, 500), (40, 1, 500), (60, 1, 500)]
    gittins = run(
        rows, uniform(1, 1), "tiresias-gittins", queues=1, distribution=str(sizes), delta=60
    )
    assert finish_times(gittins) == {
        "j0": pytest.approx(1500),
        "j1": pytest.approx(560),
        "j2": pytest.approx(1060),
    }
    las = run(rows, uniform(1, 1), "tiresias-las", queues=1)
    assert finish_times(las) == {
        "j0": pytest.approx(500),
        "j1": pytest.approx(1000),
        "j2": pytest.approx(1500),
    }
    lifo = run(
        rows,
        uniform(1, 1),
        "tiresias-gittins",
        queues=1,
        distribution=str(sizes),
        delta=60,
        ties="lifo",
    )
    assert finish_times(lifo)["j2"] == pytest.approx(560)  # the later newcomer first


def test_a_job_that_does_not_fit_is_skipped_for_smaller_ones() -> None:
    # 2 GPUs; A (1 GPU) runs; B needs 2 and cannot start; C (1 GPU) behind it runs.
    result = run([(0, 1, 100), (1, 2, 100), (2, 1, 50)], uniform(1, 2), "tiresias-las")
    assert result.state.first_start[2] == pytest.approx(2)
    assert result.state.first_start[1] == pytest.approx(100)


def test_model_aware_placement_consolidates_only_skewed_models() -> None:
    cluster = uniform(3, 4)
    state = SchedulerState(
        cluster, jobs_table([(0, 3, 10, "vgg16"), (0, 3, 10, "resnet50"), (0, 3, 10, "mystery")])
    )
    free = FreeGPUs(cluster)
    free.take([0, 1, 4, 5])  # nodes 0 and 1 have 2 free; node 2 has 4
    placement = ModelAware()
    assert placement.choose_for(free, state, 0) == [8, 9, 10]  # one node
    assert placement.choose_for(free, state, 1) == [2, 3, 6]  # lowest free ids
    assert placement.choose_for(free, state, 2) == [8, 9, 10]  # unknown: consolidate
    relaxed = ModelAware(unknown="any")
    assert relaxed.choose_for(free, state, 2) == [2, 3, 6]
    policy = make_policy("tiresias-las", unknown_models="any")
    assert policy.placement.choose_for(free, state, 2) == [2, 3, 6]
    with pytest.raises(CorralError, match="'unknown_models' must be one of consolidate, any"):
        make_policy("tiresias-gittins", unknown_models="sometimes")


def test_tiresias_sim_preset_sets_its_simulator_assumptions() -> None:
    spec = RunSpec("tiresias-gittins", preset="tiresias-sim")
    config = spec.config()
    assert spec.placement == "count"
    assert config.switch_cost == 0.0
    assert config.speeds.locality.cross_node == config.speeds.locality.cross_rack == 1.0
    assert not config.speeds.locality.measured
    assert spec.policy_options["distribution"] == "yarn-gput1000"
    # its table, and its sort key (rank, -submit) reversed: earliest first on ties
    assert spec.policy_options["index_table"] == "stepped"
    assert spec.policy_options["ties"] == "fifo"
    user = RunSpec("tiresias-las", preset="tiresias-sim", policy_options={"queues": 4})
    assert user.policy_options["queues"] == 4
    with pytest.raises(CorralError, match="unknown preset"):
        RunSpec("fifo", preset="nope")


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(CorralError, match="thresholds must be positive and increasing"):
        make_policy("tiresias-las", thresholds="7200,3250")
    with pytest.raises(CorralError, match="4 queues need 3 thresholds"):
        make_policy("tiresias-las", queues=4, thresholds="100,200")
    with pytest.raises(CorralError, match="no such file"):
        make_policy("tiresias-gittins", distribution="/nonexistent.csv")


def test_list_order_puts_a_demoted_running_job_behind_those_waiting_in_its_queue() -> None:
    # One GPU, two queues split at 1000 GPU-s. A runs from 0; B arrives at 10
    # and waits behind it. At 1000 A drops to queue 1 and B preempts it. At
    # 2000 B drops to queue 1 too. Tiresias' simulator appends B to the end of
    # queue 1, behind the waiting A, so A runs again (2000-6000) and B waits
    # (6000-10000). corral's default keeps the running B ahead of waiting jobs
    # of its queue: B runs on (1000-6000), then A (6000-10000).
    rows = [(0, 1, 5000), (10, 1, 5000)]
    opts = {"queues": 2, "thresholds": "1000"}
    peer = finish_times(run(rows, uniform(1, 1), "tiresias-las", queue_order="list", **opts))
    assert peer == pytest.approx({"j0": 6000.0, "j1": 10000.0})
    own = finish_times(run(rows, uniform(1, 1), "tiresias-las", **opts))
    assert own == pytest.approx({"j0": 10000.0, "j1": 6000.0})


def test_run_time_wakeup_notices_a_gang_demotion_late() -> None:
    # A 4-GPU job crosses 1000 GPU-s after 250 s. Computing the crossing from
    # run time (the peer's quirk), the simulator wakes at (1000 - 0) // 4 = 250 s
    # too, but after a first event at 100 s it wakes at 100 + (1000 - 100) // 4
    # = 325 s: the newcomer waiting in queue 0 gets the
    # GPUs 75 s late. Exact wake-ups give them to it at 250 s.
    rows = [(0, 4, 5000), (100, 4, 50)]
    opts = {"queues": 2, "thresholds": "1000"}
    exact = run(rows, uniform(1, 4), "tiresias-las", **opts)
    late = run(rows, uniform(1, 4), "tiresias-las", demotion_wakeup="run-time", **opts)
    assert exact.state.first_start[1] == pytest.approx(250.0)
    assert late.state.first_start[1] == pytest.approx(325.0)


def test_preset_gittins_runs_equal_indices_earliest_submitted_first(tmp_path) -> None:
    # One GPU, one queue, the simulator's stepped table over sizes 100, 200,
    # 1000. A (0-30) runs alone; B (at 10) and C (at 20) wait with no service,
    # so the same index: C runs after B, as the simulator's (rank, -submit)
    # sort reversed puts the earlier submission first.
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("duration\n100\n200\n1000\n")
    opts = {
        "queues": 1,
        "distribution": str(sizes),
        "delta": 140,
        "index_table": "stepped",
        "queue_order": "list",
        "ties": "fifo",
    }
    rows = [(0, 1, 30), (10, 1, 40), (20, 1, 40)]
    done = finish_times(run(rows, uniform(1, 1), "tiresias-gittins", **opts))
    assert done == pytest.approx({"j0": 30.0, "j1": 70.0, "j2": 110.0})
    with pytest.raises(CorralError, match="'index_table' must be one of exact, stepped"):
        make_policy("tiresias-gittins", index_table="rounded")


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4000), st.sampled_from([1, 1, 2, 4]), st.integers(10, 20_000)),
        min_size=15,
        max_size=60,
    )
)
def test_gittins_one_key_pass_ranks_as_the_per_group_keys(rows: list[tuple[int, int, int]]) -> None:
    """The pass that ranks every candidate by one array (one index lookup for
    the jobs whose service moved) schedules exactly as the general path that
    keys running and waiting jobs separately."""
    rows = sorted(rows)
    fast = run(rows, uniform(2, 4), "tiresias-gittins", queues=2, thresholds="3600")
    general = make_policy("tiresias-gittins", queues=2, thresholds="3600")
    assert isinstance(general, TiresiasGittins)
    general._within_key_of_all = lambda *args: None  # type: ignore[method-assign]
    slow = Simulator(
        jobs_table(rows), uniform(2, 4), general, SimConfig(switch_cost=0.0, check_invariants=True)
    ).run()
    assert finish_times(fast) == finish_times(slow)
    assert fast.state.preemptions.tolist() == slow.state.preemptions.tolist()
    assert fast.passes == slow.passes


@pytest.mark.parametrize("order", ["entry", "strict"])
def test_strict_entry_order_lets_a_waiting_job_take_its_gpus_from_a_later_one(order):
    # j1 (4 GPUs) waits behind j0; j2 (2 GPUs) arrives after j1 and starts beside
    # j0. When j0 ends, entry order keeps the running j2 ahead of the waiting j1;
    # strict order (Pollux's artifact) walks j1 first, and j2 gives its GPUs up.
    rows = [(0.0, 2, 10.0), (1.0, 4, 10.0), (2.0, 2, 100.0)]
    result = run(rows, uniform(1, 4), "tiresias-las", queue_order=order)
    done = finish_times(result)
    if order == "entry":
        assert done == {"j0": 10.0, "j1": 112.0, "j2": 102.0}
        assert result.state.preemptions.tolist() == [0, 0, 0]
    else:
        assert done == {"j0": 10.0, "j1": 20.0, "j2": 112.0}
        assert result.state.preemptions.tolist() == [0, 0, 1]
