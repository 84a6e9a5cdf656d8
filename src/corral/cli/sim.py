"""The simulator's verbs: ``corral sim``, ``compare``, ``policies``, ``clusters``."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer
from rich.markup import escape
from rich.table import Table

from corral.cli.app import JsonOpt, app, console, err_console, json_on_stdout, print_json
from corral.errors import CorralError
from corral.perf.switching import MEASURED_MECHANISMS, SWITCH_MECHANISMS
from corral.sim.presets import SIM_PRESETS
from corral.traces.formats import FORMATS

if TYPE_CHECKING:
    from corral.model.cluster import Cluster
    from corral.model.jobs import JobTable
    from corral.perf.throughputs import ThroughputTable
    from corral.sim.run import RunSpec
    from corral.sim.variants import Variant


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
ClusterOpt = Annotated[
    str, typer.Option(help="preset, YAML spec or Tiresias CSV (see 'corral clusters')")
]
ScaleOpt = Annotated[
    float, typer.Option(help="grow or shrink the cluster, keeping its machine mix")
]
RackOpt = Annotated[int | None, typer.Option(help="nodes per rack for presets (default 16)")]
PlacementOpt = Annotated[
    str | None,
    typer.Option(help="placement strategy (see 'corral policies'; default: the policy's own)"),
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


@contextmanager
def _user_errors() -> Iterator[None]:
    """File-system errors are input errors too."""
    try:
        yield
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise CorralError(f"{exc.filename}: {exc.strerror}") from None


@dataclass
class RunArgs:
    """The options ``sim`` and ``compare`` share: the workload and how a run is set up."""

    trace: str
    trace_format: str | None
    durations: str
    skip_bad: bool
    vc: list[str] | None
    start: str | None
    end: str | None
    max_jobs: int | None
    job_types: str | None
    cluster: str
    cluster_scale: float
    rack_size: int | None
    placement: str | None
    preset: str | None
    failure_rate: float
    failure_rates: str | None
    max_retries: int
    seed: int
    switch_cost: str
    switch_profile: Path | None
    cross_node_factor: float
    cross_rack_factor: float
    policy_opt: list[str] | None
    profiles: Path | None
    check: bool
    progress: bool
    parquet: bool
    _profiles: ThroughputTable | None = field(default=None, init=False, repr=False)
    invoked: dict[str, Any] = field(default_factory=dict, repr=False)
    """Every option of the command as run, defaults too (its provenance)."""
    trace_info: dict[str, Any] = field(default_factory=dict, repr=False)
    """The trace's name, counts and checksum, once loaded."""

    def provenance(
        self, policies: list[str], seed: int | None = None, variants: list[Variant] | None = None
    ) -> dict[str, Any]:
        """How a result of this command was made (see :mod:`corral.sim.provenance`),
        with each policy's (or variant's, by its label) options as run: its defaults
        and the ones given, typed as the policy declares them."""
        from corral.policies import checked_options, option_defaults
        from corral.sim.provenance import provenance
        from corral.sim.run import parse_policy_options
        from corral.sim.variants import Variant, variant_options

        record = provenance(self.invoked, self.trace_info, self.seed if seed is None else seed)
        runs = variants or [Variant(name, name) for name in policies]
        record["policy_options"] = {
            v.label: {
                **{k: d for k, d in option_defaults(v.policy).items() if _plain_value(d)},
                **(
                    variant_options(v, self.policy_opt or [])
                    if variants
                    else checked_options(
                        v.policy, parse_policy_options(self.policy_opt or [], v.policy)
                    )
                ),
            }
            for v in runs
        }
        from corral.sim.provenance import policy_source

        sources = {v.label: policy_source(v.policy) for v in runs}
        record["policy_sources"] = {k: s for k, s in sources.items() if s is not None}
        return record

    def workload(self) -> tuple[JobTable, Cluster]:
        """Load the cluster and the trace, and say what was loaded."""
        from corral.model.cluster_specs import load_cluster
        from corral.perf.speeds import SpeedModel
        from corral.traces.loading import TraceOptions, load_trace
        from corral.traces.philly import PhillyFilter
        from corral.traces.rows import LoadReport

        if self.parquet:
            from corral.sim.output import PARQUET_HINT, parquet_available

            if not parquet_available():  # said before the runs, not after them
                raise CorralError(f"--parquet: {PARQUET_HINT}")
        with _user_errors():
            machines = load_cluster(
                self.cluster, rack_size=self.rack_size, scale=self.cluster_scale
            )
            options = TraceOptions(
                fmt=self.trace_format,
                durations=self.durations,
                skip_bad=self.skip_bad,
                philly=PhillyFilter(self.vc or None, self.start, self.end),
                max_jobs=self.max_jobs,
                seed=self.seed,
                job_types=self.job_types,
            )
            report = LoadReport(self.trace)
            jobs = load_trace(self.trace, machines.total_gpus, options, report)
            if self.profiles is not None:
                jobs = jobs.with_speeds(SpeedModel(self.measurements()))  # type: ignore[arg-type]
            if not self.trace_info:
                from corral.sim.provenance import trace_identity

                self.trace_info = trace_identity(self.trace, jobs, report)
        if len(jobs) == 0:
            raise CorralError(f"trace '{self.trace}' has no jobs after filtering")
        if report.skipped:
            err_console.print(
                f"[yellow]skipped {report.skipped} malformed row(s) of {report.rows}; "
                f"first: {report.first_problem}[/]",
                highlight=False,
                soft_wrap=True,
            )
        for note in report.notes:
            err_console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
        console.print(f"cluster  {machines.describe()}", highlight=False)
        if self.switch_cost.strip().lower() in MEASURED_MECHANISMS:
            console.print(f"switch   {self.switch_description()}", highlight=False)
        console.print(
            f"trace    {self.trace_info['name']}: {len(jobs)} jobs over "
            f"{jobs.span() / 86400:.1f} days, "
            f"offered load {jobs.offered_load(machines.total_gpus):.3f}",
            highlight=False,
        )
        return jobs, machines

    def switch_description(self) -> str:
        """The switch cost as given; a measured one with its figure and source."""
        from corral.perf.switching import default_profile_path, read_profile

        name = self.switch_cost.strip().lower()
        if name not in MEASURED_MECHANISMS:
            return self.switch_cost
        path = self.switch_profile or default_profile_path()
        with _user_errors():
            profile = read_profile(path)
        seconds = float(profile["mechanisms"][name])
        kind = "warm" if name == "measured" else "cold"
        return (
            f"{name}, {seconds * 1e3:.2f} ms ({kind} switch of {profile.get('model')} "
            f"on {profile.get('device')}, from {path})"
        )

    def spec(self, policy: str, variant: Variant | None = None) -> RunSpec:
        """One policy's run settings (a variant's: its label and own options)."""
        from corral.sim.run import RunSpec, parse_policy_options
        from corral.sim.variants import variant_options

        options = (
            variant_options(variant, self.policy_opt or [])
            if variant is not None
            else parse_policy_options(self.policy_opt or [], policy)
        )
        return RunSpec(
            policy=policy,
            label=None if variant is None or variant.label == policy else variant.label,
            placement=self.placement,
            seed=self.seed,
            switch_cost=self.switch_cost,
            switch_profile=self.switch_profile,
            cross_node=self.cross_node_factor,
            cross_rack=self.cross_rack_factor,
            check_invariants=self.check,
            policy_options=options,
            failure_rate=self.failure_rate,
            failure_rates=self.failure_rates,
            max_retries=self.max_retries,
            preset=self.preset,
            profiles=self.measurements(),
        )

    def measurements(self) -> ThroughputTable | None:
        """The user's throughput profiles merged over the bundled table (loaded once)."""
        if self.profiles is None:
            return None
        if self._profiles is None:
            from corral.perf.profiles import load_profiles

            with _user_errors():
                self._profiles = load_profiles(self.profiles)
        return self._profiles


