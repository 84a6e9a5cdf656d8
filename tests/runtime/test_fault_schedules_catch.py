"""A loop broken on purpose is caught by the fault schedules within a few seeds
(:mod:`corral.testing.fault_schedules`), and a failing schedule shrinks."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.runtime.execution.identity import RunAs
from corral.runtime.loop.launching import Launching
from corral.runtime.loop.recovery import Recovery
from corral.testing.fault_schedules import Op, make_schedule, run_schedule, run_seed, shrink

SEEDS = range(12)
GUEST_SEED = 10  # the first seed whose schedule catches the careless guest launch


def caught(policy: str, seeds: range = SEEDS) -> tuple[int, str] | None:
    """The first seed whose schedule catches the broken loop, and what it saw. The
    schedules here leave out the holds and releases (added later, from their own
    random stream): the rest of each schedule is the same, and a defect unrelated
    to holds is caught at the seed it was found at, keeping these tests short."""
    for seed in seeds:
        violation = run_seed(policy, seed, holds=False, inside=False)
        if violation is not None:
            return seed, violation.what
    return None


def careless_launch(self: Launching, now: float) -> None:
    """Launch what the plan started without waiting for its GPUs to be free."""
    book = self.loop.book
    for job, gpus in list(book.placed.items()):
        if job not in book.attempts:
            book.launched(job)
            self._launch(job, gpus, now)


def test_a_loop_that_launches_onto_busy_gpus_is_caught_and_its_schedule_shrinks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Caught within the default seeds; the failing schedule then shrinks to fewer
    operations that still break it, each printable (one search serves both checks)."""
    monkeypatch.setattr(Launching, "launch_ready", careless_launch)
    found = caught("las")
    assert found is not None and "GPU" in found[1], found
    ops = make_schedule(found[0], holds=False, inside=False)
    small = shrink("las", ops, budget=6)
    assert len(small) < len(ops) and run_schedule("las", small) is not None
    assert all(isinstance(op, Op) for op in small)
    assert "s " in str(small[0])  # printable: its time, kind and arguments


@pytest.mark.xfail(
    strict=True,
    reason="since a time-sliced group waits, paused, while a member leaves, this launch "
    "overlaps the leaver for an instant only, and the check at each launch leaves time "
    "slices out (their members are launched together and paused within the pass): no "
    "schedule of 40 seeds catches it (benchmarks/mutants.py lists it as missed)",
)
def test_a_guest_packed_beside_a_leaving_one_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defect these schedules found under Gandiva: a new guest was launched on a
    host while the guest it replaced (stopped, ignoring SIGTERM) still ran."""
    monkeypatch.setattr(Launching, "_guest_leaving", lambda self, job, host: False)
    # The seed that caught it (the search over seeds, shown by the test above,
    # costs ten Gandiva schedules here: it is not repeated).
    violation = run_seed("gandiva", GUEST_SEED, holds=False, inside=False)
    assert violation is not None and "held by the open attempts" in violation.what, violation


def test_a_loop_that_keeps_its_memory_after_a_failed_pass_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The defect these schedules found first: after a pass failed on a full disk,
    the loop rebuilt its queue but kept its attempts, so an attempt it had dropped
    before the store refused the write stayed open in the store for good."""

    def rebuild_only(self: Recovery) -> None:
        self.loop.resync_due = False
        self.rebuild()

    monkeypatch.setattr(Recovery, "resync", rebuild_only)
    found = caught("fifo", range(20))
    assert found is not None, "not caught"


def test_a_status_change_outside_the_life_cycle_table_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every status the service writes is checked against the table: one that
    forbids a change the loop makes (a job's launch) is caught at once."""
    from corral.model.status import TRANSITIONS, JobStatus
    from corral.testing import fault_schedules

    strict = dict(TRANSITIONS)
    strict[JobStatus.STARTING] = TRANSITIONS[JobStatus.STARTING] - {JobStatus.RUNNING}
    monkeypatch.setattr(fault_schedules, "TRANSITIONS", strict)
    violation = run_seed("fifo", 0)
    assert violation is not None and "from STARTING to RUNNING" in violation.what, violation


def test_every_mutant_of_the_benchmark_still_applies_to_the_code() -> None:
    """Each mutant's text is found exactly once where it says (code that moved on
    leaves a mutant that is never run: the benchmark then reports it not applied)."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("mutants", root / "benchmarks" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = module  # (its dataclasses look their module up)
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["mutants"]
    counts = {m.name: (module.PACKAGE / m.file).read_text().count(m.old) for m in module.MUTANTS}
    assert {name: n for name, n in counts.items() if n != 1} == {}
    assert len(counts) >= 30


def test_a_job_launched_as_another_user_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every launch runs as its job's user: a service that gives alice's jobs bob's
    account is caught at the launch."""
    from corral.testing import fault_schedules

    real = fault_schedules.identities

    def swapped(folder: Path) -> dict[str, RunAs]:
        ids = real(folder)
        return {"alice": ids["bob"], "bob": ids["alice"]}

    monkeypatch.setattr(fault_schedules, "identities", swapped)
    ops = [Op(1.0, "submit", ("alice", {"command": ["sleep", "2"], "gpus": 1}))]
    violation = run_schedule("fifo", ops)
    assert violation is not None and "of alice was launched as bob" in violation.what


def test_a_warm_worker_of_another_user_or_past_the_cap_is_caught() -> None:
    """A job started in a warm worker of someone else's, or on a GPU not its own, and a
    user with workers on more GPUs than their cap, each trip the check after the step."""
    from corral.testing.fault_schedules import BOB_GPUS, Broken, world
    from corral.testing.virtual import VirtualWarm

    with world("fifo") as w:
        w.apply(Op(0.0, "submit", ("alice", {"command": ["sleep", "50"], "gpus": 1})))
        w.run_until(w.clock() + 2)
        w.check()
        (job,) = w.oracle.promises
        for started_in, gpus in ((("bob", 0), (0,)), (("alice", 1), (0,))):
            w.executor.warm_starts.append((job, started_in, gpus))
            with pytest.raises(Broken, match="started in the warm worker"):
                w.check()
            w.executor.warm_starts.clear()
        w.executor.warm_starts.append((job, ("alice", 0), (0,)))
        w.check()  # its own user's, on its GPU
        for gpu in range(BOB_GPUS):
            w.executor.warm[("bob", gpu)] = VirtualWarm("node-0", 0.0, 0.0)
        w.check()  # as many as bob may hold
        w.executor.warm[("bob", BOB_GPUS)] = VirtualWarm("node-1", 0.0, 0.0)
        with pytest.raises(Broken, match="more than the 6 GPUs bob may hold"):
            w.check()
