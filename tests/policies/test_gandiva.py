"""Gandiva: time-slicing, packing and unpacking, migration, grow-shrink."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from corral.errors import CorralError
from corral.model.cluster_specs import load_cluster
from corral.model.jobs import JobTable
from corral.perf.switching import migration_seconds
from corral.policies import make_policy
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig, SimResult
from corral.traces import load_trace

from ..conftest import finish_times, uniform

GOOD_HOST, GOOD_GUEST = "ResNet-50 (batch size 32)", "ResNet-18 (batch size 16)"
"""Measured together on a V100: 0.899 and 0.804 of their speeds alone (sum 1.70)."""
BAD_HOST, BAD_GUEST = "ResNet-18 (batch size 256)", "CycleGAN"
"""Measured together: 0.344 and 0.207 (sum 0.55): packing them loses throughput."""


def typed_run(rows, cluster, switch_cost=0.0, **options) -> SimResult:  # type: ignore[no-untyped-def]
    """Rows of (submit, gpus, duration, job_type)."""
    df = pd.DataFrame(
        {
            "job_id": [f"j{k}" for k in range(len(rows))],
            "submit_time": [r[0] for r in rows],
            "num_gpus": [r[1] for r in rows],
            "duration": [r[2] for r in rows],
            "job_type": [r[3] for r in rows],
        }
    )
    policy = make_policy("gandiva", **options)
    config = SimConfig(switch_cost=switch_cost, check_invariants=True)
    return Simulator(JobTable(df), cluster, policy, config).run()


SHARE = 60 / 60.1
"""Of a GPU set's time, what is left for work with 60 s quanta and 0.1 s switches."""


def test_any_number_of_jobs_share_a_gpu_set_each_at_its_share() -> None:
    # The default (timeslice=share): one GPU, three 150 s jobs. All three take
    # turns on it, each at 1/3 of 60 / 60.1: they end together at 450.75 s.
    result = typed_run([(0, 1, 150, "generic")] * 3, uniform(1, 1), grow=0, migration=0)
    assert finish_times(result) == {f"j{k}": pytest.approx(3 * 150 / SHARE) for k in range(3)}
    assert result.policy.counts["slices"] == 2  # type: ignore[attr-defined]
    assert result.state.preemptions.sum() == 0


def test_when_a_job_of_a_shared_set_ends_the_others_take_its_time() -> None:
    # One GPU: A (300 s), B (150 s), C (60 s) at once. Three share it (each at
    # SHARE / 3) until C ends; then two (SHARE / 2) until B ends; A runs on alone
    # at full speed (no more switches).
    result = typed_run(
        [(0, 1, 300, "generic"), (0, 1, 150, "generic"), (0, 1, 60, "generic")],
        uniform(1, 1),
        grow=0,
        migration=0,
    )
    c_end = 60 * 3 / SHARE
    b_end = c_end + 90 * 2 / SHARE
    assert finish_times(result) == {
        "j2": pytest.approx(c_end),
        "j1": pytest.approx(b_end),
        "j0": pytest.approx(b_end + 150),
    }


def test_a_waiting_job_joins_the_least_loaded_gpu_set_of_its_size() -> None:
    # Two GPUs, four 100 s jobs at once: two run alone; the third joins the
    # longest running (of equal ones, the first), the fourth the other set,
    # which has fewer jobs: two pairs, all ending at 200 / SHARE. (Three on one
    # set would end the last at 300 / SHARE.)
    result = typed_run([(0, 1, 100, "generic")] * 4, uniform(1, 2), grow=0, migration=0)
    assert finish_times(result) == {f"j{k}": pytest.approx(200 / SHARE) for k in range(4)}
    assert result.state.max_speedup.max() == pytest.approx(1.0)


