"""``scontrol`` inside a job run by corral, for what a batch script asks of itself:
``scontrol requeue $SLURM_JOB_ID`` (the checkpoint-and-requeue pattern, often in
a ``--signal`` trap), ``hold``/``release`` and ``show job`` of the job's own id.

It calls the service as the job (its ``CORRAL_JOB_TOKEN``, which the service
takes for that job alone and only while its attempt runs), so a job acts on
itself as its owner would, and on no other job. Anything else is refused with
what it takes: the other verbs are the user's, from ``corral`` outside jobs.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from corral.errors import CorralError

ACTIONS = {"requeue": "requeue", "hold": "hold", "release": "release", "uhold": "hold"}
SLURM_STATE = {
    "SUCCEEDED": "COMPLETED",
    "STARTING": "CONFIGURING",
}
USAGE = (
    "scontrol in a corral job takes: requeue|hold|release JOBID, show job [JOBID], for "
    "the job's own id (other verbs: 'corral' outside jobs)"
)


def show_job(job: dict[str, Any]) -> str:
    """A job as ``scontrol show job`` prints it (the fields scripts read)."""
    spec = job.get("spec") or {}
    wall = spec.get("wall_time")
    from corral.timespan import span

    limit = "UNLIMITED" if wall is None else span(wall)
    fields = [
        ("JobId", job["id"]),
        ("JobName", job["name"]),
        ("UserId", job["user"]),
        ("JobState", SLURM_STATE.get(job["status"], job["status"])),
        ("Reason", job.get("reason") or "None"),
        ("Restarts", max(len(job.get("attempts") or []) - 1, 0)),
        ("TimeLimit", limit),
        ("NumNodes", spec.get("nodes") or 1),
        ("TRES", f"gres/gpu={job['gpus']}"),
        ("WorkDir", spec.get("workdir") or ""),
        ("Command", spec.get("script_path") or " ".join(job.get("command") or [])),
        ("StdOut", spec.get("output") or ""),
    ]
    if spec.get("array_job") is not None:
        fields.insert(1, ("ArrayJobId", spec["array_job"]))
        fields.insert(2, ("ArrayTaskId", spec.get("array_index")))
    return "\n".join(f"   {k}={v}" for k, v in fields).lstrip() + "\n"


def main(args: list[str]) -> int:
    from corral.api.client import Client

    own = os.environ.get("CORRAL_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    words = [w for w in args if not w.startswith("-")]  # (-o, -d: sbatch's output options)
    if not words:
        print(f"scontrol: {USAGE}", file=sys.stderr)
        return 1
    verb, rest = words[0].lower(), words[1:]
    if verb == "show" and rest[:1] in (["job"], ["jobid"]):
        rest = rest[1:]
    elif verb not in ACTIONS:
        print(f"scontrol: '{verb}': {USAGE}", file=sys.stderr)
        return 1
    target = (rest[0] if rest else own or "").removeprefix("jobid=").removeprefix("JobId=")
    if not target.isdigit():
        print(f"scontrol: give a job id ({USAGE})", file=sys.stderr)
        return 1
    try:
        with Client(os.environ.get("CORRAL_API_URL"), os.environ.get("CORRAL_JOB_TOKEN")) as c:
            if verb == "show":
                sys.stdout.write(show_job(c.job(int(target))))
            else:
                c.action(int(target), ACTIONS[verb])
    except CorralError as exc:
        print(f"scontrol: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
