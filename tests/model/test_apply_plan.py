"""One walk over a plan for both engines (corral.model.apply_plan): the checks of
each stop and start, the order (stops, then starts), the directives an engine
must support, and the same refusal in the simulator (the run stops) and in the
live loop (the job waits, the reason recorded)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pandas as pd
import pytest

from corral.model.apply_plan import apply_plan
from corral.model.cluster import Cluster, Node, assign_racks
from corral.model.jobs import JobTable
from corral.model.plan import Directive, Plan, PlanError
from corral.model.state import PENDING, SchedulerState
from corral.policies import make_policy
from corral.runtime.loop.scheduler import LIVE_DIRECTIVES
from corral.sim.engine import SIM_DIRECTIVES, Simulator
from corral.sim.result import SimConfig
from tests.runtime.virtual_loop import virtual_loop


class Recorder:
    """A target that records what the walk hands it, in order."""

    def __init__(self, directives: frozenset[Directive] = frozenset(Directive)) -> None:
        self.directives = {d: "recorded" for d in directives}
        self.calls: list[tuple[str, int, object]] = []

    def about(self, i: int, what: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def refuse(self, i: int, what: str, why: str) -> None:
        self.calls.append(("refuse " + what, i, why))

    def stop(self, i: int) -> None:
        self.calls.append(("stop", i, None))

    def start(self, i: int, gpus: tuple[int, ...], host: int) -> None:
        self.calls.append(("start", i, (gpus, host)))


def two_kinds() -> Cluster:
    """Two nodes of 2 V100s (GPUs 0-3) and one of 2 K80s (GPUs 4-5)."""
    nodes = [Node("v0", "V100", 2), Node("v1", "V100", 2), Node("k0", "K80", 2)]
    return Cluster("two-kinds", assign_racks(nodes, 16), rack_size=16)


def state_of(gpus: list[int], cluster: Cluster) -> SchedulerState:
    jobs = JobTable(
        pd.DataFrame(
            {
                "job_id": [f"j{k}" for k in range(len(gpus))],
                "submit_time": [0.0] * len(gpus),
                "num_gpus": gpus,
                "duration": [100.0] * len(gpus),
            }
        )
    )
    state = SchedulerState(cluster, jobs)
    for i in range(len(gpus)):
        state.arrive(i)
    return state


def test_each_stop_and_start_is_checked_once_against_the_state() -> None:
    cluster = two_kinds()
    state = state_of([1, 1, 1, 2, 1, 1], cluster)
    state.start(0, (0,), 1.0, 0.0)  # j0 runs on GPU 0
    v100 = cluster.gpu_type_names.index("V100")
    state.type_req[2] = v100  # j2 must run on V100s
    state.nodes_req[3] = 2  # j3's two GPUs on two nodes
    plan = Plan(
        stops=[1],  # waiting, not running
        starts={
            0: (1,),  # running already
            1: (1, 2),  # two GPUs for a one-GPU job
            2: (4,),  # a K80 for a V100 job
            3: (2, 3),  # one node for a two-node job
            4: (5,),  # (a packed guest onto j5, which is not running)
            5: (3,),
        },
        packs={4: (5, 0.5, 0.5)},
    )
    target = Recorder()
    apply_plan(plan, state, cluster, target, "test engine")
    assert target.calls == [
        ("refuse stop", 1, "it is not running"),
        ("refuse start", 0, "it is not waiting"),
        ("refuse start", 1, "it was given 2 GPUs and asks for 1"),
        ("refuse start", 2, "it needs V100 GPUs"),
        ("refuse start", 3, "it needs 2 nodes"),
        ("refuse start", 4, "it is packed onto job j5, which does not run there"),
        ("start", 5, ((3,), -1)),
    ]


def test_stops_come_before_starts_and_a_resizing_or_elastic_policy_may_give_more() -> None:
    cluster = two_kinds()
    state = state_of([1, 2, 1], cluster)
    state.start(0, (0,), 1.0, 0.0)
    plan = Plan(stops=[0], starts={1: (0, 1, 2, 3), 2: (4,)})  # (twice its 2 GPUs)
    elastic = Recorder()
    apply_plan(plan, state, cluster, elastic, "test engine", elastic=True)
    assert [c[0] for c in elastic.calls] == ["stop", "start", "start"]
    odd = Plan(starts={1: (0, 1, 2)})
    refused = Recorder()
    apply_plan(odd, state, cluster, refused, "test engine", elastic=True)
    assert refused.calls == [("refuse start", 1, "it was given 3 GPUs and asks for 2")]
    resized = Recorder()
    apply_plan(odd, state, cluster, resized, "test engine", resizes=True)
    assert [c[0] for c in resized.calls] == ["start"]


def test_a_plan_with_a_directive_its_engine_does_not_support_is_refused_whole() -> None:
    cluster = two_kinds()
    state = state_of([1, 1], cluster)
    plan = Plan(starts={0: (0,)}, prestage=[1])
    target = Recorder(frozenset(Directive) - {Directive.PRESTAGE})
    with pytest.raises(PlanError, match="uses prestage, which the test engine does not support"):
        apply_plan(plan, state, cluster, target, "test engine")
    assert target.calls == []  # nothing carried out
    assert plan.directives() == {Directive.PRESTAGE}


def test_both_engines_say_what_they_do_with_every_directive() -> None:
    assert set(SIM_DIRECTIVES) == set(Directive) == set(LIVE_DIRECTIVES)
    assert all(SIM_DIRECTIVES.values()) and all(LIVE_DIRECTIVES.values())


def test_drop_start_takes_every_directive_about_that_start_with_it() -> None:
    plan = Plan(
        starts={1: (0,), 2: (1,)},
        packs={1: (0, 0.5, 0.5)},
        factors={1: 2.0},
        low_priority={1: 0.5},
        overheads={1: 3.0},
        timeslices={1: 60.0},
        batch_sizes={1: 64},
    )
    plan.drop_start(1)
    assert plan.starts == {2: (1,)} and plan.directives() == {Directive.BATCH_SIZES}


class OverGiving:
    """A policy that gives its first waiting job twice the GPUs it asks for."""

    def __init__(self, policy: object) -> None:
        self.inner = policy

    def __call__(self, state: SchedulerState) -> Plan:
        waiting = [i for i in range(len(state.status)) if state.status[i] == PENDING]
        if not waiting:
            return Plan()
        i = waiting[0]
        return Plan(starts={i: tuple(range(2 * int(state.gpus[i])))})


def test_both_engines_refuse_the_same_start_the_simulator_stops_the_live_loop_waits(
    tmp_path: Path,
) -> None:
    """A start with the wrong number of GPUs: the simulator's run stops on it, and
    the live loop (which carried it out before, on twice the GPUs the job asked
    for) leaves the job waiting with the same reason recorded."""
    cluster = two_kinds()
    jobs = state_of([1], cluster).jobs
    policy = make_policy("fifo")
    policy.schedule = OverGiving(policy)  # type: ignore[method-assign]
    with pytest.raises(PlanError, match="plan starts job j0, but it was given 2 GPUs"):
        Simulator(jobs, cluster, policy, SimConfig()).run()

    loop = virtual_loop(tmp_path, "fifo", v100s=2)
    try:
        scheduler = loop.scheduler
        scheduler.policy.schedule = OverGiving(scheduler.policy)  # type: ignore[method-assign]
        job = loop.queue(command=["sleep", "5"], gpus=1)
        loop.run(3)
        assert loop.row(job).status == "PENDING" and loop.attempts(job) == []
        why = loop.event_detail(job, "start_skipped")
        assert why is not None and "it was given 2 GPUs and asks for 1" in str(why)
        assert scheduler.errors == 0 and scheduler.faults == 0
    finally:
        loop.close()


def test_the_layout_page_lists_what_each_engine_does_with_each_directive() -> None:
    page = (Path(__file__).parents[2] / "docs" / "layout.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| ")}
    for directive in Directive:
        assert directive.value in rows, f"docs/layout.md has no row for {directive.value}"
