"""``scontrol`` in a job: a script shows itself, requeues itself from a ``--signal``
trap (the checkpoint-and-requeue pattern of Slurm clusters) and starts again with
``SLURM_RESTART_COUNT`` 1; its token acts on itself alone."""

from __future__ import annotations

import textwrap
from pathlib import Path

from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import TERMINAL, TOKENS


def test_a_job_shows_and_requeues_itself_and_nothing_else(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path / "state", "fifo", users=TOKENS)
    service.start()
    try:
        out = tmp_path / "seen.txt"
        other = service.client.submit({"command": ["sleep", "60"], "gpus": 1, "hold": True})
        script = textwrap.dedent(
            f"""\
            #!/bin/bash
            scontrol show job $SLURM_JOB_ID > {tmp_path}/show-$SLURM_RESTART_COUNT.txt
            if scontrol hold {other["id"]} 2>> {out}; then echo "held another" >> {out}; fi
            if [ "$SLURM_RESTART_COUNT" = 0 ]; then
                trap 'echo "warned, requeueing" >> {out}; scontrol requeue $SLURM_JOB_ID' USR1
                sleep 30 &
                wait
                sleep 30
            fi
            echo "restart $SLURM_RESTART_COUNT done" >> {out}
            """
        )
        path = tmp_path / "job.sh"
        path.write_text(script)
        job = service.client.submit(
            {
                "command": ["bash", str(path)],
                "script": script,
                "script_path": str(path),
                "gpus": 1,
                "wall_time": 60,
                "signal": "B:USR1@57",  # (at 3 s: the trap's checkpoint-and-requeue)
                "workdir": str(tmp_path),
            }
        )
        wait_for(lambda: service.client.job(job["id"])["status"] in TERMINAL, 90, "the job's end")
        done = service.client.job(job["id"])
        assert done["status"] == "SUCCEEDED", done
        assert len(done["attempts"]) == 2
        seen = out.read_text()
        assert "warned, requeueing" in seen and "restart 1 done" in seen
        assert "held another" not in seen and "401" in seen  # (its token: itself alone)
        shown = (tmp_path / "show-0.txt").read_text()
        assert f"JobId={job['id']}" in shown and "JobState=RUNNING" in shown
        assert "TimeLimit=00:01:00" in shown and "UserId=alice" in shown
        assert service.client.job(other["id"])["status"] == "PENDING"
    finally:
        service.close()