def _run_options(
    trace: TraceOpt = "philly",
    trace_format: FormatOpt = None,
    durations: DurationsOpt = "trace",
    skip_bad: SkipOpt = False,
    vc: VcOpt = None,
    start: StartOpt = None,
    end: EndOpt = None,
    max_jobs: MaxJobsOpt = None,
    job_types: JobTypesOpt = None,
    cluster: ClusterOpt = "philly",
    cluster_scale: ScaleOpt = 1.0,
    rack_size: RackOpt = None,
    placement: PlacementOpt = None,
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
    """Give a command ``command(run: RunArgs, **own_options)`` the shared options.

    Typer reads a command's options from its signature, so the wrapper shows
    the command's own options followed by those of :func:`_run_options`, and
    hands the shared ones to the command as one :class:`RunArgs`.
    """
    shared = _evaluated_parameters(_run_options)
    own = [p for name, p in _evaluated_parameters(command).items() if name != "run"]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        invoked = dict(kwargs)
        run = RunArgs(**{name: kwargs.pop(name) for name in shared}, invoked=invoked)
        with json_on_stdout(bool(kwargs.get("as_json"))):
            command(run, **kwargs)

    params = [*own, *shared.values()]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def _run_one(
    jobs: JobTable, machines: Cluster, spec: RunSpec, show_progress: bool, out: Path, extra: dict
) -> dict[str, Any]:
    """Run one policy in this process (with a progress bar) and write its files."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from corral.sim.parallel import run_and_write

    if not show_progress:
        with _user_errors():
            return run_and_write(jobs, machines, spec, out, extra)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} arrivals"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(spec.policy, total=len(jobs))
        with _user_errors():
            return run_and_write(
                jobs,
                machines,
                spec,
                out,
                extra,
                lambda done, total: bar.update(task, completed=done),
            )


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
    run: RunArgs,
    policy: Annotated[str, typer.Option(help="policy name (see 'corral policies')")] = "fifo",
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/sim"),
    as_json: JsonOpt = False,
) -> None:
    """Replay a trace on a cluster under one policy; write jobs.csv and summary.json."""
    from corral.policies import policy_key

    name = policy_key(policy)
    _check_policy_names([name])
    _check_options(run, [name])
    jobs, machines = run.workload()
    record = run.provenance([name])
    extra = {"trace": run.trace_info["name"], "seed": run.seed, "provenance": record}
    summary = _run_one(jobs, machines, run.spec(name), run.progress, out, extra)
    _write_provenance(out, record, run.parquet)
    if as_json:
        print_json(summary)
        return
    console.print(_summary_table([summary]))
    console.print(f"wrote {out}/jobs.csv, {out}/summary.json", highlight=False)


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
    run: RunArgs,
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
    from corral.sim.parallel import RunTask, run_tasks
    from corral.sim.variants import parse_variants

    variants = parse_variants(policies)
    names = _check_variants(run, variants)
    from corral.sim.report import FORMATS, write_report

    if report_format not in FORMATS:
        raise CorralError(f"--format: '{report_format}' is not one of {', '.join(FORMATS)}")
    how = _runner(runner, address, parallel, "processes")
    jobs, machines = run.workload()
    record = run.provenance(names, variants=variants)
    base = {"trace": run.trace_info["name"], "seed": run.seed, "provenance": record}
    tasks = [
        RunTask(v.folder, 0, run.spec(v.policy, v), {**base, "run_dir": v.folder}) for v in variants
    ]
    summaries: list[dict[str, Any]] = []
    if how == "serial":
        from corral.sim.parallel import ERROR_LOG, failed

        for task in tasks:
            try:
                summary = _run_one(
                    jobs, machines, task.spec, run.progress, out / task.name, task.extra
                )
            except Exception as exc:  # one policy's crash leaves the others' results
                summary, log = failed(task.spec, task.name, exc)
                (out / task.name).mkdir(parents=True, exist_ok=True)
                (out / task.name / ERROR_LOG).write_text(log, encoding="utf-8")
            summaries.append(summary)
            _print_done(summary)
    else:
        with console.status(f"running {len(tasks)} policies ({how})") as status:
            finished: list[str] = []

            def done(task: RunTask, summary: dict[str, Any]) -> None:
                _print_done(summary)
                finished.append(task.name)
                status.update(f"{len(finished)} of {len(tasks)} policies done")

            with _user_errors():
                summaries = run_tasks(
                    tasks,
                    [(jobs, machines)],
                    out,
                    how,
                    parallel,
                    address,
                    on_done=done,
                    isolate=True,
                )
    from corral.sim.provenance import context_lines

    context = {
        **context_lines(record),
        "jobs": len(jobs),
        "cluster": machines.describe(),
        "offered load": f"{jobs.offered_load(machines.total_gpus):.3f}",
        "placement": run.placement or "policy default",
        "preset": run.preset or "none",
        "switch cost": run.switch_description(),
    }
    with _user_errors():
        path = write_report(out, summaries, context, report_format)
        _write_provenance(out, record, run.parquet)
    from corral.sim.parallel import FAILED

    crashed = [s for s in summaries if s.get("status") == FAILED]
    if as_json:
        print_json({"runs": summaries, "provenance": record})
    else:
        console.print(_summary_table([s for s in summaries if s.get("status") != FAILED]))
        also = f", {out}/report.md" if report_format == "both" else ""
        console.print(f"wrote {out}/comparison.csv{also} and {path}", highlight=False)
    if crashed:
        which = "; ".join(f"{s['policy']}: {s['error']} at {s['raised_at']}" for s in crashed)
        logs = ", ".join(str(out / s["log"]) for s in crashed)
        raise CorralError(
            f"{len(crashed)} of {len(summaries)} policies failed ({which}); tracebacks in "
            f"{logs}; the others' results are written"
        )


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
    run: RunArgs,
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

    from corral.sim.parallel import RunTask, run_tasks
    from corral.sim.sweep import Grid, write_sweep

    with _user_errors():
        spec = Grid.build(policies, loads, seeds, cluster_scales, grid, run.seed, run.cluster_scale)
    _check_variants(run, spec.variants)
    if len(spec.seeds) > 1 and not _seeded(run):
        err_console.print(
            f"[yellow]note:[/] the {len(spec.seeds)} seeds give the same runs here: "
            f"'{run.trace}' is replayed as it is, and nothing else is drawn at random "
            "(seeds vary synthetic traces, --job-types, --failure-rate and random "
            "placement); the spread shown will be 0",
            highlight=False,
            soft_wrap=True,
        )
    how = _runner(runner, address, parallel, "processes")
    points = spec.points()
    workloads: list[tuple[JobTable, Cluster]] = []
    index: dict[tuple[int, float, float | None], int] = {}
    for scale in spec.cluster_scales:
        for seed in spec.seeds:
            variant = dataclasses.replace(run, seed=seed, cluster_scale=scale)
            jobs, machines = variant.workload()
            run.trace_info = run.trace_info or variant.trace_info
            for load in spec.loads:
                with _user_errors():
                    table = jobs if load is None else jobs.at_load(load, machines.total_gpus)
                index[(seed, scale, load)] = len(workloads)
                workloads.append((table, machines))
    tasks = []
    from corral.sim.variants import Variant

    for point in points:
        entry = point.variant or Variant(point.policy, point.policy)
        settings = dataclasses.replace(run, seed=point.seed)
        jobs, machines = workloads[index[(point.seed, point.cluster_scale, point.load)]]
        extra = {
            "trace": run.trace_info["name"],
            "provenance": run.provenance([entry.policy], point.seed, [entry]),
            "seed": point.seed,
            "run_dir": point.name,
            "target_load": point.load,
            "cluster_scale": point.cluster_scale,
        }
        tasks.append(
            RunTask(
                point.name,
                index[(point.seed, point.cluster_scale, point.load)],
                settings.spec(entry.policy, entry),
                extra,
            )
        )
    console.print(
        f"sweep    {len(points)} runs: {len(spec.policies)} policies x {len(spec.loads)} "
        f"load(s) x {len(spec.seeds)} seed(s) x {len(spec.cluster_scales)} cluster size(s), "
        f"runner {how}",
        highlight=False,
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
        task_id = bar.add_task("runs", total=len(tasks))
        with _user_errors():
            summaries = run_tasks(
                tasks,
                workloads,
                out,
                how,
                parallel,
                address,
                on_done=lambda task, summary: bar.advance(task_id),
                isolate=True,
            )
    from corral.sim.parallel import FAILED
    from corral.sim.provenance import context_lines

    record = run.provenance(spec.policies, variants=spec.variants)
    record["seed"] = spec.seeds
    context = {
        **context_lines(record),
        "cluster": f"{run.cluster} at scales {', '.join(f'{c:g}' for c in spec.cluster_scales)}",
        "policies": ", ".join(spec.policies),
        "loads": ", ".join("trace" if x is None else f"{x:g}" for x in spec.loads),
        "seeds": ", ".join(str(x) for x in spec.seeds),
        "placement": run.placement or "policy default",
        "preset": run.preset or "none",
        "switch cost": run.switch_description(),
        "runner": how + (f" at {address}" if address else ""),
    }
    crashed = [(p, s) for p, s in zip(points, summaries, strict=True) if s.get("status") == FAILED]
    if crashed:  # (their rows in results.csv say so; the means leave them out)
        context["runs that failed"] = "; ".join(
            f"{p.name}: {s['error']} at {s['raised_at']}" for p, s in crashed
        )
    with _user_errors():
        path = write_sweep(out, points, summaries, context)
        _write_provenance(out, record, run.parquet)
    if as_json:
        rows = [{k: v for k, v in s.items() if k != "provenance"} for s in summaries]
        print_json({"runs": rows, "provenance": record})
    else:
        console.print(f"wrote {out}/results.csv, {out}/report.md and {path}", highlight=False)
    if crashed:
        first = crashed[0][1]
        raise CorralError(
            f"{len(crashed)} of {len(summaries)} runs failed (the first: {crashed[0][0].name}: "
            f"{first['error']} at {first['raised_at']}); tracebacks in each one's "
            f"{out}/<run>/error.log; the others' results are written"
        )


def _plain_value(value: Any) -> bool:
    """Whether a default can be written as JSON (not a placement object, say)."""
    if isinstance(value, list | tuple):
        return all(_plain_value(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


def _write_provenance(out: Path, record: dict[str, Any], parquet: bool = False) -> None:
    """``provenance.json`` in the output folder; with ``--parquet``, a Parquet copy of
    every CSV there carrying the record too."""
    from corral.sim.provenance import write_provenance

    write_provenance(out, record)
    if parquet:
        from corral.sim.output import write_parquet_copies

        write_parquet_copies(out, record)


def _seeded(run: RunArgs) -> bool:
    """Whether a run's seed changes anything: a generated trace, drawn job types,
    failures or a random placement."""
    trace = run.trace.strip().lower()
    return (
        trace.startswith(("synthetic", "gavel-synthetic"))
        or bool(run.job_types)
        or run.failure_rate > 0
        or bool(run.failure_rates)
        or (run.placement or "").strip().lower() == "random"
    )


def _check_variants(run: RunArgs, variants: list[Variant]) -> list[str]:
    """Every entry's policy known and its options valid, before anything runs; the
    policies' names."""
    from corral.sim.run import check_policy_options, option_pair
    from corral.sim.variants import variant_options

    names = list(dict.fromkeys(v.policy for v in variants))
    _check_policy_names(names)
    labels = {v.label for v in variants} - set(names)
    check_policy_options(  # (options addressed to a variant's label: checked below)
        [p for p in run.policy_opt or [] if option_pair(p)[0] not in labels], names
    )
    for v in variants:
        variant_options(v, run.policy_opt or [])
    return names


def _check_options(run: RunArgs, names: list[str]) -> None:
    from corral.sim.result import parse_failure_rates
    from corral.sim.run import check_policy_options

    check_policy_options(run.policy_opt or [], names)
    parse_failure_rates(run.failure_rates or "")  # refused before any run starts


def _check_policy_names(names: list[str]) -> None:
    from corral.policies import POLICIES

    if all(n in POLICIES for n in names):
        return  # gang policies only: the round planners need not be loaded to say so
    from corral.policies.rounds.planners import ROUND_PLANNERS

    known = [*POLICIES, *ROUND_PLANNERS]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CorralError(
            f"unknown policy '{unknown[0]}' (choose from {', '.join(known)}; see 'corral policies')"
        )


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
            _check_policy_names([key])
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
        with _user_errors():
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
    from corral.sim.provenance import code_identity
    from corral.sim.rerun import changed_policy_files, differences, recorded, rerun_args

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
    for change in changed_policy_files(record):
        err_console.print(f"[yellow]note:[/] {escape(change)}", highlight=False)
    console.print(f"rerun    corral {escape(shlex_join(args))}", highlight=False)
    done = subprocess.run([sys.executable, "-m", "corral.cli", *args], check=False)
    if done.returncode != 0:
        raise CorralError(f"the recorded command failed again (exit code {done.returncode})")
    found = differences(result, target)
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
        raise CorralError(
            f"the rerun differs: {len(found.differ)} file(s) differ and {len(found.missing)} "
            f"are missing, of {len(found.same) + len(found.differ) + len(found.missing)} "
            f"compared; it is in {target}"
        )
    console.print(
        f"identical: {len(found.same)} files compared (less wall-clock seconds and the "
        f"provenance); the rerun is in {target}",
        highlight=False,
    )


def shlex_join(words: list[str]) -> str:
    import shlex

    return shlex.join(words)
