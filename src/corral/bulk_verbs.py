"""The verbs that act on jobs (``cancel``, ``hold``, ``release``, ``suspend``,
``resume``, ``requeue``), as scancel and scontrol take them: what is sent and
printed, and the exit code. Standard library and the HTTP client only: the
quick path (:mod:`corral.quick_verbs`) answers these without the full command
line, and the full one (:mod:`corral.cli.service`) calls the same code.
"""

from __future__ import annotations

import json
import sys

from corral.errors import CorralError, NotFound, OperationFailed, PermissionDenied
from corral.queue_listing import printable

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from typing import Any

    from corral.api.client import Client

SHOWN_SKIPPED = 20


def emit_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def act_on_one(client: Client, verb: str, job_id: int, as_json: bool) -> None:
    """One job by its id: the job's state after."""
    job = client.action(job_id, verb)
    if as_json:
        emit_json(job)
        return
    reason = f" ({job['reason']})" if job["reason"] else ""
    print(f"job {job_id}: {job['status']}{reason}", flush=True)


def act_on_many(
    client: Client,
    verb: str,
    selection: dict[str, Any],
    filters: dict[str, str | None],
    as_json: bool,
    single: int | None,
) -> None:
    """``verb`` on the jobs ``selection`` names (ids, tasks) and ``filters`` pick.
    ``single``: the one id given alone, acted on by its own route (its state after)
    unless it is an array's id, which stands for all its tasks."""
    alone = single is not None and verb != "requeue"
    if alone and single is not None and client.job(single).get("array_job") != single:
        act_on_one(client, verb, single, as_json)
        return
    wanted = {**selection, **{k: v for k, v in filters.items() if v}}
    if not (wanted.get("ids") or wanted.get("tasks") or any(filters.values())):
        raise CorralError(f"{verb} what? give job ids, or -u USER, -t STATE, -n NAME, --vc VC")
    answer = client.act_on_many(verb, wanted)
    done, skipped = answer["done"], answer["skipped"]
    if as_json:
        emit_json(answer)
    else:
        print(f"{verb}: {len(done)} job{'s' * (len(done) != 1)} asked", flush=True)
        for job, why in list(skipped.items())[:SHOWN_SKIPPED]:
            print(f"job {job} left alone: {printable(why)}", file=sys.stderr)
        if len(skipped) > SHOWN_SKIPPED:
            more = len(skipped) - SHOWN_SKIPPED
            print(f"... and {more} more left alone", file=sys.stderr)
    exit_for_skipped(verb, skipped, named=not any(filters.values()) and not done)


def exit_for_skipped(verb: str, skipped: dict[str, str], named: bool) -> None:
    """The exit code a bulk action ends with, as one job's would (the README's table):
    a job named that is another user's, 5; one that does not exist, 3; jobs named by
    id of which none could be acted on for their state, 1 (as scancel and scontrol
    do). An array's tasks already ended beside others acted on, and jobs a filter
    picked and left alone for their state, are no error."""
    reasons = list(skipped.values())
    if any(why.startswith("belongs to ") for why in reasons):
        raise PermissionDenied(f"{verb}: other users' jobs were left alone")
    if any(why == "no such job" for why in reasons):
        raise NotFound(f"{verb}: some jobs named do not exist")
    if named and reasons:
        raise OperationFailed(f"{verb}: some jobs named could not be {verb}d as they are")
