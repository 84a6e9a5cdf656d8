"""The simulator's verbs: ``corral sim``, ``compare``, ``policies``, ``clusters``."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer
from rich.markup import escape
from rich.table import Table

from corral.cli.app import JsonOpt, app, console, err_console, json_on_stdout, print_json
from corral.errors import CorralError, OperationFailed
from corral.perf.switching import MEASURED_MECHANISMS, SWITCH_MECHANISMS
from corral.sim.presets import SIM_PRESETS
from corral.sim.settings import RunSettings, check_policy_names, user_errors
from corral.traces.formats import FORMATS

if TYPE_CHECKING:
    from corral.sim.experiment import Experiment, Results


TraceOpt = Annotated[
    str, typer.Option(help="'philly', 'tiresias-60', 'synthetic[:jobs=N,load=X]' or a trace file")
]
FormatOpt = Annotated[
    str | None, typer.Option(help=f"trace format: {', '.join(FORMATS)} (default: from the header)")
]
DurationsOpt = Annotated[
    str,
    typer.Option(
        help="Shockwave traces: 'trace' (its own duration column) or 'throughput' "
        "(steps at Gavel's measured V100 throughput)"
    ),
]
SkipOpt = Annotated[
    bool, typer.Option(help="skip and count malformed trace rows instead of stopping")
]
VcOpt = Annotated[
    list[str] | None,
    typer.Option("--vc", help="Philly: keep only this virtual cluster (repeatable)"),
]
StartOpt = Annotated[
    str | None, typer.Option(help="Philly: first submit date kept, e.g. 2017-10-01")
]
EndOpt = Annotated[str | None, typer.Option(help="Philly: submit date before which to stop")]
JobTypesOpt = Annotated[
    str | None, typer.Option(help="give generic jobs measured types: 'gavel' (seeded)")
]
MaxJobsOpt = Annotated[int | None, typer.Option(help="keep only the first N jobs")]
SampleOpt = Annotated[
    str | None,
    typer.Option(
        help="draw the workload from the trace by each seed: window (--max-jobs jobs in a "
        "row from an offset the seed draws) or bootstrap (jobs and arrival gaps drawn with "
        "replacement); default: the trace as it is"
    ),
]
ClusterOpt = Annotated[
    str, typer.Option(help="preset, YAML spec or Tiresias CSV (see 'corral clusters')")
]
ScaleOpt = Annotated[
    float, typer.Option(help="grow or shrink the cluster, keeping its machine mix")
]
RackOpt = Annotated[int | None, typer.Option(help="nodes per rack for presets (default 16)")]
PlacementOpt = Annotated[
    str | None,
    typer.Option(
        help="placement strategy (see 'corral policies'; FILE.py:Class for one of your own; "
        "default: the policy's own)"
    ),
]
AdmissionOpt = Annotated[
    str | None,
    typer.Option(
        help="admission rule of your own: FILE.py:Class[key=value,...] (refuse or delay "
        "arriving jobs; see docs/writing-a-policy.md)"
    ),
]
FailureOpt = Annotated[
    float, typer.Option(help="chance that one attempt of a job fails (0 = no failures)")
]
FailureRatesOpt = Annotated[
    str | None,
    typer.Option(
        help="chances by gang size, over --failure-rate: 1:0.05,2-4:0.1,9-:0.3 "
        "('corral trace-stats' gives a Philly job log's own)"
    ),
]
RetriesOpt = Annotated[int, typer.Option(help="failed attempts retried before a job is FAILED")]
PresetOpt = Annotated[
    str | None,
    typer.Option(help=f"a named set of assumptions: {', '.join(SIM_PRESETS)}"),
]
SeedOpt = Annotated[int, typer.Option(help="seed for every random choice")]
SwitchOpt = Annotated[
    str,
    typer.Option(
        help="seconds per preempt+restart, or one of "
        f"{', '.join([*SWITCH_MECHANISMS, *MEASURED_MECHANISMS])} (measured: this machine's "
        "figures, from the profile benchmarks/switching.py writes)"
    ),
]
SwitchProfileOpt = Annotated[
    Path | None,
    typer.Option(
        help="switching profile for --switch-cost measured[-cold] "
        "(default: $CORRAL_SWITCH_PROFILE or ~/.config/corral/switching.json)"
    ),
]
CrossNodeOpt = Annotated[
    float, typer.Option(help="speed factor of a gang spread over nodes (unknown models)")
]
CrossRackOpt = Annotated[
    float, typer.Option(help="speed factor of a gang spread over racks (unknown models)")
]
PolicyOptOpt = Annotated[
    list[str] | None,
    typer.Option("--policy-opt", help="policy option key=value or policy.key=value"),
]
ProfilesOpt = Annotated[
    Path | None,
    typer.Option(help="measured throughputs (CSV: job_type,gpu_type,num_gpus,steps_per_second)"),
]
CheckOpt = Annotated[
    bool, typer.Option(help="check the simulator's invariants after every pass (slow)")
]
ProgressOpt = Annotated[bool, typer.Option(help="show a progress bar")]
ParquetOpt = Annotated[
    bool,
    typer.Option(
        help="also write every CSV as Parquet, provenance in its metadata (needs pyarrow)"
    ),
]


def _run_options(
    trace: TraceOpt = "philly",
    trace_format: FormatOpt = None,
    durations: DurationsOpt = "trace",
    skip_bad: SkipOpt = False,
    vc: VcOpt = None,
    start: StartOpt = None,
    end: EndOpt = None,
    max_jobs: MaxJobsOpt = None,
    workload_sample: SampleOpt = None,
    job_types: JobTypesOpt = None,
    cluster: ClusterOpt = "philly",
    cluster_scale: ScaleOpt = 1.0,
    rack_size: RackOpt = None,
    placement: PlacementOpt = None,
    admission: AdmissionOpt = None,
    preset: PresetOpt = None,
    failure_rate: FailureOpt = 0.0,
    failure_rates: FailureRatesOpt = None,
    max_retries: RetriesOpt = 3,
    seed: SeedOpt = 0,
    switch_cost: SwitchOpt = "kill-restart",
    switch_profile: SwitchProfileOpt = None,
    cross_node_factor: CrossNodeOpt = 0.8,
    cross_rack_factor: CrossRackOpt = 0.7,
    policy_opt: PolicyOptOpt = None,
    profiles: ProfilesOpt = None,
    check: CheckOpt = False,
    progress: ProgressOpt = True,
    parquet: ParquetOpt = False,
) -> None:
    """Declares the shared options once; :func:`_with_run_options` adds them to a command."""


def _evaluated_parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """A function's parameters with their annotations evaluated (``Annotated`` kept),
    as Typer needs them to read option help."""
    hints = get_type_hints(fn, include_extras=True)
    return {
        name: p.replace(annotation=hints.get(name, p.annotation))
        for name, p in inspect.signature(fn).parameters.items()
    }


def _with_run_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command ``command(run: RunSettings, **own_options)`` the shared options.

    Typer reads a command's options from its signature, so the wrapper shows
    the command's own options followed by those of :func:`_run_options`, and
    hands the shared ones to the command as one :class:`RunSettings`.
    """
    shared = _evaluated_parameters(_run_options)
    own = [p for name, p in _evaluated_parameters(command).items() if name != "run"]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        invoked = dict(kwargs)
        run = RunSettings(**{name: kwargs.pop(name) for name in shared}, invoked=invoked)
        with json_on_stdout(bool(kwargs.get("as_json"))):
            command(run, **kwargs)

    params = [*own, *shared.values()]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def _summary_table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(title="results")
    columns: list[tuple[str, str, Callable[[Any], str]]] = [
        ("policy", "policy", str),
        ("finished", "jobs_finished", "{:,}".format),
        ("avg JCT (h)", "avg_jct_s", lambda v: f"{v / 3600:,.2f}"),
        ("median JCT (h)", "median_jct_s", lambda v: f"{v / 3600:,.2f}"),
        ("p99 JCT (h)", "p99_jct_s", lambda v: f"{v / 3600:,.1f}"),
        ("avg queueing (h)", "avg_queueing_s", lambda v: f"{v / 3600:,.2f}"),
        ("makespan (d)", "makespan_s", lambda v: f"{v / 86400:,.1f}"),
        ("GPU util", "gpu_utilization", "{:.3f}".format),
        ("preemptions", "preemptions", "{:,}".format),
        ("wall (s)", "wall_s", "{:.1f}".format),
    ]
    for title, _, _ in columns:
        table.add_column(title, justify="left" if title == "policy" else "right")
    for s in summaries:  # (a variant's label has brackets: not markup)
        table.add_row(
            *("-" if s.get(key) is None else escape(fmt(s[key])) for _, key, fmt in columns)
        )
    return table