def test_gpus_falling_idle_take_a_job_off_a_shared_set_by_migration() -> None:
    # Two GPUs: A (1000 s) and B (50 s) run; C (1000 s) shares A's GPU. When B
    # ends at 50 its GPU is idle while A's is shared: C, the set's newest job,
    # migrates there (paying the migration) and runs alone; A alone again.
    result = typed_run(
        [(0, 1, 1000, "generic"), (0, 1, 50, "generic"), (0, 1, 1000, "generic")],
        uniform(1, 2),
        grow=0,
    )
    done_by_50 = 50 * SHARE / 2
    assert finish_times(result) == {
        "j1": pytest.approx(50),
        "j0": pytest.approx(50 + 1000 - done_by_50),
        "j2": pytest.approx(50 + migration_seconds(1) + 1000 - done_by_50),
    }
    assert result.policy.counts["rebalances"] == 1  # type: ignore[attr-defined]
    assert result.state.preemptions.sum() == 1  # the move: a stop and a start elsewhere
    # without migration C stays on A's GPU and B's GPU stays idle
    stays = typed_run(
        [(0, 1, 1000, "generic"), (0, 1, 50, "generic"), (0, 1, 1000, "generic")],
        uniform(1, 2),
        grow=0,
        migration=0,
    )
    assert stays.policy.counts["rebalances"] == 0  # type: ignore[attr-defined]
    assert finish_times(stays)["j2"] > finish_times(result)["j2"] + 500


def test_a_set_two_jobs_heavier_than_another_of_its_size_gives_it_a_job() -> None:
    # Two GPUs, 5 s quanta. A and B run alone; C and D join (one each), then E
    # and F. C and E are short: once both have ended A's set holds A alone and
    # B's holds B, D and F. At that pass (a quantum after the last balance) F,
    # B's set's newest job, migrates to A's set; without migration it stays.
    rows = [
        (0, 1, 1000, "generic"),
        (0, 1, 1000, "generic"),
        (1, 1, 10, "generic"),
        (1, 1, 1000, "generic"),
        (2, 1, 10, "generic"),
        (2, 1, 1000, "generic"),
    ]
    moved = typed_run(rows, uniform(1, 2), grow=0, quantum=5)
    stays = typed_run(rows, uniform(1, 2), grow=0, quantum=5, migration=0)
    assert moved.policy.counts["rebalances"] == 1  # type: ignore[attr-defined]
    assert stays.policy.counts["rebalances"] == 0  # type: ignore[attr-defined]
    assert moved.state.preemptions.sum() == 1
    done, before = finish_times(moved), finish_times(stays)
    assert done["j5"] < before["j5"] - 100
    assert max(done.values()) < max(before.values())


def test_share_limit_caps_the_jobs_of_a_set_and_two_is_the_rate_rule() -> None:
    # share_limit=2 on one GPU: the third job waits, as under timeslice=rate.
    rows = [(0, 1, 150, "generic")] * 3
    capped = typed_run(rows, uniform(1, 1), grow=0, migration=0, share_limit=2)
    rate = typed_run(rows, uniform(1, 1), grow=0, migration=0, timeslice="rate")
    assert finish_times(capped) == pytest.approx(finish_times(rate))
    with pytest.raises(CorralError, match="share_limit"):
        make_policy("gandiva", share_limit=-1)


def test_oversubscribed_gpu_is_time_sliced_between_two_jobs() -> None:
    # timeslice=rate: one GPU, three 150 s jobs. A starts; B time-slices with A
    # (60 s quanta, 0.1 s suspend/resume): each runs at 0.5 x 60 / 60.1. C waits:
    # at most two jobs share a GPU. A and B end together at 150 / r; C then runs
    # alone.
    result = typed_run(
        [(0, 1, 150, "generic")] * 3, uniform(1, 1), grow=0, migration=0, timeslice="rate"
    )
    rate = 0.5 * 60 / 60.1
    assert finish_times(result) == {
        "j0": pytest.approx(150 / rate),
        "j1": pytest.approx(150 / rate),
        "j2": pytest.approx(150 / rate + 150),
    }
    assert result.policy.counts["slices"] == 1  # type: ignore[attr-defined]
    assert result.state.preemptions.sum() == 0
    # against explicit turns (A 0-60, B -120, A -180, B -240, A -270, B -300)
    # the shared-rate model is exact to within one quantum
    assert abs(150 / rate - 300) < 60 and abs(150 / rate - 270) < 60


