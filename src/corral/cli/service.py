"""The service's CLI verbs: ``corral serve``, ``submit``, ``queue``, ``show``, ...

Every verb except ``serve`` talks to the service through the REST API (the
URL and token come from ``--url``/``--token`` or ``CORRAL_URL``/``CORRAL_TOKEN``),
so a user needs no access to the store or the machine the service runs on.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from corral.cli.app import (
    JsonOpt,
    app,
    console,
    err_console,
    print_json,
    print_table,
)
from corral.errors import CorralError
from corral.job_views import (
    history_span,
    print_history,
    print_job,
    print_log,
    print_nodes,
    terminal_safe,
)
from corral.queue_listing import (
    QUEUE_COLUMNS,
    QUEUE_FIELDS,
    cut_note,
    printable,
    queue_columns,
    queue_rows,
    queue_title,
)

if TYPE_CHECKING:
    pass

UrlOpt = Annotated[
    str | None, typer.Option("--url", help="service URL (default: $CORRAL_URL or 127.0.0.1:8470)")
]
TokenOpt = Annotated[str | None, typer.Option("--token", help="API token (default: $CORRAL_TOKEN)")]


def _client(url: str | None, token: str | None) -> Any:
    from corral.api.client import Client

    return Client(url, token)


@app.command()
def serve(
    config: Annotated[Path, typer.Option("--config", "-c", help="service config (YAML)")],
    standby: Annotated[
        bool,
        typer.Option(
            help="wait for the store's lock and take over when its holder stops "
            "(a backup controller) instead of exiting"
        ),
    ] = False,
) -> None:
    """Run the scheduler and its REST API (jobs keep running if it stops).

    One service per store: a second one exits at once naming the holder,
    unless started with --standby."""
    from corral.runtime.jobspec.config import load_config
    from corral.service import serve as run_service

    run_service(
        load_config(config),
        announce=lambda line: console.print(line, highlight=False),
        config_path=config,
        standby=standby,
    )


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="Submit a job: 'corral submit job.yaml', 'corral submit train.sh' (reads its "
    "#CORRAL directives, and its #SBATCH lines with sbatch's meaning, refusing by name the "
    "options corral has not) or 'corral submit --gpus 2 -- python x.py'.",
)
def submit(
    ctx: typer.Context,
    spec_file: Annotated[
        str | None,
        typer.Argument(help="job spec (YAML) or batch script; flags override it"),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-J", help="job name")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs of the gang")] = None,
    gpu_type: Annotated[str | None, typer.Option(help="run only on this GPU type")] = None,
    job_type: Annotated[str | None, typer.Option(help="throughput-profile key")] = None,
    priority: Annotated[
        int | None, typer.Option(help="higher runs first (negative: after others)")
    ] = None,
    max_retries: Annotated[int | None, typer.Option(help="failed attempts retried")] = None,
    wall_time: Annotated[
        str | None, typer.Option("--wall-time", "--time", "-t", help="limit per attempt: 1h")
    ] = None,
    duration: Annotated[
        str | None, typer.Option(help="expected run time, for policies that rank by it")
    ] = None,
    total_steps: Annotated[int | None, typer.Option(help="steps to the end")] = None,
    target_loss: Annotated[
        float | None,
        typer.Option(help="trains until its loss reaches this (work left predicted from it)"),
    ] = None,
    workdir: Annotated[
        str | None, typer.Option("--workdir", "--chdir", "-D", help="working directory")
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            "--array", "-a", help="one task per index: 0-9, 1,3,5, 0-20:5; %N: N at once (0-9%2)"
        ),
    ] = None,
    dependency: Annotated[
        str | None,
        typer.Option(
            "--dependency",
            "-d",
            help="as sbatch: afterok:12:13,after:9 (all), afterok:12?afternotok:13 (any), "
            "singleton",
        ),
    ] = None,
    after: Annotated[list[str] | None, typer.Option(help="start after job ID has started")] = None,
    afterok: Annotated[list[str] | None, typer.Option(help="start after job ID succeeded")] = None,
    afterany: Annotated[list[str] | None, typer.Option(help="start after job ID ended")] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="output file: %j job, %a index, %A array, %x name"),
    ] = None,
    cpus: Annotated[
        int | None, typer.Option("--cpus", "--cpus-per-task", "-c", help="CPUs")
    ] = None,
    memory: Annotated[
        str | None, typer.Option("--mem", "--memory", help="memory: 16G, 512M")
    ] = None,
    mem_per_gpu: Annotated[
        str | None, typer.Option("--mem-per-gpu", help="memory per GPU of the gang (sbatch's)")
    ] = None,
    mem_per_cpu: Annotated[
        str | None, typer.Option("--mem-per-cpu", help="memory per CPU (sbatch's)")
    ] = None,
    mail_type: Annotated[
        str | None,
        typer.Option(
            "--mail-type", help="mail on BEGIN, END, FAIL, REQUEUE, TIME_LIMIT or ALL (sbatch's)"
        ),
    ] = None,
    mail_user: Annotated[
        str | None, typer.Option("--mail-user", help="who gets the mail (default: you)")
    ] = None,
    warning: Annotated[
        str | None,
        typer.Option(
            "--signal",
            help="[B:]SIG[@SECS], as sbatch: SIG sent SECS (60) before the time limit and "
            "before a preemption; B: to the script's shell alone",
        ),
    ] = None,
    export: Annotated[
        str | None,
        typer.Option(
            "--export",
            help="the job's base environment, as sbatch: ALL (default: this shell's), NONE "
            "(the service's clean one), ALL,A=1 or only A=1,B",
        ),
    ] = None,
    vc: Annotated[
        str | None, typer.Option("--vc", "--account", "-A", help="virtual cluster")
    ] = None,
    partition: Annotated[
        str | None,
        typer.Option("--partition", "-p", help="a partition the service names (sbatch -p)"),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option("--nodes", "-N", help="nodes the gang spans exactly (sbatch -N)"),
    ] = None,
    gpus_per_node: Annotated[
        str | None,
        typer.Option("--gpus-per-node", help="GPUs on each node, N or TYPE:N: gpus = nodes x N"),
    ] = None,
    tasks_per_node: Annotated[
        int | None,
        typer.Option(
            "--ntasks-per-node", help="processes an srun line starts on each node (sbatch's)"
        ),
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE (repeatable)")
    ] = None,
    begin: Annotated[
        str | None,
        typer.Option("--begin", "-b", help="not before: now+30m, 2026-11-27T08:00 (sbatch -b)"),
    ] = None,
    error: Annotated[
        str | None,
        typer.Option("--error", help="stderr apart from the output (sbatch -e; here -e is env)"),
    ] = None,
    requeue: Annotated[
        bool | None,
        typer.Option(
            "--requeue/--no-requeue",
            help="queue the job again if its node fails (default), or end it FAILED",
        ),
    ] = None,
    exclusive: Annotated[
        bool,
        typer.Option(
            "--exclusive", help="no other job on its nodes while it runs (sbatch --exclusive)"
        ),
    ] = False,
    held: Annotated[
        bool, typer.Option("--hold", "-H", help="submit held: it waits for 'corral release'")
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", "-W", help="wait for the job to end; exit with its exit code (sbatch -W)"
        ),
    ] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    fields: dict[str, Any] = {}
    command = list(ctx.args)
    from corral.runtime.jobspec.directives import (
        PER_NODE,
        PER_UNIT_MEMORY,
        add_dependency,
        is_script,
        per_node_gpus,
        per_unit_memory,
        script_fields,
        typed_count,
    )
    from corral.submit_env import finish_submission

    if spec_file is not None and spec_file.lower().endswith((".yaml", ".yml", ".json")):
        from corral.runtime.jobspec.specs import load_job_spec  # (pydantic: this path only)

        fields = load_job_spec(spec_file).model_dump(mode="json", exclude_unset=True)
    elif spec_file is not None and is_script(spec_file):  # a batch script
        fields = script_fields(Path(spec_file))
        fields["command"] = fields["command"] + command
        command = []
    elif spec_file is not None:  # the first word of the command, after '--'
        command.insert(0, spec_file)
    if command:
        fields["command"] = command
    flags = {
        "name": name,
        "gpus": gpus,
        "gpu_type": gpu_type,
        "job_type": job_type,
        "priority": priority,
        "max_retries": max_retries,
        "wall_time": wall_time,
        "duration": duration,
        "total_steps": total_steps,
        "target_loss": target_loss,
        "workdir": workdir,
        "array": array,
        "dependency": dependency,
        "output": output,
        "error": error,
        "export": export,
        "signal": warning,
        "mail_type": mail_type,
        "mail_user": mail_user,
        "cpus": cpus,
        "memory": memory,
        "vc": vc,
        "partition": partition,
        "nodes": nodes,
        "tasks_per_node": tasks_per_node,
        "begin": begin,
        "hold": held or None,
        "requeue": requeue,
        "exclusive": exclusive or None,
    }
    fields.update({k: v for k, v in flags.items() if v is not None})
    if gpus_per_node is not None:  # the gang: nodes x GPUs per node, as sbatch reads them
        if gpus is None:
            fields.pop("gpus", None)  # (a script's count gives way to the command line's)
        fields[PER_NODE] = (
            typed_count(gpus_per_node, "the command line", None, "--gpus-per-node"),
            None,
        )
        per_node_gpus(fields, "the command line")
    if memory is not None:  # (the command line's --mem over a script's per-unit memory)
        fields.pop(PER_UNIT_MEMORY, None)
    for name_, per_unit in (("--mem-per-gpu", mem_per_gpu), ("--mem-per-cpu", mem_per_cpu)):
        if per_unit is not None:
            fields.pop("memory", None)
            fields[PER_UNIT_MEMORY] = (name_, per_unit, None)
    try:
        per_unit_memory(fields, spec_file or "the command line")
    except ValueError as exc:
        raise CorralError(f"memory per unit: {exc}") from None
    for kind, ids in (("after", after), ("afterok", afterok), ("afterany", afterany)):
        for item in ids or []:
            add_dependency(fields, f"{kind}:{item}")
    for item in env or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CorralError(f"--env {item}: give KEY=VALUE")
        fields.setdefault("env", {})[key] = value
    if "command" not in fields:
        raise CorralError("no command: give a job spec, a script, or the command after '--'")
    # as sbatch: --chdir relative to where corral submit runs, and output files
    # relative to the job's working directory
    try:
        finish_submission(fields, dict(os.environ), os.getcwd())
    except ValueError as exc:
        raise CorralError(str(exc)) from None
    # The service checks the spec (its answer names each field it refuses); checking
    # it here too would cost every submission pydantic's import.
    with _client(url, token) as client:
        job = client.submit(fields)
    if as_json:
        print_json(job)
    else:
        from corral.submit_env import submitted_line

        print(submitted_line(job), flush=True)
    if wait:
        watched = [int(x) for x in job.get("array_tasks") or [job["id"]]]
        with _client(url, token) as client:
            raise typer.Exit(_wait_for_end(client, watched, quiet=as_json))


WAIT_POLL = 1.0
"""Seconds between looks at a job that ``submit --wait`` watches."""


def _wait_for_end(client: Any, ids: list[int], quiet: bool = False) -> int:
    """Wait until every job in ``ids`` has ended; the exit code ``sbatch --wait``
    would give: 0 when all succeeded, else the first failed job's exit code (1 when
    it has none: cancelled, timed out, killed)."""
    ended: dict[int, dict[str, Any]] = {}
    while len(ended) < len(ids):
        for job_id in ids:
            if job_id not in ended:
                view = client.job(job_id)
                if view["status"] in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"):
                    ended[job_id] = view
        if len(ended) < len(ids):
            time.sleep(WAIT_POLL)
    code = 0
    for job_id in ids:
        view = ended[job_id]
        if not quiet:
            detail = f" (exit code {view['exit_code']})" if view["exit_code"] else ""
            err_console.print(f"job {job_id}: {view['status']}{detail}", highlight=False)
        if view["status"] != "SUCCEEDED" and code == 0:
            exit_code = view["exit_code"]
            code = exit_code if isinstance(exit_code, int) and 0 < exit_code < 256 else 1
    return code


@app.command()
def queue(
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            "-t",
            help="states to list, corral's or Slurm's: RUNNING,PENDING or R,PD (default: live)",
        ),
    ] = None,
    mine: Annotated[bool, typer.Option(help="only my jobs")] = False,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="these users' jobs (comma-separated)")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="jobs of these names (comma-separated)")
    ] = None,
    jobs_: Annotated[
        str | None, typer.Option("--jobs", "-j", help="these job ids (comma-separated)")
    ] = None,
    columns: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-o",
            help=f"columns to show, comma-separated, of: {', '.join(QUEUE_COLUMNS)}",
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="show the first N jobs only (default: all)")
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs with their state, queue position and pending reason (all of them,
    oldest first, unless --limit); squeue's filters (-t, -u, -n, -j) and -o columns."""
    chosen = queue_columns(columns)
    with _client(url, token) as client:
        if as_json:
            jobs, total = client.jobs_counted(state, mine, limit, None, user, name, jobs_)
        else:
            table, total = client.job_table(QUEUE_FIELDS, state, mine, limit, user, name, jobs_)
    shown = len(jobs) if as_json else len(table["id"])
    note = cut_note(shown, total, limit)
    if note:
        err_console.print(note, highlight=False)
    if as_json:
        print_json(jobs)
        return
    print_table(queue_title(shown, total), chosen, queue_rows(table, chosen))