@app.command()
@_with_run_options
def sim(
    run: RunSettings,
    policy: Annotated[str, typer.Option(help="policy name (see 'corral policies')")] = "fifo",
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/sim"),
    as_json: JsonOpt = False,
) -> None:
    """Replay a trace on a cluster under one policy; write jobs.csv and summary.json."""
    from corral.policies import policy_key
    from corral.sim.experiment import experiment_from

    name = policy_key(policy)
    check_policy_names([name])
    if "[" in name or "," in name:
        raise CorralError(f"--policy: '{policy}' is one policy's name (variants: corral compare)")
    experiment = experiment_from(run, policies=[name], layout="run", runner="serial")
    results = _run_with_progress(experiment, out, run.progress)
    (summary,) = results.summaries
    _raise_for_failures(results, out, "policies")
    if as_json:
        print_json(summary)
        return
    console.print(_summary_table([summary]))
    console.print(f"wrote {out}/jobs.csv, {out}/summary.json", highlight=False)


def _say(kind: str, text: str) -> None:
    """An experiment's messages as the command line shows them."""
    if kind == "info":
        console.print(text, highlight=False)
    else:
        colour = "red" if kind == "error" else "yellow"
        err_console.print(f"[{colour}]{kind}:[/] {escape(text)}", highlight=False, soft_wrap=True)