def test_explicit_quanta_rotate_jobs_in_turn() -> None:
    # timeslice=quanta, one GPU, three 150 s jobs, no switch cost: 60 s turns
    # in arrival order, then whoever waited longest: A 0-60, B -120, C -180,
    # A -240, B -300, C -360, A -390 (done), B -420, C -450.
    result = typed_run(
        [(0, 1, 150, "generic")] * 3, uniform(1, 1), timeslice="quanta", grow=0, migration=0
    )
    assert finish_times(result) == {
        "j0": pytest.approx(390),
        "j1": pytest.approx(420),
        "j2": pytest.approx(450),
    }
    assert result.state.preemptions.tolist() == [2, 2, 2]
    # two jobs: explicit turns end A at 270 and B at 300; the shared rate
    # (no overhead) ends both at 300, within one quantum
    pair = [(0, 1, 150, "generic")] * 2
    turns = finish_times(typed_run(pair, uniform(1, 1), timeslice="quanta", grow=0))
    rate = finish_times(typed_run(pair, uniform(1, 1), slice_overhead=0.0, grow=0))
    assert turns == {"j0": pytest.approx(270), "j1": pytest.approx(300)}
    assert rate == {"j0": pytest.approx(300), "j1": pytest.approx(300)}


def test_explicit_turns_are_quanta_of_progress_not_of_switching() -> None:
    # A switch cost as long as the quantum used to fill every turn after the
    # first ones with switching alone: two 61 s jobs never finished. A turn
    # now lasts a quantum of progress: A 0-60, B 60-120 (first starts are
    # free), A switches in 120-180 and ends at 181, B switches in 181-241 and
    # ends at 242.
    pair = [(0, 1, 61, "generic")] * 2
    result = typed_run(
        pair, uniform(1, 1), switch_cost=60.0, timeslice="quanta", grow=0, migration=0
    )
    assert finish_times(result) == {"j0": pytest.approx(181), "j1": pytest.approx(242)}
    assert result.state.preemptions.tolist() == [1, 1]


def test_time_slice_starts_late_arrival_at_once_and_speeds_up_when_alone() -> None:
    # A (300 s) runs alone for 100 s, B (50 s) arrives and slices with it at
    # rate r: B ends at 100 + 50 / r; A did 100 + 50 by then, then runs alone.
    rate = 0.5 * 60 / 60.1
    result = typed_run([(0, 1, 300, "generic"), (100, 1, 50, "generic")], uniform(1, 1), grow=0)
    b_end = 100 + 50 / rate
    assert finish_times(result)["j1"] == pytest.approx(b_end)
    assert finish_times(result)["j0"] == pytest.approx(b_end + (300 - 100 - 50))


def test_no_time_slicing_without_oversubscription() -> None:
    result = typed_run([(0, 1, 150, "generic")] * 2, uniform(1, 2), grow=0)
    assert result.state.preemptions.sum() == 0


def test_packs_a_pair_that_gains_and_keeps_it() -> None:
    # A runs alone; B arrives at 10 on the busy GPU and is packed onto it:
    # B at 0.804 -> 402 s of work ends at 10 + 500; A at 0.899 meanwhile
    # (10 + 449.5 steps by 510), then alone: 540.5 more -> 1050.5.
    result = typed_run([(0, 1, 1000, GOOD_HOST), (10, 1, 402, GOOD_GUEST)], uniform(1, 1), grow=0)
    done = finish_times(result)
    assert done["j1"] == pytest.approx(510, rel=1e-3)
    assert done["j0"] == pytest.approx(1050.5, rel=1e-3)
    assert result.policy.counts["packs"] == 1  # type: ignore[attr-defined]
    assert result.policy.counts["unpacks"] == 0  # type: ignore[attr-defined]
    assert result.state.preemptions.sum() == 0


