"""Admission, the extension point before the queue: a rule may admit, delay or refuse
an arriving job, the same way in the simulator and in the live loop (virtual
time). The example rule (``examples/policies/queue_cap.py``) runs in ``compare``
and live; a rule's mistakes are said plainly in the simulator and contained live."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import Experiment
from corral.errors import CorralError
from corral.model.cluster_specs import load_cluster
from corral.policies.admission import ADMIT, Admission, delay, make_admission, reject
from corral.policies.fifo import Fifo
from corral.sim.engine import PlanError, Simulator
from corral.sim.result import SimConfig
from corral.traces import load_trace
from tests.runtime.virtual_loop import virtual_loop

EXAMPLE = Path(__file__).parents[2] / "examples" / "policies" / "queue_cap.py"
CAP = f"{EXAMPLE}:QueueCap"
WORKLOAD = {"trace": "synthetic:jobs=200,load=1.0", "cluster": "uniform:3x4:V100"}


def _quiet(kind: str, text: str) -> None:
    pass


def test_the_example_rule_refuses_big_gangs_and_holds_arrivals_while_the_queue_is_full(
    tmp_path: Path,
) -> None:
    results = Experiment(
        **WORKLOAD,
        policies="fifo,las",
        admission=f"{CAP}[waiting=3,max_gpus=4,recheck=30]",
        check=True,  # the simulator's invariants after every pass
        runner="serial",
    ).run(tmp_path / "out", say=_quiet)
    assert results.ok, results.failures
    jobs = load_trace(WORKLOAD["trace"], load_cluster(WORKLOAD["cluster"]).total_gpus)
    big = int((jobs.df["num_gpus"] > 4).sum())
    assert big > 0
    for summary in results.summaries:
        assert summary["jobs_rejected"] == big
        assert summary["jobs_finished"] == 200 - big
    # under FIFO (no preemption puts a job back) the queue never holds more than 3
    timeline = results.timelines
    assert timeline[timeline["policy"] == "fifo"]["pending"].max() <= 3
    free = Experiment(**WORKLOAD, policies="fifo", runner="serial").run(say=_quiet)
    assert free.timelines["pending"].max() > 3  # (without the rule it does)
    record = results.provenance
    assert record["admission_source"]["file"] == "queue_cap.py"
    assert record["options"]["admission"].endswith("QueueCap[waiting=3,max_gpus=4,recheck=30]")


class EveryOther(Fifo):
    """A policy with admission of its own: odd-numbered arrivals are refused."""

    name = "every-other"

    def admit(self, state, i):  # type: ignore[no-untyped-def]
        return reject("odd") if i % 2 else ADMIT


def test_a_policy_may_admit_by_itself() -> None:
    cluster = load_cluster("uniform:2x4:V100")
    jobs = load_trace("synthetic:jobs=40,load=1.0", cluster.total_gpus)
    jobs = jobs.head(40)
    big = set(np.flatnonzero(jobs.df["num_gpus"].to_numpy() > cluster.total_gpus))
    result = Simulator(jobs, cluster, EveryOther(), SimConfig(check_invariants=True)).run()
    assert set(result.rejected) == {i for i in range(40) if i % 2} | big


class Late(Admission):
    def admit(self, state, i):  # type: ignore[no-untyped-def]
        return delay("never later", state.now)


def test_a_delay_that_names_no_later_time_is_a_clear_error() -> None:
    cluster = load_cluster("uniform:1x4:V100")
    jobs = load_trace("synthetic:jobs=5,load=1.0", cluster.total_gpus)
    policy = Fifo()
    policy.admission = Late()
    with pytest.raises(PlanError, match="a delay names a later time"):
        Simulator(jobs, cluster, policy).run()


def test_mistakes_in_naming_a_rule_are_said_before_anything_runs(tmp_path: Path) -> None:
    for text, words in (
        (f"{CAP}[nope=1]", "unexpected keyword argument 'nope'"),
        (f"{CAP}[waiting]", "expected key=value"),
        (f"{tmp_path}/missing.py:Rule", "no file"),
        ("queue-cap", "name a class of your own"),
        (f"{EXAMPLE}:ADMIT", "no Admission subclass named ADMIT"),
    ):
        with pytest.raises(CorralError, match=None) as caught:
            make_admission(text)
        assert words in str(caught.value), caught.value
    with pytest.raises(CorralError, match="takes no --admission"):
        Experiment(**WORKLOAD, policies="hare", admission=CAP, runner="serial").run(
            tmp_path / "x", say=_quiet
        )
    assert not (tmp_path / "x").exists()


class Random(Admission):
    """Admits, delays or refuses at random (seeded by the job)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def admit(self, state, i):  # type: ignore[no-untyped-def]
        draw = np.random.default_rng([self.seed, i, int(state.now)]).random()
        if draw < 0.15:
            return reject("drawn")
        if draw < 0.5:
            return delay("drawn", state.now + 1 + 600 * draw)
        return ADMIT


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["fifo", "las", "srtf", "gandiva"]))
def test_any_verdicts_keep_the_simulators_invariants(seed: int, policy: str) -> None:
    """Whatever a rule decides: every job not refused finishes once, none starts before
    its admission or its submission, and no GPU is used twice (checked after every pass)."""
    from corral.policies import make_policy

    cluster = load_cluster("uniform:2x4:V100")
    jobs = load_trace(f"synthetic:jobs=40,load=1.2,seed={seed}", cluster.total_gpus)
    made = make_policy(policy)
    made.admission = Random(seed)
    result = Simulator(jobs, cluster, made, SimConfig(check_invariants=True)).run()
    state = result.state
    finished = np.isfinite(state.finish_time)
    assert set(np.flatnonzero(~finished)) == set(result.rejected)
    assert (state.first_start[finished] >= state.submit[finished]).all()