def _run_with_progress(experiment: Experiment, out: Path, show: bool) -> Results:
    """Run an experiment one run after another, each with a progress bar of its arrivals."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if not show:
        return experiment.run(out, say=_say, done=lambda _, s: _print_done(s))
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} arrivals"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        bars: dict[str, Any] = {}

        def progress(run: str, done: int, total: int) -> None:
            if run not in bars:
                bars[run] = bar.add_task(escape(run), total=total)
            bar.update(bars[run], completed=done)

        return experiment.run(out, say=_say, progress=progress, done=lambda _, s: _print_done(s))


def _raise_for_failures(results: Results, out: Path, what: str) -> None:
    """One line for the runs that failed (the others' results are written)."""
    crashed = results.failures
    if not crashed:
        return
    if results.layout == "sweep":
        first = crashed[0]
        raise OperationFailed(
            f"{len(crashed)} of {len(results.summaries)} runs failed (the first: "
            f"{first['run_dir']}: {first['error']} at {first['raised_at']}); tracebacks in "
            f"each one's {out}/<run>/error.log; the others' results are written"
        )
    which = "; ".join(f"{s['policy']}: {s['error']} at {s['raised_at']}" for s in crashed)
    # (one run's folder is the output itself: its log is there, not in a folder of its own)
    logs = ", ".join(
        str(out / "error.log" if results.layout == "run" else out / s["log"]) for s in crashed
    )
    others = "; the others' results are written" if len(results.summaries) > 1 else ""
    raise OperationFailed(
        f"{len(crashed)} of {len(results.summaries)} {what} failed ({which}); "
        f"tracebacks in {logs}{others}"
    )


RunnerOpt = Annotated[
    str | None,
    typer.Option(
        help="how runs are carried out: processes (on this machine), ray (Ray tasks: a "
        "local instance, or --address), serial (one after another, with progress bars)"
    ),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(help="an existing Ray cluster to run on ('auto', or host:port); implies ray"),
]
ParallelOpt = Annotated[
    int | None,
    typer.Option("--parallel", "-j", min=1, help="runs at once (default: one per CPU core)"),
]


def _runner(runner: str | None, address: str | None, parallel: int | None, default: str) -> str:
    """The runner asked for; ``auto`` is Ray where it is installed, else processes."""
    from corral.sim.parallel import RUNNERS

    name = (runner or ("ray" if address else default)).strip().lower()
    if name == "auto":
        import importlib.util

        name = "ray" if importlib.util.find_spec("ray") is not None else "processes"
    if name not in RUNNERS:
        raise CorralError(f"--runner: '{name}' is not one of auto, {', '.join(RUNNERS)}")
    if parallel == 1 and name == "processes":
        name = "serial"
    return name


@app.command()
@_with_run_options
def compare(
    run: RunSettings,
    policies: Annotated[
        str,
        typer.Option(
            help="comma-separated policy names; a policy with options of its own and a "
            "label, for ablations: 'las[quantum=60,label=las-1min],las'"
        ),
    ] = "fifo,srtf,las",
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/compare"),
    parallel: ParallelOpt = None,
    runner: RunnerOpt = None,
    address: AddressOpt = None,
    report_format: Annotated[
        str,
        typer.Option(
            "--format", help="report.html (html), report.md for papers and issues (md), or both"
        ),
    ] = "html",
    as_json: JsonOpt = False,
) -> None:
    """Run the same workload under several policies and write a comparison report.

    Policies run side by side (each in its own process by default;
    ``--parallel 1`` runs them one after another in this process, with a
    progress bar each; ``--runner ray`` as Ray tasks, as ``corral sweep``
    does); the results do not depend on how many run at once.
    """
    from corral.sim.experiment import experiment_from

    experiment = experiment_from(
        run,
        policies=policies,
        layout="comparison",
        runner=_runner(runner, address, parallel, "processes"),
        parallel=parallel,
        address=address,
        report_format=report_format,
    )
    if experiment.runner == "serial":
        results = _run_with_progress(experiment, out, run.progress)
    else:
        with console.status(f"running {len(experiment.variants())} policies") as status:
            finished: list[str] = []

            def done(name: str, summary: dict[str, Any]) -> None:
                _print_done(summary)
                finished.append(name)
                status.update(f"{len(finished)} of {len(experiment.variants())} policies done")

            results = experiment.run(out, say=_say, done=done)
    if as_json:
        print_json({"runs": results.summaries, "provenance": results.provenance})
    else:
        console.print(_summary_table([s for s in results.summaries if s.get("status") is None]))
        also = f", {out}/report.md" if report_format == "both" else ""
        console.print(f"wrote {out}/comparison.csv{also} and {results.report}", highlight=False)
    _raise_for_failures(results, out, "policies")


def _print_done(summary: dict[str, Any]) -> None:
    if summary.get("error"):
        console.print(f"  {escape(summary['policy'])}: [red]failed[/] ({escape(summary['error'])})")
        return
    console.print(
        f"  {escape(summary['policy'])}: avg JCT {summary['avg_jct_s'] / 3600:,.2f} h "
        f"({summary['wall_s']:.1f} s wall)",
        highlight=False,
    )


@app.command()
@_with_run_options
def sweep(
    run: RunSettings,
    policies: Annotated[
        str | None,
        typer.Option(
            help="comma-separated policy names; variants as in compare: 'las[quantum=60],las'"
        ),
    ] = None,
    loads: Annotated[
        str | None,
        typer.Option(help="offered loads to rescale the trace's arrivals to, e.g. 0.7,0.9,1.1"),
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="seeds: 0..4 (both ends included) or 1,3,5")
    ] = None,
    cluster_scales: Annotated[
        str | None, typer.Option(help="cluster sizes as scales of --cluster, e.g. 0.1,0.2")
    ] = None,
    grid: Annotated[
        Path | None,
        typer.Option(
            help="YAML file with policies, loads, seeds, cluster_scales "
            "(options given here replace its axes)"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/sweep"),
    parallel: ParallelOpt = None,
    runner: RunnerOpt = None,
    address: AddressOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a grid of simulations (policies x loads x seeds x cluster sizes) in parallel.

    Runs are worker processes by default, one per core; --runner ray makes them
    Ray tasks (on a local Ray instance of the sweep's own, or an existing
    cluster with --address). Writes a folder per run, results.csv (one row per run, every
    summary key) and report.html / report.md with means over seeds and their
    spread.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from corral.sim.experiment import experiment_from, policy_entry
    from corral.sim.sweep import Grid

    with user_errors():
        spec = Grid.build(policies, loads, seeds, cluster_scales, grid, run.seed, run.cluster_scale)
    experiment = experiment_from(
        run,
        policies=[policy_entry(v) for v in spec.variants],
        loads=None if spec.loads == [None] else spec.loads,
        seeds=spec.seeds,
        cluster_scales=spec.cluster_scales,
        layout="sweep",
        runner=_runner(runner, address, parallel, "processes"),
        parallel=parallel,
        address=address,
    )
    with Progress(
        TextColumn("[bold]runs"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=not run.progress,
        disable=not run.progress,
    ) as bar:
        task_id = bar.add_task("runs", total=len(experiment.points()))
        results = experiment.run(out, say=_say, done=lambda _, s: bar.advance(task_id))
    if as_json:
        rows = [{k: v for k, v in s.items() if k != "provenance"} for s in results.summaries]
        print_json({"runs": rows, "provenance": results.provenance})
    else:
        console.print(
            f"wrote {out}/results.csv, {out}/report.md and {results.report}", highlight=False
        )
    _raise_for_failures(results, out, "runs")


@app.command("policies")
def list_policies(
    name: Annotated[
        str | None, typer.Argument(help="one policy to describe, with its options and defaults")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """List every policy and placement strategy, or describe one policy.

    Piped into another program it prints tab-separated lines with every name
    and option in full (a table would be cut to the terminal's width).
    """
    from corral.placement.registry import PLACEMENTS
    from corral.policies import (
        POLICIES,
        ROUND_MODEL_LIVE,
        live_support,
        option_table,
        policy_options,
    )
    from corral.policies.rounds.planners import ROUND_PLANNERS

    def gang_row(key: str) -> dict[str, Any]:
        cls = POLICIES[key]
        note = live_support(cls)
        return {
            "name": key,
            "oracle": cls.oracle,
            "model": "elastic" if cls.resizes else "gang",
            "live": f"yes; {note}" if note else "yes",
            "description": cls.description,
            "options": policy_options(cls),
            "option_details": option_table(key),
        }

    def round_row(key: str) -> dict[str, Any]:
        planner = ROUND_PLANNERS[key]
        return {
            "name": key,
            "oracle": False,
            "model": "round",
            "live": f"yes; {ROUND_MODEL_LIVE}",
            "description": planner.description,
            "options": policy_options(planner),  # type: ignore[arg-type]
            "option_details": option_table(key),
        }

    if name is not None:
        from corral.policies import policy_key

        key = policy_key(name)
        if ":" not in key:  # a file's or module's class is loaded (a clear error if not)
            check_policy_names([key])
        row = round_row(key) if key in ROUND_PLANNERS else gang_row(key)
        if as_json:
            print_json(json.loads(json.dumps(row, default=str)))
            return
        kind = {"round": "round model", "elastic": "resizes jobs"}.get(row["model"], "gang")
        console.print(f"[bold]{key}[/]: {row['description']}", highlight=False)
        console.print(f"oracle: {'yes' if row['oracle'] else 'no'}; model: {kind}", highlight=False)
        console.print(f"live (corral serve): {row['live']}", highlight=False)
        if not row["options"]:
            console.print("options: none", highlight=False)
            return
        table = Table(title="options (--policy-opt key=value)")
        table.add_column("option", no_wrap=True)
        table.add_column("default")
        table.add_column("accepts")
        table.add_column("what it does")
        for option, about in row["option_details"].items():
            table.add_row(option, str(about["default"]), about["accepts"], about["help"])
        console.print(table)
        return
    rows = [gang_row(key) for key in POLICIES] + [round_row(key) for key in ROUND_PLANNERS]
    places = [{"name": n, "description": cls.description} for n, cls in PLACEMENTS.items()]
    if as_json:
        print(json.dumps({"policies": rows, "placements": places}, indent=2, default=str))
        return

    def options_text(options: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in options.items()) or "-"

    if not console.is_terminal:
        print("kind\tname\toracle\tmodel\tlive\tdescription\toptions")
        for row in rows:
            oracle = "yes" if row["oracle"] else "no"
            print(
                f"policy\t{row['name']}\t{oracle}\t{row['model']}\t{row['live']}\t"
                f"{row['description']}\t{options_text(row['options'])}"
            )
        for place in places:
            print(f"placement\t{place['name']}\t-\t-\t-\t{place['description']}\t-")
        return
    table = Table(title="policies")
    table.add_column("name", no_wrap=True)
    table.add_column("oracle")
    table.add_column("live (corral serve)")
    table.add_column("description")
    table.add_column("options (--policy-opt key=value)")
    for row in rows:
        suffix = {"round": " [round model]", "elastic": " [resizes jobs]"}.get(row["model"], "")
        table.add_row(
            row["name"],
            "yes" if row["oracle"] else "no",
            "yes*" if row["live"].startswith("yes;") else row["live"].split(";")[0],
            row["description"] + suffix,
            options_text(row["options"]),
        )
    console.print(table)
    console.print("yes*: runs live with differences; 'corral policies --json' says which.")
    placements = Table(title="placements (--placement)")
    placements.add_column("name", no_wrap=True)
    placements.add_column("description")
    for place in places:
        placements.add_row(place["name"], place["description"])
    console.print(placements)


@app.command("clusters")
def list_clusters(
    describe: Annotated[str | None, typer.Argument(help="a --cluster value to describe")] = None,
    cluster_scale: ScaleOpt = 1.0,
    rack_size: RackOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the cluster presets, or describe one cluster."""
    from corral.model.cluster_specs import PRESETS, load_cluster

    if describe:
        with user_errors():
            machines = load_cluster(describe, rack_size=rack_size, scale=cluster_scale)
        if as_json:
            nodes = [
                {"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus} for n in machines.nodes
            ]
            described = {
                "cluster": machines.describe(),
                "total_gpus": machines.total_gpus,
                "gpus_by_type": machines.gpus_by_type(),
                "nodes": nodes,
            }
            print_json(described)
            return
        console.print(machines.describe(), highlight=False)
        console.print(json.dumps(machines.gpus_by_type()), highlight=False)
        return
    if as_json:
        print_json({"presets": PRESETS})
        return
    table = Table(title="cluster presets (--cluster)")
    table.add_column("preset")
    table.add_column("what")
    for name, text in PRESETS.items():
        table.add_row(name, text)
    console.print(table)
    console.print("Or a path to a YAML cluster spec or a Tiresias cluster CSV.")


@app.command()
def rerun(
    result: Annotated[Path, typer.Argument(help="a result folder of sim, compare or sweep")],
    out: Annotated[
        Path | None, typer.Option(help="where the new result goes (default: RESULT-rerun)")
    ] = None,
) -> None:
    """Make a result again from its provenance.json and say whether it came out the same.

    Runs the recorded command (from the directory you are in: a trace file named
    by a relative path is looked for here) into another folder, then compares
    every CSV and summary with the first, less what differs between any two
    runs (wall-clock seconds, the provenance). Exits 1 when anything differs.
    The command is printed first: a policy file it names is run as Python, so
    rerun only results from people whose scripts you would run.
    """
    import subprocess
    import sys

    from corral import __version__
    from corral.sim.provenance import PROVENANCE_FILE, code_identity
    from corral.sim.rerun import (
        changed_policy_files,
        differences,
        failed_runs,
        kept_sources_args,
        recorded,
        rerun_args,
    )

    record = recorded(result)
    target = out or result.with_name(result.name + "-rerun")
    if target.resolve() == result.resolve():
        raise CorralError("--out: the new result must go to another folder than RESULT")
    args = rerun_args(record, target)
    then = record.get("code") or {}
    now = code_identity()
    if record.get("corral_version") != __version__ or then.get("git_commit") != now.get(
        "git_commit"
    ):
        err_console.print(
            f"[yellow]note:[/] the result was made by corral {record.get('corral_version')}"
            f"{' at ' + then['git_commit'][:12] if then.get('git_commit') else ''}; this is "
            f"{__version__}{' at ' + now['git_commit'][:12] if now.get('git_commit') else ''}",
            highlight=False,
        )
    args, kept = kept_sources_args(record, result, args)
    for note in kept:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if not kept:
        for change in changed_policy_files(record):
            err_console.print(f"[yellow]note:[/] {escape(change)}", highlight=False)
    console.print(f"rerun    corral {escape(shlex_join(args))}", highlight=False)
    done = subprocess.run([sys.executable, "-m", "corral.cli", *args], check=False)
    failed_then, failed_now = failed_runs(result), failed_runs(target)
    partly = done.returncode == 1 and (target / PROVENANCE_FILE).exists()
    if done.returncode != 0 and not partly:
        raise OperationFailed(f"the recorded command failed again (exit code {done.returncode})")
    # a result whose runs partly failed: the good ones are compared; the failed ones
    # are said, and must be the same as before
    found = differences(result, target, failed_then | failed_now)
    for run in sorted(failed_then & failed_now):
        console.print(f"  failed again, as in the result: {run}", highlight=False)
    for run in sorted(failed_now - failed_then):
        console.print(f"  failed now, not in the result: {run}", highlight=False)
        found.differ.append(run)
    for run in sorted(failed_then - failed_now):
        console.print(f"  failed in the result, ran now: {run}", highlight=False)
        found.differ.append(run)
    trace_now = recorded(target).get("trace")
    if trace_now != record.get("trace"):  # (a file of the same name, other rows)
        err_console.print(
            f"[yellow]note:[/] the trace read now is not the one the result was made from "
            f"(then {record.get('trace')}; now {trace_now})",
            highlight=False,
        )
    for name in found.differ:
        console.print(f"  differs: {name}", highlight=False)
    for name in found.missing:
        console.print(f"  missing from the rerun: {name}", highlight=False)
    if not found.identical:
        raise OperationFailed(
            f"the rerun differs: {len(found.differ)} file(s) differ and {len(found.missing)} "
            f"are missing, of {len(found.same) + len(found.differ) + len(found.missing)} "
            f"compared; it is in {target}"
        )
    console.print(
        f"identical: {len(found.same)} files compared (less wall-clock seconds and the "
        f"provenance); the rerun is in {target}",
        highlight=False,
    )


@app.command()
def plot(
    result: Annotated[Path, typer.Argument(help="a result folder of sim, compare or sweep")],
    out: Annotated[
        Path | None, typer.Option(help="where the figures go (default: RESULT/figures)")
    ] = None,
    formats: Annotated[
        str, typer.Option("--format", help="comma-separated: pdf, svg, png")
    ] = "pdf,svg,png",
    width: Annotated[
        str, typer.Option(help="single (one column, 3.5 in) or double (the page, 7.16 in)")
    ] = "single",
    policies: Annotated[
        str | None,
        typer.Option(help="comma-separated: only these of the result's policies, in this order"),
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            help="comma-separated: only these figures (a sweep: avg_jct, p99_jct, "
            "avg_queueing, makespan, gpu_utilization, preemptions; a comparison: jct, "
            "queueing, avg_jct)",
        ),
    ] = None,
    scale: Annotated[
        str,
        typer.Option(help="the value axis: auto (log where it spans decades), linear or log"),
    ] = "auto",
    normalise: Annotated[
        str | None,
        typer.Option(
            "--normalise",
            "--normalize",
            help="divide each policy's metric by this policy's (a sweep: seed by seed, "
            "then averaged; a comparison: its average JCT)",
        ),
    ] = None,
) -> None:
    """Draw a result's figures for a paper: PDF, SVG and PNG, one style per policy.

    A comparison (or one run) gives the JCT and queueing-delay CDFs and the
    average JCT per policy; a sweep gives each metric against load (or
    cluster size) with 95% intervals over its seeds.
    """
    from corral.sim.figures import Drawing, plot_result

    if not result.is_dir():
        raise CorralError(f"{result}: no such result folder")
    chosen = tuple(f.strip().lower() for f in formats.split(",") if f.strip())

    def words(text: str | None) -> list[str] | None:
        return [w.strip() for w in text.split(",") if w.strip()] if text else None

    drawing = Drawing(words(policies), words(metric), scale.strip().lower(), normalise)
    with user_errors():
        written = plot_result(result, out, chosen, width, drawing=drawing)
    names = sorted({p.stem for p in written})
    where = written[0].parent if written else out
    console.print(
        f"wrote {len(written)} files to {where}: {', '.join(names)} ({', '.join(chosen)})",
        highlight=False,
    )


def shlex_join(words: list[str]) -> str:
    import shlex

    return shlex.join(words)