def test_probed_pair_that_loses_is_unpacked_and_not_tried_again() -> None:
    # Packed at 10, measured at the 120 s quantum boundary (a full quantum
    # later), found to lose (0.55 < 1): the pair is unpacked to time-slicing
    # (each at r = 0.5 x 60 / 60.1 from then on), and the pair of types is
    # remembered as bad: a later guest of the same type is not packed.
    rows = [(0, 1, 1000, BAD_HOST), (10, 1, 300, BAD_GUEST), (130, 1, 300, BAD_GUEST)]
    result = typed_run(rows, uniform(1, 1), grow=0, timeslice="rate")  # (the third waits)
    policy = result.policy
    tried = {(h, g) for _, h, g in policy.pack_log}  # type: ignore[attr-defined]
    assert policy.pack_log[0] == (10, BAD_HOST, BAD_GUEST)  # type: ignore[attr-defined]
    assert len([e for e in policy.pack_log if {e[1], e[2]} == {BAD_HOST, BAD_GUEST}]) == 1  # type: ignore[attr-defined]
    assert sum(1 for h, g in tried if {h, g} == {BAD_HOST, BAD_GUEST}) == 1
    assert policy.counts["unpacks"] == 1  # type: ignore[attr-defined]
    assert (BAD_HOST, BAD_GUEST) in policy.bad_pairs  # type: ignore[attr-defined]
    rate = 0.5 * 60 / 60.1
    guest_work_at_120 = 110 * 0.20685436280865577
    guest_end = 120 + (300 - guest_work_at_120) / rate
    assert finish_times(result)["j1"] == pytest.approx(guest_end, rel=1e-6)
    # without probing, the measured table says no: time-sliced from the start
    quiet = typed_run(rows, uniform(1, 1), grow=0, probe=0, timeslice="rate")
    assert quiet.policy.counts["packs"] == 0  # type: ignore[attr-defined]
    assert quiet.policy.counts["slices"] >= 1  # type: ignore[attr-defined]


def test_unknown_job_types_are_never_packed_only_sliced() -> None:
    result = typed_run([(0, 1, 100, "generic"), (1, 1, 100, "generic")], uniform(1, 1), grow=0)
    assert result.policy.counts["packs"] == 0  # type: ignore[attr-defined]
    assert result.policy.counts["slices"] == 1  # type: ignore[attr-defined]


def test_migrates_small_jobs_to_give_a_gang_one_server() -> None:
    # Two 4-GPU servers. j0..j3 (1 GPU) fill server 0; j4 (2 GPUs) goes to
    # server 1. j0 and j1 end at 10, leaving 2 + 2 free GPUs on two servers.
    # j5 (4 GPUs) arrives at 20: rather than spread it, Gandiva moves small
    # jobs so that one server is free for it.
    rows = [(0, 1, 10, "generic")] * 2 + [(0, 1, 5000, "generic")] * 2
    rows += [(0, 2, 5000, "generic"), (20, 4, 100, "generic")]
    result = typed_run(rows, uniform(2, 4), grow=0, packing=0)
    s = result.state
    assert s.first_start[5] == pytest.approx(20)
    assert result.policy.counts["migrations"] >= 1  # type: ignore[attr-defined]
    moved = [k for k in (2, 3, 4) if s.preemptions[k] > 0]
    assert moved
    assert all(s.overhead[k] == pytest.approx(migration_seconds(int(s.gpus[k]))) for k in moved)
    # j5 finished after exactly its run time: it got one server (no locality slowdown)
    assert s.finish_time[5] == pytest.approx(120)
    spread = typed_run(rows, uniform(2, 4), grow=0, packing=0, migration=0)
    assert spread.state.finish_time[5] > 120  # spread over two servers: slower