@app.command()
def history(
    user: Annotated[str | None, typer.Option("--user", "-u", help="this user's jobs")] = None,
    all_users: Annotated[
        bool, typer.Option("--all-users", help="every user's jobs, with totals per user")
    ] = False,
    since: Annotated[
        str | None, typer.Option(help="submitted in the last ... (1d, 12h, 30m)")
    ] = None,
    starttime: Annotated[
        str | None,
        typer.Option("--starttime", "-S", help="submitted at or after (2026-11-01[T08:00])"),
    ] = None,
    endtime: Annotated[
        str | None,
        typer.Option("--endtime", "-E", help="submitted before (2026-11-02[T08:00])"),
    ] = None,
    state: Annotated[
        str | None,
        typer.Option("--state", "-s", help="states, corral's or Slurm's: FAILED,CANCELLED or F,CA"),
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Finished and running jobs with wait, elapsed time and GPU-hours (like sacct)."""
    span_of = history_span(since, starttime, endtime)
    with _client(url, token) as client:
        rows = client.history(user, all_users, *span_of, state)
    if as_json:
        print_json(rows)
        return
    print_history(rows)


@app.command()
def show(
    job_id: Annotated[int, typer.Argument(help="job id")],
    script: Annotated[
        bool,
        typer.Option(
            "--script", help="print the batch script as it was submitted (what the job runs)"
        ),
    ] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A job's state, attempts and history."""
    if script:
        with _client(url, token) as client:
            data = client.script(job_id).encode()
        sys.stdout.buffer.write(terminal_safe(data) if sys.stdout.isatty() else data)
        return
    with _client(url, token) as client:
        job = client.job(job_id)
    if as_json:
        print_json(job)
        return
    print_job(job)


def job_selection(words: list[str]) -> dict[str, list[Any]]:
    """Job ids as scancel takes them: ``12`` (an array's id: all its tasks), ``12_3``
    (one task), ``12_[1-5,7]`` (some tasks)."""
    from corral.runtime.jobspec.specs import MAX_ARRAY_SIZE, array_indices

    ids: list[int] = []
    tasks: list[list[int]] = []
    for word in words:
        head, sep, rest = word.partition("_")
        try:
            job = int(head)
            if not sep:
                ids.append(job)
                continue
            indices = array_indices(rest[1:-1] if rest.startswith("[") else rest, MAX_ARRAY_SIZE)
        except ValueError:
            raise CorralError(
                f"'{word}' is not a job id (12), an array task (12_3) or tasks (12_[1-5])"
            ) from None
        tasks += [[job, index] for index in indices]
    return {"ids": ids, "tasks": tasks}


def _act_on_many(
    verb: str,
    jobs: list[str],
    filters: dict[str, str | None],
    url: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """One job by its id alone (not an array's): the job's state after; any other
    selection (an array's id stands for all its tasks): one request for all, and
    what was done and skipped (:mod:`corral.bulk_verbs`, which the quick path
    shares)."""
    from corral.bulk_verbs import act_on_many

    alone = len(jobs) == 1 and jobs[0].isdigit() and not any(filters.values())
    # (an id alone needs no reading of array tasks, whose parser is the spec's)
    selection = {"ids": [int(jobs[0])], "tasks": []} if alone else job_selection(jobs)
    with _client(url, token) as client:
        act_on_many(client, verb, selection, filters, as_json, int(jobs[0]) if alone else None)


JobsArg = Annotated[
    list[str] | None,
    typer.Argument(help="job ids: 12, an array's id for all its tasks, 12_3, 12_[1-5]"),
]
UserFilter = Annotated[str | None, typer.Option("--user", "-u", help="this user's jobs")]
StateFilter = Annotated[
    str | None, typer.Option("--state", "-t", help="jobs in these states: PD,R")
]
NameFilter = Annotated[str | None, typer.Option("--name", "-n", help="jobs of this name")]
VcFilter = Annotated[str | None, typer.Option("--vc", "--account", "-A", help="jobs of this VC")]


def _bulk_verb(verb: str, doc: str) -> None:
    """Register ``corral VERB``: jobs by id (as scancel takes them) or by filter."""

    def command(
        jobs: JobsArg = None,
        user: UserFilter = None,
        state: StateFilter = None,
        name: NameFilter = None,
        vc: VcFilter = None,
        url: UrlOpt = None,
        token: TokenOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        filters = {"user": user, "states": state, "name": name, "vc": vc}
        _act_on_many(verb, jobs or [], filters, url, token, as_json)

    command.__doc__ = doc
    app.command(verb)(command)


_bulk_verb(
    "cancel",
    "Cancel jobs (a running one is stopped), as scancel: ids, an array's id (all its "
    "tasks), tasks (12_3, 12_[1-5]), or every job of -u USER, -t STATE, -n NAME.",
)
_bulk_verb("suspend", "Checkpoint and stop jobs, and keep them out of the queue until resumed.")
_bulk_verb("resume", "Put suspended jobs back in the queue.")
_bulk_verb("hold", "Keep waiting jobs from starting until released (scontrol hold).")
_bulk_verb("release", "Let held jobs back into the queue (scontrol release).")
_bulk_verb(
    "requeue",
    "Stop running jobs and queue them again (scontrol requeue): they start over, from "
    "their checkpoint where they keep one.",
)


@app.command("set-priority", context_settings={"ignore_unknown_options": True})
def set_priority(
    job_id: int,
    priority: int,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a job's priority (higher runs first; negative lowers it: set-priority 6 -5)."""
    with _client(url, token) as client:
        job = client.set_priority(job_id, priority)
    if as_json:
        print_json(job)
        return
    print(f"job {job_id}: priority {job['priority']}", flush=True)


@app.command()
def logs(
    job_id: int,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing")] = False,
    attempt: Annotated[int | None, typer.Option(help="attempt number (default latest)")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="JSON lines instead of the raw log: one object per piece read "
            '({"job", "attempt", "text"}), for programs that follow a log',
        ),
    ] = False,
) -> None:
    """Print a job's log (follows new attempts with -f)."""
    with _client(url, token) as client:
        print_log(client, job_id, follow, attempt, as_json)


@app.command()
def nodes(url: UrlOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The cluster's nodes, GPUs and what runs on them."""
    with _client(url, token) as client:
        rows = client.nodes()
    if as_json:
        print_json(rows)
        return
    print_nodes(rows)


def _set_node(
    name: str, verb: str, reason: str | None, url: str | None, token: str | None, as_json: bool
) -> None:
    with _client(url, token) as client:
        node = client.node_state(name, verb, reason)
    if as_json:
        print_json(node)
        return
    print(printable(f"node {node['name']} is {node['state']}"), flush=True)


@app.command()
def drain(
    node: Annotated[str, typer.Argument(help="node name (see 'corral nodes')")],
    reason: Annotated[str | None, typer.Option(help="why, kept in the event history")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Admin: start nothing more on a node; jobs running there run to their end."""
    _set_node(node, "drain", reason, url, token, as_json)


@app.command()
def undrain(
    node: Annotated[str, typer.Argument(help="node name (see 'corral nodes')")],
    reason: Annotated[str | None, typer.Option(help="why, kept in the event history")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Admin: put a drained node back in service (its failure count starts again)."""
    _set_node(node, "resume", reason, url, token, as_json)
