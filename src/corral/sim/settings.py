"""How a simulation is set up: the workload (trace and cluster) and the run's
assumptions, as one record that ``corral sim``, ``compare``, ``sweep`` and
:class:`corral.Experiment` share.

Each field is named and defaulted as the command line's option of that name
(``trace`` is ``--trace``, ``failure_rate`` is ``--failure-rate``), so a
setting means the same wherever it is given, and an experiment made in Python
can be written back as the command that makes it again (see
:meth:`RunSettings.option_words`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.errors import CorralError
from corral.perf.switching import MEASURED_MECHANISMS

if TYPE_CHECKING:
    from corral.model.cluster import Cluster
    from corral.model.jobs import JobTable
    from corral.perf.throughputs import ThroughputTable
    from corral.sim.run import RunSpec
    from corral.sim.variants import Variant

Say = Callable[[str, str], None]
"""Where an experiment's messages go: ``say(kind, text)``, ``kind`` one of
``"info"`` (what was loaded), ``"note"`` (worth reading) and ``"warning"``."""


def print_messages(kind: str, text: str) -> None:
    """The default :data:`Say`: information on standard output, the rest on standard error."""
    import sys

    if kind == "info":
        print(text)
    else:
        print(f"{kind}: {text}", file=sys.stderr)


@contextmanager
def user_errors() -> Iterator[None]:
    """File-system errors are input errors too: one line naming the file."""
    try:
        yield
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise CorralError(f"{exc.filename}: {exc.strerror}") from None


def plain_value(value: Any) -> bool:
    """Whether a default can be written as JSON (not a placement object, say)."""
    if isinstance(value, list | tuple):
        return all(plain_value(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


@dataclass
class RunSettings:
    """The workload and the assumptions of a run; defaults as the command line's."""

    trace: str = "philly"
    """'philly', 'tiresias-60', 'synthetic[:jobs=N,load=X]' or a trace file."""
    trace_format: str | None = None
    durations: str = "trace"
    skip_bad: bool = False
    vc: list[str] | None = None
    start: str | None = None
    end: str | None = None
    max_jobs: int | None = None
    workload_sample: str | None = None
    """Draw the workload from the trace by each seed: ``window`` (``max_jobs``
    consecutive jobs from an offset the seed draws) or ``bootstrap`` (jobs and gaps
    drawn with replacement); None: the trace as it is (its first ``max_jobs``)."""
    job_types: str | None = None
    cluster: str = "philly"
    """A preset, a YAML spec or a Tiresias cluster CSV."""
    cluster_scale: float = 1.0
    rack_size: int | None = None
    placement: str | None = None
    admission: str | None = None
    """An admission rule: ``file.py:Class[key=value,...]`` (see corral.policies.admission)."""
    preset: str | None = None
    failure_rate: float = 0.0
    failure_rates: str | None = None
    max_retries: int = 3
    seed: int = 0
    switch_cost: str = "kill-restart"
    switch_profile: Path | None = None
    cross_node_factor: float = 0.8
    cross_rack_factor: float = 0.7
    policy_opt: list[str] | None = None
    """Policy options as on the command line: ``key=value``, ``policy.key=value`` or
    ``label.key=value``."""
    profiles: Path | None = None
    check: bool = False
    progress: bool = True
    parquet: bool = False
    _profiles: ThroughputTable | None = field(default=None, init=False, repr=False)
    invoked: dict[str, Any] = field(default_factory=dict, repr=False)
    """Every option of the command as run, defaults too (its provenance)."""
    trace_info: dict[str, Any] = field(default_factory=dict, repr=False)
    """The trace's name, counts and checksum, once loaded."""

    @classmethod
    def names(cls) -> list[str]:
        """The settings a user gives (each a command-line option of that name)."""
        return [f.name for f in fields(cls) if f.init and f.name not in ("invoked", "trace_info")]

    def settings(self) -> dict[str, Any]:
        """Every setting by name, as given or defaulted."""
        return {name: getattr(self, name) for name in RunSettings.names()}

    def option_words(self, leave_out: tuple[str, ...] = ()) -> list[str]:
        """The command-line options that give these settings (those away from their
        defaults, in declaration order)."""
        words: list[str] = []
        defaults = RunSettings()
        for name in RunSettings.names():
            value, default = getattr(self, name), getattr(defaults, name)
            if name in leave_out or value == default:
                continue
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                words.append(flag if value else "--no-" + name.replace("_", "-"))
            elif isinstance(value, list):
                for item in value:
                    words += [flag, str(item)]
            else:
                words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return words

    def provenance(
        self, policies: list[str], seed: int | None = None, variants: list[Variant] | None = None
    ) -> dict[str, Any]:
        """How a result of these settings was made (see :mod:`corral.sim.provenance`),
        with each policy's (or variant's, by its label) options as run: its defaults
        and the ones given, typed as the policy declares them."""
        from corral.policies import checked_options, option_defaults
        from corral.sim.provenance import policy_source, provenance
        from corral.sim.run import parse_policy_options
        from corral.sim.variants import Variant, variant_options

        invoked = self.invoked or self.settings()
        record = provenance(invoked, self.trace_info, self.seed if seed is None else seed)
        runs = variants or [Variant(name, name) for name in policies]
        record["policy_options"] = {
            v.label: {
                **{k: d for k, d in option_defaults(v.policy).items() if plain_value(d)},
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
        sources = {v.label: policy_source(v.policy) for v in runs}
        record["policy_sources"] = {k: s for k, s in sources.items() if s is not None}
        for kind in ("placement", "admission"):  # (rules of one's own: their source too)
            given = getattr(self, kind)
            if given and ":" in given:
                record[f"{kind}_source"] = plugin_source(given)
        return record

    def workload(self, say: Say = print_messages) -> tuple[JobTable, Cluster]:
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
        with user_errors():
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
                sample=self.workload_sample,
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
            say(
                "warning",
                f"skipped {report.skipped} malformed row(s) of {report.rows}; "
                f"first: {report.first_problem}",
            )
        for note in report.notes:
            say("note", note)
        say("info", f"cluster  {machines.describe()}")
        if self.switch_cost.strip().lower() in MEASURED_MECHANISMS:
            say("info", f"switch   {self.switch_description()}")
        say(
            "info",
            f"trace    {self.trace_info['name']}: {len(jobs)} jobs over "
            f"{jobs.span() / 86400:.1f} days, "
            f"offered load {jobs.offered_load(machines.total_gpus):.3f}",
        )
        return jobs, machines

    def switch_description(self) -> str:
        """The switch cost as given; a measured one with its figure and source."""
        from corral.perf.switching import default_profile_path, read_profile

        name = self.switch_cost.strip().lower()
        if name not in MEASURED_MECHANISMS:
            return self.switch_cost
        path = self.switch_profile or default_profile_path()
        with user_errors():
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
            admission=self.admission,
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

            with user_errors():
                self._profiles = load_profiles(self.profiles)
        return self._profiles

    def seeded(self) -> bool:
        """Whether a run's seed changes anything: a generated trace, a workload drawn
        from the trace, drawn job types, failures or a random placement."""
        trace = self.trace.strip().lower()
        return (
            trace.startswith(("synthetic", "gavel-synthetic"))
            or self.workload_sample is not None
            or bool(self.job_types)
            or self.failure_rate > 0
            or bool(self.failure_rates)
            or (self.placement or "").strip().lower() == "random"
        )

    def check_variants(self, variants: list[Variant]) -> list[str]:
        """Every entry's policy known and its options valid, before anything runs; the
        policies' names."""
        from corral.sim.result import parse_failure_rates
        from corral.sim.run import check_policy_options, option_pair
        from corral.sim.variants import variant_options

        names = list(dict.fromkeys(v.policy for v in variants))
        check_policy_names(names)
        labels = {v.label for v in variants} - set(names)
        check_policy_options(  # (options addressed to a variant's label: checked below)
            [p for p in self.policy_opt or [] if option_pair(p)[0] not in labels], names
        )
        for v in variants:
            variant_options(v, self.policy_opt or [])
        parse_failure_rates(self.failure_rates or "")  # refused before any run starts
        if not 0.0 <= self.failure_rate < 1.0:  # (else each run would fail of it)
            rate = self.failure_rate
            raise CorralError(f"--failure-rate: a failure rate is in [0, 1), not {rate}")
        if self.max_retries < 0:
            raise CorralError(f"--max-retries: give 0 or more, not {self.max_retries}")
        if self.admission is not None:  # (its class and options, checked before any run)
            from corral.policies.admission import make_admission
            from corral.policies.rounds.planners import ROUND_PLANNERS

            rounds = [n for n in names if n in ROUND_PLANNERS]
            if rounds:
                raise CorralError(f"policy '{rounds[0]}' plans rounds: it takes no --admission")

            make_admission(self.admission)
        if self.placement is not None:
            from corral.placement.registry import make_placement

            make_placement(self.placement, self.seed)
        return names


def plugin_source(spec: str) -> dict[str, str] | None:
    """A rule of one's own (``file.py:Class[...]``) by its file's name and SHA-256, never
    its path; None for a module's class (its package's version says which)."""
    from corral.sim.provenance import file_identity

    where = spec.split("[", 1)[0].rpartition(":")[0]
    path = Path(where).expanduser()
    if not where.endswith(".py") or not path.is_file():
        return None
    return file_identity(path)


def check_policy_names(names: list[str]) -> None:
    """Each name a known policy (a built-in, a round planner, or a ``file.py:Class``,
    loaded here so that its own errors are said before anything runs)."""
    from corral.policies import POLICIES, unknown_policy

    if all(n in POLICIES for n in names):
        return  # gang policies only: the round planners need not be loaded to say so
    from corral.policies.rounds.planners import ROUND_PLANNERS

    known = [*POLICIES, *ROUND_PLANNERS]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CorralError(unknown_policy(unknown[0], known))
