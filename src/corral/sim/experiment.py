"""An experiment: policies (and their variants) over a grid of loads, seeds and
cluster sizes, run on one workload, with results as pandas DataFrames.

This is the one path every simulation of several runs takes: ``corral sim``,
``corral compare`` and ``corral sweep`` are a command line over it, and a
notebook or a script uses it directly::

    from corral import Experiment

    exp = Experiment(
        trace="philly",
        max_jobs=2000,
        policies=["fifo", "las[quantum=60,label=las-1min]", "las"],
        seeds=[0, 1, 2],
    )
    results = exp.run("runs/ablation")
    results.runs          # one row per run: the grid's columns, then its summary
    results.jobs          # every job of every run, with user and VC
    results.plot("runs/ablation/figures")

A run whose policy raises becomes an error row (its traceback in its folder's
``error.log``) and the others' results are written all the same: see
:attr:`Results.failures`. Each result folder records how to make it again
(``provenance.json``): from the command line, the command as typed; from
Python, the command that is equivalent to the experiment
(:meth:`Experiment.command`), so ``corral rerun`` remakes either.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from corral.errors import CorralError
from corral.sim.settings import RunSettings, Say, print_messages, user_errors
from corral.sim.sweep import GridPoint
from corral.sim.variants import Variant, parse_variants

if TYPE_CHECKING:
    from corral.model.cluster import Cluster
    from corral.model.jobs import JobTable
    from corral.sim.parallel import RunTask

LAYOUTS = ("run", "comparison", "sweep")
"""How a result folder is laid out: ``run`` (one run's files in the folder itself, as
``corral sim`` writes them), ``comparison`` (a folder per policy, ``comparison.csv``
and a report, as ``corral compare``), ``sweep`` (a folder per run, ``results.csv``,
``by_point.csv`` and a report of means over seeds, as ``corral sweep``)."""
COMMAND_OF = {"run": "sim", "comparison": "compare", "sweep": "sweep"}
GRID_COLUMNS = ["policy", "load", "seed", "cluster_scale", "run"]

Progress = Callable[[str, int, int], None]
"""``progress(run, arrivals_done, arrivals)``, called by the serial runner."""
Done = Callable[[str, dict[str, Any]], None]
"""``done(run, summary)``, called as each run ends (in the order they end)."""


@dataclass
class Experiment(RunSettings):
    """Policies over loads, seeds and cluster sizes on one workload.

    Every setting of :class:`~corral.sim.settings.RunSettings` (the trace, the
    cluster and the run's assumptions) is a field too, named as its command-line
    option.
    """

    policies: str | Sequence[str | type] = "fifo"
    """Policy entries, as ``--policies`` takes them (a list, or one comma-separated
    string): a name, ``file.py:Class``, or a variant with options and a label:
    ``las[quantum=60,label=las-1min]``; in a list, a policy class too (its file is
    what runs: a class defined in a notebook's cell is refused, saying so)."""
    loads: Sequence[float] | None = None
    """Offered loads to rescale the trace's arrivals to (None: its own arrivals)."""
    seeds: Sequence[int] | None = None
    """Seeds (None: ``seed`` alone)."""
    cluster_scales: Sequence[float] | None = None
    """Cluster sizes as scales of ``cluster`` (None: ``cluster_scale`` alone)."""
    runner: str | None = None
    """``processes`` (one worker process per core), ``serial`` or ``ray`` (None:
    ``ray`` where ``address`` is given, else ``processes``)."""
    parallel: int | None = None
    """Runs at once (None: one per core)."""
    address: str | None = None
    """An existing Ray cluster (implies the ray runner)."""
    layout: str | None = None
    """One of :data:`LAYOUTS` (None: ``comparison`` where each policy runs once on the
    trace's own arrivals, else ``sweep``)."""
    report_format: str = "html"
    """The comparison's report: ``html``, ``md`` or ``both``."""
    _command: str | None = field(default=None, init=False, repr=False)
    """The equivalent command, recorded as the result's (an experiment made in Python)."""
    _from_python: bool | None = field(default=None, init=False, repr=False)
    """Made in Python (its record is the equivalent command, made again for each run's
    folder) rather than by the command line (whose own words are recorded)."""

    def variants(self) -> list[Variant]:
        """The policy entries, each with its label and own options (a policy class is
        named by its file, ``file.py:Class``, so that every runner and ``corral
        rerun`` can load it)."""
        if isinstance(self.policies, str):
            return parse_variants(self.policies)
        return parse_variants(",".join(policy_name(p) for p in self.policies))

    def points(self) -> list[GridPoint]:
        """Every run of the experiment: each variant at each load, seed and cluster size."""
        from corral.sim.sweep import Grid

        variants = self.variants()
        grid = Grid(
            policies=[v.label for v in variants],
            variants=variants,
            loads=[*_positive(self.loads, "loads")] if self.loads is not None else [None],
            seeds=_seeds(self.seeds) if self.seeds is not None else [self.seed],
            cluster_scales=(
                _positive(self.cluster_scales, "cluster_scales")
                if self.cluster_scales is not None
                else [self.cluster_scale]
            ),
        )
        return grid.points()

    def chosen_layout(self) -> str:
        points, variants = self.points(), self.variants()
        one_point = len(points) == len(variants) and self.loads is None
        layout = self.layout or ("comparison" if one_point else "sweep")
        if layout not in LAYOUTS:
            raise CorralError(f"layout: '{layout}' is not one of {', '.join(LAYOUTS)}")
        if layout == "run" and len(points) != 1:
            raise CorralError(f"layout 'run' holds one run; this experiment has {len(points)}")
        if layout in ("run", "comparison") and self.loads is not None:
            raise CorralError(f"layout '{layout}' replays the trace's own arrivals (no loads)")
        if layout == "comparison" and len(points) != len(variants):
            raise CorralError(
                "layout 'comparison' runs each policy once (one seed and cluster size)"
            )
        return layout

    def command(self, out: str | Path) -> str:
        """The ``corral`` command that makes this experiment's result in ``out``."""
        layout = self.chosen_layout()
        words = ["corral", COMMAND_OF[layout]]
        entries = [policy_entry(v) for v in self.variants()]
        if layout == "run":
            (variant,) = self.variants()
            words += ["--policy", variant.policy]
            opts = [f"{variant.policy}.{k}={v}" for k, v in variant.options.items()]
            if opts:
                words += [w for o in opts for w in ("--policy-opt", o)]
        else:
            words += ["--policies", ",".join(entries)]
        if layout == "sweep":
            if self.loads is not None:
                words += ["--loads", ",".join(f"{x:g}" for x in _positive(self.loads, "loads"))]
            if self.seeds is not None:
                words += ["--seeds", ",".join(str(s) for s in _seeds(self.seeds))]
            if self.cluster_scales is not None:
                scales = _positive(self.cluster_scales, "cluster_scales")
                words += ["--cluster-scales", ",".join(f"{x:g}" for x in scales)]
        settings = self._for_point(self.points()[0]) if layout != "sweep" else self
        words += settings.option_words(leave_out=("progress",))
        if layout != "run":
            if self.address:
                words += ["--address", self.address]
            elif self.runner not in (None, "processes"):
                words += ["--runner", self.runner]
            if self.parallel is not None:
                words += ["--parallel", str(self.parallel)]
        if layout == "comparison" and self.report_format != "html":
            words += ["--format", self.report_format]
        return shlex.join([*words, "--out", str(out)])

    def run(
        self,
        out: str | Path | None = None,
        *,
        say: Say = print_messages,
        progress: Progress | None = None,
        done: Done | None = None,
    ) -> Results:
        """Run every point; the results (also written to ``out``: a temporary folder,
        removed with the results, when None).

        Every entry and option is checked before anything runs; a run whose policy
        raises leaves an error row and the others go on (:attr:`Results.failures`).
        """
        from corral.sim.parallel import FAILED, RUNNERS, run_tasks
        from corral.sim.provenance import context_lines

        variants = self.variants()
        points = self.points()
        layout = self.chosen_layout()
        names = self.check_variants(variants)
        runner = (self.runner or ("ray" if self.address else "processes")).strip().lower()
        if self.address and runner != "ray":
            raise CorralError("an address is a Ray cluster's: it needs the ray runner")
        if runner not in RUNNERS:
            raise CorralError(f"runner: '{runner}' is not one of {', '.join(RUNNERS)}")
        if runner == "processes" and self.parallel == 1:
            runner = "serial"
        if layout == "comparison":
            from corral.sim.report import FORMATS

            if self.report_format not in FORMATS:
                raise CorralError(
                    f"--format: '{self.report_format}' is not one of {', '.join(FORMATS)}"
                )
        seeds = list(dict.fromkeys(p.seed for p in points))
        if len(seeds) > 1 and not self.seeded():
            say(
                "note",
                f"the {len(seeds)} seeds give the same runs here: '{self.trace}' is replayed "
                "as it is, and nothing else is drawn at random (seeds vary synthetic traces, "
                "--workload-sample, --job-types, --failure-rate and random placement); the "
                "spread shown will be 0",
            )
        temporary = out is None
        folder = Path(tempfile.mkdtemp(prefix="corral-experiment-")) if out is None else Path(out)
        if self._from_python is None:
            self._from_python = not self.invoked
        if self._from_python:  # recorded as the command that is equivalent, for this folder
            self.invoked = {**self.settings(), **self._own_options(layout, folder)}
            self._command = self.command(folder)
        workloads, index = self._workloads(points, say)
        first = self._for_point(points[0])
        record = self._provenance(first, names, variants)
        if layout == "sweep":
            record["seed"] = seeds
        tasks = [self._task(point, layout, index, record) for point in points]
        if layout == "sweep":
            say(
                "info",
                f"sweep    {len(points)} runs: {len(variants)} policies x "
                f"{len({p.load for p in points})} load(s) x {len(seeds)} seed(s) x "
                f"{len({p.cluster_scale for p in points})} cluster size(s), runner {runner}",
            )
        by_name = {task.name: point for task, point in zip(tasks, points, strict=True)}
        with user_errors():
            summaries = run_tasks(
                tasks,
                workloads,
                folder,
                runner,
                self.parallel,
                self.address,
                on_done=(lambda task, s: done(by_name[task.name].policy, s)) if done else None,
                isolate=True,
                progress=(
                    (lambda task: lambda n, total: progress(by_name[task.name].policy, n, total))
                    if progress is not None
                    else None
                ),
            )
        context = {**context_lines(record), **self._context(points, layout, runner, workloads)}
        crashed = [
            (p, s) for p, s in zip(points, summaries, strict=True) if s.get("status") == FAILED
        ]
        with user_errors():
            report = self._write(folder, layout, points, summaries, context, crashed)
            self._write_provenance(folder, record)
        results = Results(folder, layout, points, summaries, record, report)
        if temporary:
            weakref.finalize(results, shutil.rmtree, folder, True)
        return results

    def simulate(self, say: Say | None = None) -> Any:
        """Run the experiment's one point in this process and return the engine's own
        result (a :class:`~corral.sim.result.SimResult`, whose ``state`` holds every
        job's figures; a round planner's ``RoundResult``), for analyses beyond what a
        result's files hold. Nothing is written. The validation scripts run this way,
        so their settings are read exactly as ``corral sim`` reads them."""
        from corral.policies.rounds.planners import ROUND_PLANNERS
        from corral.sim.run import simulate, simulate_rounds

        points = self.points()
        if len(points) != 1:
            raise CorralError(f"simulate() runs one point; this experiment has {len(points)}")
        (point,) = points
        self.check_variants(self.variants())
        settings = self._for_point(point)
        jobs, machines = settings.workload(say or (lambda kind, text: None))
        if point.load is not None:
            jobs = jobs.at_load(point.load, machines.total_gpus)
        entry = point.variant or Variant(point.policy, point.policy)
        spec = settings.spec(entry.policy, entry)
        if entry.policy in ROUND_PLANNERS:
            return simulate_rounds(jobs, machines, spec)
        return simulate(jobs, machines, spec)

    # -- the parts of a run -------------------------------------------------------

    def _for_point(self, point: GridPoint) -> RunSettings:
        """The settings one point runs with (its seed and cluster size)."""
        base = {name: getattr(self, name) for name in RunSettings.names()}
        made = RunSettings(**{**base, "seed": point.seed, "cluster_scale": point.cluster_scale})
        made.invoked, made.trace_info = self.invoked, self.trace_info
        made._profiles = self._profiles
        return made

    def _own_options(self, layout: str, out: Path) -> dict[str, Any]:
        """The command's own options as provenance records them (from Python: the
        equivalent command's)."""
        own: dict[str, Any] = {"out": str(out)}
        if layout == "run":
            (variant,) = self.variants()
            own["policy"] = variant.policy
            return own
        own["policies"] = ",".join(policy_entry(v) for v in self.variants())
        own |= {"parallel": self.parallel, "runner": self.runner, "address": self.address}
        if layout == "comparison":
            own["report_format"] = self.report_format
        else:
            own |= {
                "loads": None if self.loads is None else ",".join(f"{x:g}" for x in self.loads),
                "seeds": None if self.seeds is None else ",".join(str(s) for s in self.seeds),
                "cluster_scales": None
                if self.cluster_scales is None
                else ",".join(f"{x:g}" for x in self.cluster_scales),
                "grid": None,
            }
        return own

    def _workloads(
        self, points: list[GridPoint], say: Say
    ) -> tuple[list[tuple[JobTable, Cluster]], dict[tuple[int, float, float | None], int]]:
        """Each (seed, cluster size) loaded once, each load derived from it."""
        workloads: list[tuple[JobTable, Cluster]] = []
        index: dict[tuple[int, float, float | None], int] = {}
        loaded: dict[tuple[int, float], tuple[JobTable, Cluster]] = {}
        for point in points:
            key = (point.seed, point.cluster_scale, point.load)
            if key in index:
                continue
            base = (point.seed, point.cluster_scale)
            if base not in loaded:
                settings = self._for_point(point)
                loaded[base] = settings.workload(say)
                self.trace_info = self.trace_info or settings.trace_info
            jobs, machines = loaded[base]
            with user_errors():
                table = (
                    jobs if point.load is None else jobs.at_load(point.load, machines.total_gpus)
                )
            index[key] = len(workloads)
            workloads.append((table, machines))
        return workloads, index

    def _task(
        self,
        point: GridPoint,
        layout: str,
        index: dict[tuple[int, float, float | None], int],
        record: dict[str, Any],
    ) -> RunTask:
        """One point as a task: its folder, its workload, its spec, what its summary
        records (a sweep's run: its own policy and seed)."""
        from corral.sim.parallel import RunTask

        entry = point.variant or Variant(point.policy, point.policy)
        settings = self._for_point(point)
        name = {"run": "", "comparison": entry.folder, "sweep": point.name}[layout]
        if layout == "sweep":
            record = self._provenance(settings, [entry.policy], [entry])
        extra: dict[str, Any] = {
            "trace": self.trace_info["name"],
            "seed": point.seed,
            "provenance": record,
        }
        if layout != "run":
            extra["run_dir"] = name
        if layout == "sweep":
            extra |= {"target_load": point.load, "cluster_scale": point.cluster_scale}
        spec = settings.spec(entry.policy, entry)
        return RunTask(name, index[(point.seed, point.cluster_scale, point.load)], spec, extra)

    def _provenance(
        self, settings: RunSettings, names: list[str], variants: list[Variant]
    ) -> dict[str, Any]:
        record = settings.provenance(names, variants=variants)
        if self._command is not None:
            record["command"] = self._command
        return record

    def _context(
        self,
        points: list[GridPoint],
        layout: str,
        runner: str,
        workloads: list[tuple[JobTable, Cluster]],
    ) -> dict[str, str]:
        """The report's settings list, beyond the provenance's lines."""
        common = {
            "placement": self.placement or "policy default",
            "preset": self.preset or "none",
            "switch cost": self.switch_description(),
        }
        if layout != "sweep":
            jobs, machines = workloads[0]
            return {
                "jobs": str(len(jobs)),
                "cluster": machines.describe(),
                "offered load": f"{jobs.offered_load(machines.total_gpus):.3f}",
                **common,
            }
        scales = list(dict.fromkeys(p.cluster_scale for p in points))
        loads = list(dict.fromkeys(p.load for p in points))
        return {
            "cluster": f"{self.cluster} at scales {', '.join(f'{c:g}' for c in scales)}",
            "policies": ", ".join(dict.fromkeys(p.policy for p in points)),
            "loads": ", ".join("trace" if x is None else f"{x:g}" for x in loads),
            "seeds": ", ".join(str(x) for x in dict.fromkeys(p.seed for p in points)),
            **common,
            "runner": runner + (f" at {self.address}" if self.address else ""),
        }

    def _write(
        self,
        folder: Path,
        layout: str,
        points: list[GridPoint],
        summaries: list[dict[str, Any]],
        context: dict[str, Any],
        crashed: list[tuple[GridPoint, dict[str, Any]]],
    ) -> Path | None:
        """The layout's tables and report; the report's path (None for one run)."""
        if layout == "run":
            return None
        if layout == "comparison":
            from corral.sim.report import write_report

            return write_report(folder, summaries, context, self.report_format)
        from corral.sim.sweep import write_sweep

        if crashed:  # (their rows in results.csv say so; the means leave them out)
            context["runs that failed"] = "; ".join(
                f"{p.name}: {s['error']} at {s['raised_at']}" for p, s in crashed
            )
        return write_sweep(folder, points, summaries, context)

    def _write_provenance(self, folder: Path, record: dict[str, Any]) -> None:
        """``provenance.json``; with ``parquet``, a Parquet copy of every CSV carrying it."""
        from corral.sim.provenance import write_provenance
        from corral.sim.rerun import keep_sources

        write_provenance(folder, record)
        keep_sources(folder, record)  # (so it can be made again after an edit)
        if self.parquet:
            from corral.sim.output import write_parquet_copies

            write_parquet_copies(folder, record)


@dataclass
class Results:
    """What an :class:`Experiment` made: its summaries, and its files read on demand."""

    out: Path
    """The folder the result is in."""
    layout: str
    points: list[GridPoint]
    summaries: list[dict[str, Any]]
    """One per run, in the points' order (a failed run's is its error row)."""
    provenance: dict[str, Any]
    report: Path | None
    """The HTML (or Markdown) report, where the layout has one."""
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The error rows of runs whose policy raised (status, error, raised_at, log)."""
        from corral.sim.parallel import FAILED

        return [s for s in self.summaries if s.get("status") == FAILED]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def runs(self) -> pd.DataFrame:
        """One row per run: policy (its label), load, seed, cluster_scale and run
        (its folder), then every key of its summary (nested keys dotted)."""
        if "runs" not in self._cache:
            from corral.sim.sweep import results_frame

            runs = results_frame(self.points, self.summaries)
            runs["run"] = [str(self.run_folder(p).relative_to(self.out)) for p in self.points]
            self._cache["runs"] = runs
        return self._cache["runs"]

    @property
    def by_point(self) -> pd.DataFrame:
        """Means, sample deviations and counts over seeds, per policy, load and size
        (failed runs left out)."""
        from corral.sim.sweep import ended_runs, over_seeds

        return over_seeds(ended_runs(self.runs))

    @property
    def jobs(self) -> pd.DataFrame:
        """Every job of every run that ended (``jobs.csv``: user and VC included),
        the grid's columns first."""
        return self._gathered("jobs", "jobs.csv")

    @property
    def timelines(self) -> pd.DataFrame:
        """Every run's timeline (``timeline.csv``), the grid's columns first."""
        return self._gathered("timelines", "timeline.csv")

    def run_folder(self, point: GridPoint) -> Path:
        if self.layout == "run":
            return self.out
        if self.layout == "comparison":
            return self.out / (point.variant.folder if point.variant else point.policy)
        return self.out / point.name

    def _gathered(self, key: str, file: str) -> pd.DataFrame:
        if key not in self._cache:
            frames = []
            for point, summary in zip(self.points, self.summaries, strict=True):
                path = self.run_folder(point) / file
                if summary.get("status") is not None or not path.exists():
                    continue
                frame = pd.read_csv(path)
                for column, value in reversed(_grid_values(point)):
                    frame.insert(0, column, value)
                frames.append(frame)
            self._cache[key] = (
                pd.concat(frames, ignore_index=True)
                if frames
                else pd.DataFrame(columns=GRID_COLUMNS)
            )
        return self._cache[key]

    def plot(
        self,
        folder: str | Path | None = None,
        formats: Iterable[str] = ("pdf", "svg", "png"),
        width: str = "single",
        policies: Iterable[str] | None = None,
        metrics: Iterable[str] | None = None,
        scale: str = "auto",
        normalise: str | None = None,
    ) -> list[Path]:
        """The result's figures as files (see :mod:`corral.sim.figures`): of these
        ``policies`` and ``metrics`` (None: all), the value axis ``auto``, ``linear``
        or ``log``, each policy's metric over the ``normalise`` policy's where given
        (as ``corral plot``'s options)."""
        from corral.sim.figures import Drawing, plot_result

        drawing = Drawing(
            policies=list(policies) if policies is not None else None,
            metrics=list(metrics) if metrics is not None else None,
            scale=scale,
            normalise=normalise,
        )
        where = Path(folder) if folder else None
        return plot_result(self.out, where, tuple(formats), width, drawing=drawing)


def _grid_values(point: GridPoint) -> list[tuple[str, Any]]:
    return [
        ("policy", point.policy),
        ("load", point.load),
        ("seed", point.seed),
        ("cluster_scale", point.cluster_scale),
    ]


def policy_name(policy: Any) -> str:
    """A ``policies`` entry as ``--policies`` takes it: a string as it is; a policy class
    as ``file.py:Class`` (its file relative to here where it is below), which worker
    processes and ``corral rerun`` load as any policy file; a policy object as its
    class with the options it was made with (:func:`instance_entry`). A class with no
    file of its own (defined in a notebook's cell) is refused, saying what to do."""
    if isinstance(policy, str):
        return policy
    from corral.policies.base import Policy

    if isinstance(policy, Policy):
        return instance_entry(policy, policy_name(type(policy)))
    if not isinstance(policy, type):
        raise CorralError(
            f"policies: {policy!r} is neither a policy's name nor a policy class (give "
            "'las', 'las[quantum=60]', 'file.py:Class' or the class itself)"
        )
    module = sys.modules.get(policy.__module__)
    where = getattr(module, "__file__", None)
    if not where or policy.__module__ == "__main__":
        raise CorralError(
            f"policies: {policy.__name__} has no file of its own (a class defined in a "
            "notebook, or in the script being run, cannot be loaded by the worker "
            "processes or by corral rerun): put it in a file of its own, import it from "
            f"there, or give 'file.py:{policy.__name__}'"
        )
    path = Path(where).resolve()
    try:
        shown = path.relative_to(Path.cwd())
    except ValueError:
        shown = path
    return f"{shown}:{policy.__qualname__}"


def instance_entry(policy: Any, where: str) -> str:
    """A policy object as ``--policies`` takes it: its class's ``file.py:Class`` with, in
    brackets, each option it was made with that differs from the option's default
    (read back from the attribute of the option's name, as policies keep them). An
    option that cannot be read back, or is not a number, text or truth value (a
    list: brackets cannot hold it), is refused, saying what to give instead."""
    import inspect

    from corral.policies import policy_options

    cls = type(policy)
    given: list[str] = []
    try:  # (what each option comes to when not given: a default of None may mean one)
        fresh: Any = cls()
    except Exception:
        fresh = None
    for name, default in policy_options(cls).items():
        if not hasattr(policy, name):
            raise CorralError(
                f"policies: a {cls.__name__} object keeps no attribute '{name}', so the "
                f"options it was made with cannot be read back; give '{where}[{name}=...]' "
                "or the class"
            )
        value = getattr(policy, name)
        if fresh is not None and hasattr(fresh, name):
            default = getattr(fresh, name)
        if default is not inspect.Parameter.empty and value == default:
            continue
        if isinstance(value, bool | int | float | str) and not (
            isinstance(value, str) and any(c in value for c in ",[]=")
        ):
            given.append(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}")
            continue
        raise CorralError(
            f"policies: {cls.__name__}'s option {name}={value!r} cannot be written in an "
            f"entry's brackets; give '{where}' with policy_opt=['{name}=...']"
        )
    return f"{where}[{','.join(given)}]" if given else where


def policy_entry(variant: Variant) -> str:
    """A variant as a ``--policies`` entry (its options and label in brackets; a plain
    policy as its name)."""
    from corral.sim.variants import default_label

    options = [f"{k}={v}" for k, v in variant.options.items()]
    if variant.label != default_label(variant.policy, variant.options):
        options.append(f"label={variant.label}")
    return f"{variant.policy}[{','.join(options)}]" if options else variant.policy


def _positive(values: Iterable[float], what: str) -> list[float]:
    from corral.sim.sweep import parse_numbers

    return parse_numbers(",".join(str(v) for v in values), what)


def _seeds(values: Iterable[int]) -> list[int]:
    from corral.sim.sweep import parse_seeds

    return parse_seeds(",".join(str(v) for v in values))


def experiment_from(settings: RunSettings, **own: Any) -> Experiment:
    """An experiment from the command line's settings and the command's own options."""
    made = Experiment(**settings.settings(), **own)
    made.invoked = settings.invoked
    return made


__all__ = ["LAYOUTS", "Experiment", "Results", "experiment_from"]
