"""Resolving a ``--trace`` value: files in any format, bundled traces, generators.

``--trace`` takes ``philly`` (the bundled trace), ``tiresias-60`` (Tiresias'
60-job trace, bundled), ``pollux-1`` .. ``pollux-8`` (Pollux's 160-job
workloads, bundled; ``pollux-N@0.5``, ``@1.5`` and ``@2.0`` the same workloads at
another job load, as its artifact ships them), ``synthetic[:jobs=N,load=X]``,
``gavel-synthetic[:jobs=N,rate=R,...]`` (Gavel's typed workload) or a path;
a file's format is recognised from its first line, and ``--trace-format``
overrides that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from corral.data import data_path
from corral.errors import CorralError, InputError
from corral.model.jobs import JobTable
from corral.traces.canonical import load_canonical
from corral.traces.formats import FORMATS
from corral.traces.gavel import LAYOUTS, layout_of, load_gavel
from corral.traces.gavel_synthetic import GavelWorkload, generate_gavel
from corral.traces.helios import is_helios_header, load_helios
from corral.traces.job_types import assign_job_types
from corral.traces.pai import JOB_FIELDS, TASK_FIELDS, load_pai, pai_files
from corral.traces.philly import PHILLY_HEADER, PhillyFilter, load_philly
from corral.traces.philly_log import is_philly_log, load_philly_log
from corral.traces.pollux import POLLUX_COLUMNS, load_pollux
from corral.traces.rows import LoadReport
from corral.traces.synthetic import SyntheticSpec, generate
from corral.traces.tiresias import load_tiresias


@dataclass
class TraceOptions:
    fmt: str | None = None
    skip_bad: bool = False
    philly: PhillyFilter = field(default_factory=PhillyFilter)
    max_jobs: int | None = None
    seed: int = 0
    job_types: str | None = None
    """Give generic jobs measured types (see :mod:`corral.traces.job_types`)."""
    durations: str = "trace"
    """Shockwave's traces: the trace's own durations, or ``throughput`` (steps at
    Gavel's measured V100 throughput; see :mod:`corral.traces.gavel`)."""
    sample: str | None = None
    """Draw the workload from the trace by the seed: ``window`` or ``bootstrap`` (see
    :mod:`corral.traces.sampling`; None: the trace's first ``max_jobs`` jobs)."""


def detect_format(path: str) -> str:
    """The format of a trace file, from its first line (or its name, for PAI's)."""
    if Path(path).is_dir() or Path(path).name in ("pai_job_table.csv", "pai_task_table.csv"):
        if pai_files(path) is not None:
            return "pai"
        raise InputError(path, None, None, "a folder is a trace only when it holds PAI's tables")
    opener = open
    if path.endswith(".gz"):
        import gzip

        opener = gzip.open  # type: ignore[assignment]
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            start = fh.read(4096)  # a JSON log may be one line of a gigabyte
    except UnicodeDecodeError:
        raise InputError(path, 1, None, "not a text file") from None
    if start.lstrip().startswith("["):
        if is_philly_log(start):
            return "philly-log"
        raise InputError(path, 1, None, "a JSON trace must be Philly's cluster_job_log")
    first = start.split("\n", 1)[0].rstrip("\r")
    if not first.strip():
        raise InputError(path, 1, None, "the first line is empty; cannot tell the trace format")
    header = [c.strip() for c in first.split(",")]
    if header == PHILLY_HEADER:
        return "philly"
    if header == POLLUX_COLUMNS:
        return "pollux"
    if is_helios_header(header):
        return "helios"
    if header in (JOB_FIELDS, TASK_FIELDS):
        return "pai"
    if header[:3] == ["job_id", "num_gpu", "submit_time"]:
        return "tiresias"
    if "submit_time" in header and "num_gpus" in header:
        return "canonical"
    if (layout := layout_of(first)) is not None:
        return layout
    raise InputError(
        path,
        1,
        None,
        "cannot tell the trace format from the first line; "
        f"name it with --trace-format ({', '.join(FORMATS)})",
    )


def load_trace(
    spec: str,
    total_gpus: int,
    options: TraceOptions | None = None,
    report: LoadReport | None = None,
) -> JobTable:
    """Resolve a ``--trace`` value into a job table."""
    options = options or TraceOptions()
    if options.sample is not None:  # the whole trace (its filters kept), then the draw
        from corral.traces.sampling import sample_workload

        whole = TraceOptions(**{**options.__dict__, "max_jobs": None, "sample": None})
        table = sample_workload(
            _load(spec, total_gpus, whole, report), options.sample, options.max_jobs, options.seed
        )
    else:
        table = _load(spec, total_gpus, options, report)
    if options.job_types:
        table = assign_job_types(table, options.job_types, options.seed)
    return table


def _load(
    spec: str,
    total_gpus: int,
    options: TraceOptions,
    report: LoadReport | None,
) -> JobTable:
    text = spec.strip()
    if text.lower() == "philly":
        filt = options.philly
        if options.max_jobs is not None:
            filt = PhillyFilter(filt.vcs, filt.start, filt.end, options.max_jobs)
        return load_philly(None, filt, options.skip_bad, report)
    if text.lower() == "tiresias-60":
        text = str(data_path("tiresias", "60_job.csv"))
        options = TraceOptions(**{**options.__dict__, "fmt": "tiresias"})
    pollux = re.fullmatch(r"pollux-([1-8])(?:@(0\.5|1\.0|1\.5|2\.0))?", text.lower())
    if pollux:
        number, load = pollux.groups()
        folder = "workloads" if load in (None, "1.0") else f"workloads-{load}"
        text = str(data_path("pollux", folder, f"workload-{number}.csv"))
        options = TraceOptions(**{**options.__dict__, "fmt": "pollux"})
    if text.lower().startswith("gavel-synthetic"):
        table = generate_gavel(GavelWorkload.parse(text, options.seed))
        return table.head(options.max_jobs) if options.max_jobs is not None else table
    if text.lower().startswith("synthetic"):
        table = generate(SyntheticSpec.parse(text, options.seed), total_gpus)
        return table.head(options.max_jobs) if options.max_jobs is not None else table
    path = Path(text)
    if not path.is_file() and not (path.is_dir() and pai_files(text) is not None):
        raise CorralError(
            f"trace '{spec}': no such file (or use 'philly', 'tiresias-60', 'pollux-1' .. "
            "'pollux-8' (at another job load: 'pollux-6@0.5', '@1.5', '@2.0') or 'synthetic')"
        )
    fmt = (options.fmt or detect_format(text)).lower()
    report = report or LoadReport(text)
    if fmt == "philly":
        table = load_philly(text, options.philly, options.skip_bad, report)
    elif fmt == "tiresias":
        table = load_tiresias(text, options.skip_bad, report)
    elif fmt in LAYOUTS:
        table = load_gavel(text, options.skip_bad, report, layout=fmt, durations=options.durations)
    elif fmt == "pollux":
        table = load_pollux(text, options.skip_bad, report)
    elif fmt == "canonical":
        table = load_canonical(text, options.skip_bad, report)
    elif fmt == "helios":
        table = load_helios(text, options.skip_bad, report)
    elif fmt == "pai":
        table = load_pai(text, options.skip_bad, report)
    elif fmt == "philly-log":
        table = load_philly_log(text, options.skip_bad, report)
    else:
        raise CorralError(f"unknown trace format '{fmt}' (choose from {', '.join(FORMATS)})")
    if options.max_jobs is not None and fmt != "philly":
        table = table.head(options.max_jobs)
    return table
