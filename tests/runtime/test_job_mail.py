"""sbatch's ``--mail-type`` and ``--mail-user``: mail sent through the service's
``mail_program`` (a stand-in that writes what it was given), with Slurm's
subjects, once per occasion; an array's once for the whole array unless
ARRAY_TASKS; refused where the service sends no mail."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from corral.errors import InputError
from corral.runtime.job_mail import Mailer
from corral.runtime.jobspec.directives import script_fields
from corral.runtime.jobspec.specs import JobSpec
from tests.runtime.harness import Harness, auth, wait_for


@pytest.fixture
def mailbox(tmp_path: Path) -> Path:
    """A mail program that appends each mail as 'USER | SUBJECT' to a file."""
    box = tmp_path / "mailbox"
    program = tmp_path / "mail"
    program.write_text(
        f'#!/bin/sh\n[ "$1" = -s ] || exit 2\necho "$3 | $2" >> {box}\ncat >/dev/null\n'
    )
    program.chmod(0o755)
    return box


def mails(box: Path, count: int) -> list[str]:
    wait_for(lambda: box.exists() and len(box.read_text().splitlines()) >= count, 30, "mail")
    time.sleep(0.5)  # (none more)
    return box.read_text().splitlines()


@pytest.fixture
def harness(tmp_path: Path, mailbox: Path) -> Any:
    made = Harness(tmp_path / "state", policy="fifo", policy_options={},
                   mail_program=mailbox.parent / "mail")  # fmt: skip
    assert made.config.mail_program is not None
    mailer = Mailer(made.store, made.config.mail_program)
    made.store.echo = mailer
    yield made
    mailer.close()
    made.close()


def test_begin_and_fail_as_slurm_words_them(harness: Harness, mailbox: Path) -> None:
    job = harness.submit(
        command=["sh", "-c", "sleep 0.5; exit 3"], max_retries=0, mail_type="ALL",
        mail_user="ana@example.org",
    )  # fmt: skip
    harness.wait_state(job["id"], {"FAILED"}, 60)
    began, failed = mails(mailbox, 2)
    assert began.startswith(f"ana@example.org | corral Job_id={job['id']} Name=job Began, ")
    assert f"Job_id={job['id']} Name=job Failed, Run time 00:00:0" in failed
    assert failed.endswith("FAILED, ExitCode 3")


def test_an_array_mails_once_unless_each_task_is_asked(harness: Harness, mailbox: Path) -> None:
    whole = harness.submit(command=["true"], array="0-2", mail_type="BEGIN,END")
    for task in whole["array_tasks"]:
        harness.wait_state(task, {"SUCCEEDED"}, 60)
    got = mails(mailbox, 2)
    assert [m.split(" | ")[1].split(" Name")[0] for m in got] == [
        f"corral Job_id={whole['id']}"
    ] * 2
    assert "Began" in got[0] and got[1].endswith("COMPLETED, ExitCode 0")
    mailbox.unlink()
    each = harness.submit(command=["true"], array="0-1", mail_type="END,ARRAY_TASKS")
    for task in each["array_tasks"]:
        harness.wait_state(task, {"SUCCEEDED"}, 60)
    assert len(mails(mailbox, 2)) == 2  # (one per task, each ended)
    assert all(m.startswith("alice | corral Job_id=") for m in mailbox.read_text().splitlines())


def test_no_mail_for_none_and_a_refusal_where_no_mail_is_sent(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "state")
    try:
        answer = harness.client.post(
            "/v1/jobs", json={"command": ["true"], "mail_type": "END"}, headers=auth("alice")
        )
        assert answer.status_code == 422 and "sends no mail" in answer.text
        ok = harness.client.post(
            "/v1/jobs", json={"command": ["true"], "mail_type": "NONE"}, headers=auth("alice")
        )
        assert ok.status_code == 201
    finally:
        harness.close()


def test_the_directives_are_read_and_refused_by_name(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --mail-type=end,fail\n#SBATCH --mail-user=me\necho\n")
    spec = JobSpec.model_validate(script_fields(script))
    assert (spec.mail_type, spec.mail_user) == (["END", "FAIL"], "me")
    script.write_text("#!/bin/bash\n#SBATCH --mail-type=BEGIN,STAGE_OUT\necho\n")
    with pytest.raises(InputError, match=r"job.sh:2: field '--mail-type'.*STAGE_OUT"):
        script_fields(script)
    with pytest.raises(ValueError, match="mail_user"):
        JobSpec(command=["x"], mail_user="-oProxyCommand=x")  # (never an option of the program)


def test_an_array_whose_last_task_fails_says_so_once_and_reads_its_tasks_once(
    harness: Harness, mailbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole array's mail names its failure when the task that fails is the last
    to end (its end counted before the mail), is sent once, and the mailer reads the
    array's tasks once (once a task's event, a 2,000-task array read its 2,000 rows
    4,000 times)."""
    made: list[int] = []
    real = Mailer._array

    def counted(self: Mailer, *args: Any) -> Any:
        if args[1].spec["array_job"] not in self.arrays:
            made.append(args[1].spec["array_job"])
        return real(self, *args)

    monkeypatch.setattr(Mailer, "_array", counted)
    script = 'sleep "$((CORRAL_ARRAY_INDEX * 2))"; exit "$((CORRAL_ARRAY_INDEX == 2 ? 7 : 0))"'
    whole = harness.submit(command=["sh", "-c", script], array="0-2", max_retries=0,
                           mail_type="BEGIN,END,FAIL")  # fmt: skip
    for task in whole["array_tasks"]:
        harness.wait_state(task, {"SUCCEEDED", "FAILED"}, 60)
    got = mails(mailbox, 2)
    assert len(got) == 2 and "Began" in got[0]
    assert f"Job_id={whole['id']} Name=job Failed" in got[1] and got[1].endswith("ExitCode 7")
    assert made == [whole["id"]]