def test_grows_into_idle_gpus_and_shrinks_when_others_arrive() -> None:
    # j0 (2 GPUs) alone on a 4-GPU server grows to 4 after its first quantum
    # (speed x1.8, paying a 2-GPU migration), and shrinks back when j1 arrives
    # at 200: 60 steps, then 1.8 x (200 - 60 - m) steps, then 1 per second
    # until j1 ends at 300, when it grows again (another migration).
    m = migration_seconds(2)
    result = typed_run([(0, 2, 1000, "generic"), (200, 2, 100, "generic")], uniform(1, 4))
    s = result.state
    assert result.policy.counts["grows"] == 2  # type: ignore[attr-defined]
    assert result.policy.counts["shrinks"] == 1  # type: ignore[attr-defined]
    assert s.first_start[1] == pytest.approx(200)
    assert s.finish_time[1] == pytest.approx(300)
    done_by_300 = 60 + 1.8 * (200 - 60 - m) + 100
    assert s.finish_time[0] == pytest.approx(300 + m + (1000 - done_by_300) / 1.8, rel=1e-6)
    assert s.max_speedup[0] == pytest.approx(1.8)


def test_bad_options() -> None:
    from corral.errors import CorralError

    with pytest.raises(CorralError, match="quantum"):
        make_policy("gandiva", quantum=0)


def test_every_job_of_a_shared_set_runs_at_its_share_at_every_pass() -> None:
    """Under load (joins, departures, migrations onto idle GPUs and between sets,
    probes and packs all happening), at the start of every pass each time-sliced
    set's jobs run at exactly their share of its time: the engine's rescaling on
    a departure and the plans' new speeds agree."""
    from corral.model.cluster_specs import load_cluster
    from corral.policies.gandiva import Gandiva
    from corral.traces import TraceOptions, load_trace

    seen = {"sets": 0}

    class Checked(Gandiva):
        def schedule(self, state):  # type: ignore[no-untyped-def]
            for host, guests in state.guests.items():
                if any(g in self.mode for g in guests):
                    continue  # a packed pair runs at its measured factors
                n = 1 + len(guests)
                for j in (host, *guests):
                    want = state.base_speed[j] * self.share_factor(n)
                    assert state.speed[j] == pytest.approx(want, rel=1e-9), (state.now, j, n)
                seen["sets"] += 1
            return super().schedule(state)

    cluster = load_cluster("philly", scale=0.03)
    jobs = load_trace("philly", cluster.total_gpus, TraceOptions(max_jobs=600, job_types="gavel"))
    config = SimConfig(switch_cost=0.1, check_invariants=True)
    policy = Checked(quantum=60.0)
    result = Simulator(jobs, cluster, policy, config).run()
    assert seen["sets"] > 1000  # sets were checked, many times
    assert policy.counts["rebalances"] > 0 and policy.counts["slices"] > 0
    assert (result.state.status == 4).all() or result.end_time > 0


@pytest.mark.parametrize("timeslice", ["share", "rate"])
def test_a_job_never_shares_a_gpu_set_of_a_type_it_cannot_run_on(timeslice: str) -> None:
    """Gavel's own 300-job trace at its higher load on 8:8:8: ResNet-50 at batch 128
    does not fit a K80 (measured speed 0), and a waiting one joined a K80 set to
    take turns there (the plan was refused, the run ended). It now joins a set of a
    type it runs on, or waits; sets are evened out within one GPU type."""
    trace = Path(__file__).parents[2] / "benchmarks/data/peers/gavel_300_m_l600.trace"
    cluster = load_cluster("gavel:8:8:8")
    jobs = load_trace(str(trace), cluster.total_gpus)
    config = SimConfig(check_invariants=True)
    policy = make_policy("gandiva", timeslice=timeslice)
    result = Simulator(jobs, cluster, policy, config).run()
    state = result.state
    assert (state.finish_time == state.finish_time).all()  # every job ended
    assert policy.counts["slices"] > 0  # (the runs share GPU sets)
