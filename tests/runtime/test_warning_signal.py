"""sbatch's ``--signal=[B:]SIG[@SECS]``: the warning a checkpointing script traps,
sent SECS before the job's time limit (once), and before corral's own suspends
and preemptions, whose SIGTERM then waits for it (up to ``signal_lead_max``);
to the batch script's shell alone with ``B:``, else to its other processes.
In virtual time for the timing, with real processes for who gets it."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from corral.errors import InputError
from corral.runtime.jobspec.directives import script_fields
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.storage.store import EventRow, JobRow
from corral.testing.virtual import VirtualProcess
from tests.runtime.harness import Harness
from tests.runtime.virtual_loop import VirtualLoop, virtual_loop

USR1 = int(signal.SIGUSR1)


def process(loop: VirtualLoop, job: int) -> VirtualProcess:
    (found,) = [p for p in loop.executor.processes.values() if p.job == job]
    return found


def ask(loop: VirtualLoop, job: int, request: str) -> None:
    """Record a request as the API does, for the loop's next pass."""
    with loop.store.session() as s:
        row = s.get(JobRow, job)
        assert row is not None
        row.request = request


def warned_events(loop: VirtualLoop, job: int) -> list[dict[str, Any]]:
    with loop.store.session() as s:
        return [
            dict(d)
            for d in s.scalars(
                select(EventRow.detail).where(EventRow.job_id == job, EventRow.kind == "warned")
            )
        ]


def test_the_text_is_read_as_sbatch_reads_it(tmp_path: Path) -> None:
    assert JobSpec(command=["x"], signal="B:USR1@90").signal == "B:USR1@90"
    assert JobSpec(command=["x"], signal="10").signal == "USR1@60"  # (60 s unless given)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --signal=B:SIGUSR2@120\necho\n")
    assert JobSpec.model_validate(script_fields(script)).signal == "B:USR2@120"
    script.write_text("#!/bin/bash\n#SBATCH -t 5\n#SBATCH --signal=KILL@10\necho\n")
    with pytest.raises(InputError, match=r"job.sh:3: field '--signal'.*cannot be caught"):
        script_fields(script)


def test_a_job_is_warned_once_that_long_before_its_time_limit(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path)
    try:
        job = loop.queue(command=["sleep", "1000"], wall_time=300, signal="USR1@60")
        loop.run(235)
        assert process(loop, job).warned == []
        loop.run(10)
        ((at, sig, whom),) = process(loop, job).warned
        began = loop.attempts(job)[0].start_time
        assert 240 <= at - began <= 240.5 and sig == USR1 and whom == "all"  # (a command)
        loop.run(100)
        assert len(process(loop, job).warned) == 1
        assert loop.row(job).status == "TIMEOUT"
        (event,) = warned_events(loop, job)
        assert event["before"] == "time limit" and event["sent"] is True
    finally:
        loop.close()


@pytest.mark.parametrize(("text", "whom"), [("B:USR1@30", "batch"), ("USR1@30", "steps")])
def test_a_batch_scripts_warning_goes_to_its_shell_or_to_its_steps(
    tmp_path: Path, text: str, whom: str
) -> None:
    loop = virtual_loop(tmp_path)
    try:
        job = loop.queue(command=["sleep", "1000"], script_path="/x.sh", wall_time=60, signal=text)
        loop.run(40)
        assert [w[2] for w in process(loop, job).warned] == [whom]
    finally:
        loop.close()


def test_a_preemption_warns_first_and_terminates_once_the_warning_is_over(
    tmp_path: Path,
) -> None:
    """LAS preempts the job that has run for a newcomer: the job's warning first, its
    SIGTERM once the warning's time (60 s asked, capped at 20) is over."""
    loop = virtual_loop(tmp_path, "las", policy_options={"quantum": 1.0}, signal_lead_max=20.0)
    try:
        job = loop.queue(command=["sleep", "1000"], signal="USR1@60")
        loop.run(5)
        loop.queue(command=["sleep", "1000"])
        loop.run(2)
        mine = process(loop, job)
        assert [w[1] for w in mine.warned] == [USR1] and signal.SIGTERM not in mine.signalled
        loop.run(15)
        assert signal.SIGTERM not in mine.signalled
        loop.run(6)
        assert signal.SIGTERM in mine.signalled
        assert warned_events(loop, job)[0]["before"] == "preempt"
    finally:
        loop.close()


def test_a_users_suspend_is_not_put_off(tmp_path: Path) -> None:
    """The warning's lead is for corral's own stops: a user's suspend (or requeue, the
    job's own from its trap) terminates at once."""
    loop = virtual_loop(tmp_path)
    try:
        job = loop.queue(command=["sleep", "1000"], signal="USR1@60")
        loop.run(5)
        ask(loop, job, "suspend")
        loop.run(1)
        assert signal.SIGTERM in process(loop, job).signalled
    finally:
        loop.close()


def test_a_cancel_during_the_warning_terminates_at_once(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path, "las", policy_options={"quantum": 1.0})
    try:
        job = loop.queue(command=["sleep", "1000"], signal="USR1@60")
        loop.run(5)
        loop.queue(command=["sleep", "1000"])
        loop.run(2)
        mine = process(loop, job)
        assert mine.warned and signal.SIGTERM not in mine.signalled  # (put off)
        ask(loop, job, "cancel")
        loop.run(1)
        assert signal.SIGTERM in mine.signalled
        loop.run(10)
        assert loop.row(job).status == "CANCELLED"
    finally:
        loop.close()


def test_a_job_without_a_warning_is_terminated_at_once(tmp_path: Path) -> None:
    loop = virtual_loop(tmp_path)
    try:
        job = loop.queue(command=["sleep", "1000"])
        loop.run(5)
        ask(loop, job, "suspend")
        loop.run(1)
        assert signal.SIGTERM in process(loop, job).signalled
    finally:
        loop.close()


TRAPS = textwrap.dedent(
    """\
    #!/bin/bash
    trap 'echo shell warned >> {out}; exit 0' USR1
    python3 -c '
    import signal, sys, time
    def warned(*_):
        open("{out}", "a").write("step warned\\n")
        sys.exit(0)
    signal.signal(signal.SIGUSR1, warned)
    time.sleep(30)
    ' &
    wait  # (a shell runs its trap once its foreground command ends: wait ends at once)
    echo shell went on >> {out}
    """
)


@pytest.mark.parametrize(
    ("text", "seen"),
    [("B:USR1@2", "shell warned\n"), ("USR1@2", "step warned\nshell went on\n")],
)
def test_real_processes_get_the_warning_as_slurm_sends_it(
    tmp_path: Path, text: str, seen: str
) -> None:
    """With B: the script's shell traps it (its step is not touched); without, the
    step does and the shell goes on, as under Slurm."""
    out = tmp_path / "seen.txt"
    path = tmp_path / "job.sh"
    path.write_text(TRAPS.format(out=out))
    harness = Harness(tmp_path / "state")
    try:
        job = harness.submit(
            command=["bash", str(path)],
            script=path.read_text(),
            script_path=str(path),
            wall_time=4,
            signal=text,
        )
        done = harness.wait_state(job["id"], {"SUCCEEDED", "FAILED", "TIMEOUT"}, 60)
        assert done["status"] == "SUCCEEDED", done
        assert out.read_text() == seen
    finally:
        harness.close()