def test_the_example_rule_live_refuses_delays_and_admits(tmp_path: Path) -> None:
    """In the service's own loop (virtual time): a gang over the quota ends CANCELLED
    with AdmissionRefused, an arrival while the queue is full waits PENDING with
    AdmissionDelay and starts once admitted; the others run; no pass fails."""
    loop = virtual_loop(tmp_path, v100s=2, admission=f"{CAP}[waiting=1,max_gpus=2,recheck=5]")
    first = loop.queue(command=["sleep", "20"], gpus=2)
    big = loop.queue(command=["sleep", "5"], gpus=3)  # (3 GPUs: more than the quota)
    loop.run(1)
    waiting = loop.queue(command=["sleep", "5"], gpus=1)  # queued behind the first
    loop.run(1)
    held = loop.queue(command=["sleep", "5"], gpus=1)  # one waits already: delayed
    loop.run(1)
    assert loop.row(big).status == "CANCELLED"
    assert loop.row(big).reason.startswith("AdmissionRefused (asks for 3 GPUs")
    assert loop.row(waiting).status == "PENDING"
    assert loop.row(held).status == "PENDING"
    assert loop.row(held).reason.startswith("AdmissionDelay (1 jobs already wait")
    loop.run(120)
    for job in (first, waiting, held):
        assert loop.row(job).status == "SUCCEEDED", (job, loop.row(job).reason)
    starts = {job: loop.attempts(job)[0].start_time for job in (waiting, held)}
    assert starts[held] >= starts[waiting]
    assert loop.scheduler.errors == 0
    loop.close()


def test_a_rule_that_raises_live_admits_the_job_and_says_so(tmp_path: Path) -> None:
    rule = tmp_path / "raises.py"
    rule.write_text(
        "from corral.policies.admission import Admission\n"
        "class Raises(Admission):\n"
        "    def admit(self, state, i):\n"
        "        raise RuntimeError('a bug in the rule')\n"
    )
    loop = virtual_loop(tmp_path / "state", admission=f"{rule}:Raises")
    job = loop.queue(command=["sleep", "3"], gpus=1)
    loop.run(10)
    assert loop.row(job).status == "SUCCEEDED"
    from sqlalchemy import select

    from corral.runtime.storage.store import EventRow

    with loop.store.session() as s:
        kinds = [
            e.detail.get("why") for e in s.scalars(select(EventRow)) if e.kind == "admission_error"
        ]
    assert kinds and "a bug in the rule" in kinds[0]
    assert loop.scheduler.errors == 0
    loop.close()


def test_a_service_config_naming_a_bad_rule_is_refused_at_its_field(tmp_path: Path) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="admission") as caught:
        virtual_loop(tmp_path, admission=f"{CAP}[waiting=0]")
    assert "waiting and max_gpus must be at least 1" in str(caught.value)
