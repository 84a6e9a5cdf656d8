"""Each rule of the outcome oracle (:mod:`corral.testing.oracle`) trips on a history
that breaks it, written straight into a store, and holds on the same history kept.
(That the rules catch a broken loop is ``benchmarks/mutants.py``'s score.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.storage.store import AttemptRow, EventRow, JobRow, Store
from corral.testing.oracle import Oracle, Promise

T0 = 1_000.0


class Tripped(Exception):
    pass


def trip(what: str) -> NoReturn:
    raise Tripped(what)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    made = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield made
    made.dispose()


def oracle(**kw: Any) -> Oracle:
    return Oracle(
        trip,
        tick=1.0,
        grace=3.0,
        node_requeues=5,
        user_gpus=kw.pop("caps", {}),
        cpus=kw.pop("cpus", None),
        **kw,
    )


def job(s: Session, o: Oracle, user: str = "alice", **spec: Any) -> int:
    made = JobSpec(**{"command": ["sleep", "5"], **spec})
    row = JobRow.queued(made, user, 0, "Submitted", submit_time=T0)
    s.add(row)
    s.flush()
    o.submitted([(row.id, user, dict(row.spec), row.name)], T0)
    return row.id


def attempt(
    s: Session, jid: int, number: int, start: float, end: float | None, cause: str | None,
    gpus: tuple[int, ...] = (0,), events: bool = True,
) -> None:  # fmt: skip
    s.add(AttemptRow(job_id=jid, number=number, phase="main", gpus=list(gpus),
                     start_time=start, end_time=end, dir="/", token_sha256="0" * 64,
                     cause=cause))  # fmt: skip
    if events:
        s.add(EventRow(time=start, job_id=jid, kind="start", detail={"attempt": number}))
        if end is not None:
            s.add(EventRow(time=end, job_id=jid, kind="attempt_end",
                           detail={"attempt": number, "cause": cause}))  # fmt: skip


def end(s: Session, jid: int, status: str, at: float) -> None:
    row = s.get(JobRow, jid)
    assert row is not None
    row.status = "RUNNING"  # (ended from running, as the life cycle allows)
    s.flush()
    row.status, row.end_time = status, at
    row.first_start = row.first_start or T0


def ends(store: Store, o: Oracle) -> str | None:
    """What the end-of-run rules say (None: they hold)."""
    try:
        with store.session() as s:
            o.check_end(s, set())
    except Tripped as exc:
        return str(exc)
    return None


def steps(store: Store, o: Oracle, now: float) -> str | None:
    try:
        with store.session() as s:
            o.check_step(s, now, set(), {})
    except Tripped as exc:
        return str(exc)
    return None


def test_a_job_that_ends_as_its_command_does_holds_every_rule(store: Store) -> None:
    o = oracle()
    with store.session() as s:
        j = job(s, o)
        attempt(s, j, 1, T0 + 1, T0 + 6, "succeeded")
        end(s, j, "SUCCEEDED", T0 + 6)
    assert ends(store, o) is None


@pytest.mark.parametrize("extra", [0, 1])
def test_retries_trip_on_one_attempt_more_than_max_retries(store: Store, extra: int) -> None:
    o = oracle()
    with store.session() as s:
        j = job(s, o, command=["false"], max_retries=1)
        for k in range(2 + extra):
            attempt(s, j, k + 1, T0 + 10 * k, T0 + 10 * k + 1, "user_error")
        end(s, j, "FAILED", T0 + 30)
    said = ends(store, o)
    assert (said is not None and said.startswith("retries")) == bool(extra), said


def test_a_command_that_fails_must_not_succeed(store: Store) -> None:
    o = oracle()
    with store.session() as s:
        j = job(s, o, command=["false"], max_retries=0)
        attempt(s, j, 1, T0, T0 + 1, "succeeded")
        end(s, j, "SUCCEEDED", T0 + 1)
    said = ends(store, o)
    assert said is not None and said.startswith("command"), said


@pytest.mark.parametrize(
    ("began", "ended", "trips"),
    [
        (T0 + 7.0, T0 + 7.1, True),  # a whole pass while it ran past its 5 s
        (T0 + 5.5, T0 + 11.0, False),  # the pass was held (a slow store) past its end
        (T0 + 3.0, T0 + 3.1, False),  # the only pass came before its wall time was over
    ],
)
def test_a_sleep_past_its_wall_time_must_time_out_if_a_pass_saw_it(
    store: Store, began: float, ended: float, trips: bool
) -> None:
    """``sleep 10`` with a wall time of 5 s ends SUCCEEDED at 11 s: wrong only if a
    pass ran, start to end, between its wall time and its own end."""
    o = oracle()
    o.good_passes = [(1, began, ended)]
    with store.session() as s:
        j = job(s, o, command=["sleep", "10"], wall_time=5.0)
        attempt(s, j, 1, T0 + 1, T0 + 11, "succeeded")
        end(s, j, "SUCCEEDED", T0 + 11)
    said = ends(store, o)
    assert (said is not None and said.startswith("command")) == trips, said


def test_afterok_trips_when_the_job_it_waits_for_failed(store: Store) -> None:
    o = oracle()
    with store.session() as s:
        first = job(s, o, command=["false"], max_retries=0)
        attempt(s, first, 1, T0, T0 + 1, "user_error")
        end(s, first, "FAILED", T0 + 1)
        then = job(s, o, dependency=f"afterok:{first}")
        attempt(s, then, 1, T0 + 2, T0 + 7, "succeeded")
        end(s, then, "SUCCEEDED", T0 + 7)
    said = ends(store, o)
    assert said is not None and said.startswith("dependency"), said


@pytest.mark.parametrize(("stepped_between", "trips"), [(0.0, True), (30.0, False)])
def test_afterok_across_a_clock_step_back_compares_within_the_step(
    store: Store, stepped_between: float, trips: bool
) -> None:
    """The job waited for ended at T0 + 5 by its clock; the dependent started at
    T0 + 4.2 by the clock after a step back of 30 s between the two (it started
    29.2 s after the end): met. With no step between them it started first."""
    o = oracle()
    o.back = 30.0
    with store.session() as s:
        first = job(s, o)
        attempt(s, first, 1, T0, T0 + 5, "succeeded")
        end(s, first, "SUCCEEDED", T0 + 5)
        then = job(s, o, dependency=f"afterok:{first}")
        attempt(s, then, 1, T0 + 4.2, T0 + 9, "succeeded")
        end(s, then, "SUCCEEDED", T0 + 9)
    o.back_at[(first, 1)] = o.back_open[(first, 1)] = 30.0 - stepped_between
    o.back_at[(then, 1)] = 30.0
    said = ends(store, o)
    assert (said is not None and said.startswith("dependency")) is trips, said


def test_a_cancel_trips_when_the_job_runs_on_to_succeed(store: Store) -> None:
    o = oracle()
    o.good_passes = [(1, T0 + 2.0, T0 + 2.1), (2, T0 + 3.0, T0 + 3.1)]
    with store.session() as s:
        j = job(s, o)
        attempt(s, j, 1, T0, T0 + 5, "succeeded")
        end(s, j, "SUCCEEDED", T0 + 5)
    o.cancel_asked(j, T0 + 1.5)
    said = ends(store, o)
    assert said is not None and said.startswith("cancel"), said
    o.promises[j].cancelled_before = 2  # asked after the last pass began: none missed it
    assert ends(store, o) is None


@pytest.mark.parametrize(("ended", "trips"), [(None, True), (1, False), (0, True)])
def test_a_cancel_of_a_job_whose_process_had_ended_holds_if_that_attempt_was_its_last(
    store: Store, ended: int | None, trips: bool
) -> None:
    """Seed 1,559: the cancel was asked after the process had ended, its end not yet
    recorded; the clock then stepped back, and the end (by the old clock) fell after
    the first pass (by the new). The job ended first: no trip, if the attempt that had
    ended is its last (another launched after the cancel must not succeed)."""
    o = oracle()
    o.good_passes = [(1, T0 + 2.0, T0 + 2.1)]  # (by the stepped clock)
    with store.session() as s:
        j = job(s, o)
        attempt(s, j, 1, T0, T0 + 5, "succeeded")
        end(s, j, "SUCCEEDED", T0 + 5)
    o.cancel_asked(j, T0 + 8.0, ended)
    said = ends(store, o)
    assert (said is not None and said.startswith("cancel")) == trips, said


def test_history_trips_on_an_end_event_that_differs(store: Store) -> None:
    o = oracle()
    with store.session() as s:
        j = job(s, o)
        attempt(s, j, 1, T0, T0 + 5, "succeeded", events=False)
        s.add(EventRow(time=T0, job_id=j, kind="start", detail={"attempt": 1}))
        s.add(EventRow(time=T0 + 5, job_id=j, kind="attempt_end",
                       detail={"attempt": 1, "cause": "preempted"}))  # fmt: skip
        end(s, j, "SUCCEEDED", T0 + 5)
    said = ends(store, o)
    assert said is not None and said.startswith("history"), said


def test_held_trips_on_a_start_before_any_release(store: Store) -> None:
    o = oracle()
    with store.session() as s:
        j = job(s, o, hold=True)
        attempt(s, j, 1, T0 + 1, None, None)
    said = steps(store, o, T0 + 2)
    assert said is not None and said.startswith("held"), said
    o.release_asked(j, T0 + 0.5)
    assert steps(store, o, T0 + 2) is None


def test_throttle_trips_on_one_task_over_the_limit(store: Store) -> None:
    o = oracle()
    with store.session() as s:
        tasks = [job(s, o, array_job=1, array_index=k, array_limit=2) for k in range(3)]
        for k, t in enumerate(tasks):
            attempt(s, t, 1, T0, None, None, gpus=(k,))
    said = steps(store, o, T0 + 1)
    assert said is not None and said.startswith("throttle"), said


def test_wall_time_trips_past_two_ticks_and_the_grace(store: Store) -> None:
    o = oracle()
    with store.session() as s:
        j = job(s, o, command=["hang"], wall_time=10.0)
        attempt(s, j, 1, T0, None, None)
    assert steps(store, o, T0 + 15.0) is None  # 10 s and 5 s of margin
    said = steps(store, o, T0 + 15.2)
    assert said is not None and said.startswith("wall time"), said
    o.unsteady.append((T0 + 9.0, T0 + 20.0))  # a full disk when it was due: later allowed
    assert steps(store, o, T0 + 24.0) is None


def test_a_timeout_before_the_wall_time_trips(store: Store) -> None:
    o = oracle()
    with store.session() as s:
        j = job(s, o, command=["hang"], wall_time=10.0)
        attempt(s, j, 1, T0, T0 + 6.0, "timeout")
        end(s, j, "TIMEOUT", T0 + 6.0)
    said = ends(store, o)
    assert said is not None and said.startswith("wall time"), said


@pytest.mark.parametrize(("stepped_within", "trips"), [(0.0, True), (30.0, False)])
def test_a_clock_step_back_excuses_only_the_attempts_open_across_it(
    store: Store, stepped_within: float, trips: bool
) -> None:
    """An early timeout by the stored times is allowed only by the steps back made
    while its attempt was open, not by every step back of the run."""
    o = oracle()
    o.back = 30.0  # (a step of 30 s somewhere in the run)
    with store.session() as s:
        j = job(s, o, command=["hang"], wall_time=10.0)
        attempt(s, j, 1, T0, T0 + 6.0, "timeout")
        end(s, j, "TIMEOUT", T0 + 6.0)
    o.back_at[(j, 1)] = 30.0 - stepped_within
    o.back_open[(j, 1)] = 30.0
    said = ends(store, o)
    assert (said is not None and said.startswith("wall time")) is trips, said


def test_limits_trip_on_a_user_over_their_gpus(store: Store) -> None:
    o = oracle(caps={"bob": 2})
    with store.session() as s:
        for k in range(3):
            attempt(s, job(s, o, user="bob"), 1, T0, None, None, gpus=(k,))
    said = steps(store, o, T0 + 1)
    assert said is not None and said.startswith("limits"), said


def test_cpus_trip_on_more_cpus_held_than_the_service_has(store: Store) -> None:
    o = oracle(cpus=4)
    with store.session() as s:
        attempt(s, job(s, o, gpus=0, cpus=2), 1, T0, None, None, gpus=())
        attempt(s, job(s, o, gpus=1, cpus=2), 1, T0, None, None, gpus=(0,))
    assert steps(store, o, T0 + 1) is None  # 2 + 2: all it has
    with store.session() as s:
        attempt(s, job(s, o, gpus=0), 1, T0 + 1, None, None, gpus=())
    said = steps(store, o, T0 + 2)
    assert said is not None and said.startswith("cpus: the attempts in flight hold 5"), said


def test_cpus_trip_on_a_cpu_only_job_given_a_gpu(store: Store) -> None:
    o = oracle(cpus=4)
    with store.session() as s:
        attempt(s, job(s, o, gpus=0), 1, T0, None, None, gpus=(3,))
    said = steps(store, o, T0 + 1)
    assert said is not None and said.startswith("cpus: CPU-only job"), said


def test_checkpoint_trips_on_a_start_behind_the_saved_step() -> None:
    o = oracle()
    o.promises[7] = Promise(7, "alice", JobSpec(command=["train", "100", "10"]), T0, "job")
    o.saved(7, 40)
    o.launched(7, 2, 40.0)
    with pytest.raises(Tripped, match="checkpoint"):
        o.launched(7, 3, 0.0)


@pytest.mark.parametrize(("caps", "kind"), [({"vc_gpus": {"prod": 2}}, "GPUs"),
                                           ({"vc_running": {"prod": 2}}, "attempts")])  # fmt: skip
def test_limits_trip_on_a_virtual_cluster_over_its_caps(
    store: Store, caps: dict[str, Any], kind: str
) -> None:
    o = oracle(**{k: dict(v) for k, v in caps.items()})
    with store.session() as s:
        attempt(s, job(s, o, vc="prod"), 1, T0, None, None, gpus=(0,))
        attempt(s, job(s, o, user="bob", vc="prod"), 1, T0, None, None, gpus=(1,))
        attempt(s, job(s, o), 1, T0, None, None, gpus=(2, 3))  # (another VC's)
    assert steps(store, o, T0 + 1) is None  # 2 GPUs and 2 jobs of prod: within both
    with store.session() as s:
        attempt(s, job(s, o, vc="prod"), 1, T0 + 1, None, None, gpus=(4,))
    said = steps(store, o, T0 + 2)
    assert said is not None and said.startswith("limits: virtual cluster prod"), said
    assert kind in said


def test_limits_count_a_rounds_task_as_its_job(store: Store) -> None:
    o = oracle(vc_running={"prod": 1})
    with store.session() as s:
        parent = job(s, o, vc="prod", gpus=2)
        made = JobSpec(command=["sleep", "5"], vc="prod")
        task = JobRow.queued(made, "alice", 0, "Submitted", submit_time=T0)
        task.parent = parent
        s.add(task)
        s.flush()  # (a task is made by the loop: the oracle has no promise of its own)
        attempt(s, task.id, 1, T0, None, None, gpus=(0,))
        attempt(s, job(s, o, vc="prod"), 1, T0, None, None, gpus=(1,))
    said = steps(store, o, T0 + 1)
    assert said is not None and said.startswith("limits: virtual cluster prod runs 2"), said


def test_gang_trips_on_an_attempt_on_one_node(store: Store) -> None:
    o = oracle(node_of={0: "a", 1: "a", 2: "b", 3: "b"})
    with store.session() as s:
        attempt(s, job(s, o, gpus=2, nodes=2), 1, T0, None, None, gpus=(1, 2))
    assert steps(store, o, T0 + 1) is None
    with store.session() as s:
        attempt(s, job(s, o, gpus=2, nodes=2), 1, T0, None, None, gpus=(0, 3))
        attempt(s, job(s, o, gpus=2, nodes=2), 1, T0, None, None, gpus=(0, 1))
    said = steps(store, o, T0 + 1)
    assert said is not None and said.startswith("gang: job 3"), said


def rounds_job(s: Session, o: Oracle, layout: list[list[tuple[float, float]]]) -> int:
    """A job of three rounds of two tasks run as rounds; ``layout``: each round's tasks
    (start, end), all succeeded; the job SUCCEEDED at the last end."""
    task_spec = {"factory": "corral.examples.tasks:digits", "steps": 30, "round_steps": 10}
    parent = job(s, o, gpus=2, task=task_spec)
    for number, tasks in enumerate(layout):
        for part, (start, stop) in enumerate(tasks):
            ref = {"job": parent, "round": number, "part": part, "parts": 2, "rounds": 3}
            made = JobSpec(command=["sleep", "5"], round_of=ref)
            row = JobRow.queued(made, "alice", 0, "Submitted", submit_time=T0)
            row.parent = parent
            s.add(row)
            s.flush()
            attempt(s, row.id, 1, start, stop, "succeeded")
            end(s, row.id, "SUCCEEDED", stop)
    end(s, parent, "SUCCEEDED", max(stop for tasks in layout for _, stop in tasks))
    s.execute(update(EventRow).where(EventRow.job_id == parent).values(kind="start"))
    return parent


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ([[(1, 5), (1, 6)], [(6, 9), (7, 9)], [(9, 12), (9, 12)]], None),
        ([[(1, 5), (1, 6)], [(5, 9), (7, 9)], [(9, 12), (9, 12)]], "round 1 started a task"),
        ([[(1, 5), (1, 6)], [(6, 9), (7, 9)]], "SUCCEEDED with rounds"),
        ([[(1, 5), (1, 6)], [(6, 9)], [(9, 12), (9, 12)]], "SUCCEEDED with rounds"),
    ],
)
def test_rounds_trip_on_a_round_early_or_missing(
    store: Store, layout: list[list[tuple[float, float]]], says: str | None
) -> None:
    o = oracle(rounds_live=True)
    with store.session() as s:
        parent = rounds_job(s, o, [[(T0 + a, T0 + b) for a, b in r] for r in layout])
        s.add(EventRow(time=T0 + 1, job_id=parent, kind="start", detail={"rounds": True}))
    said = ends(store, o)
    if says is None:
        assert said is None, said
    else:
        assert said is not None and said.startswith("rounds") and says in said, said
