"""Running many simulations at once: a comparison's policies, a sweep's grid.

Every run is a :class:`RunTask` (a policy's settings on one of a few loaded
workloads) and writes the usual ``jobs.csv``, ``timeline.csv`` and
``summary.json`` into its own folder. Three runners carry the tasks out, and
the results never depend on which one did or how many ran at once:

- ``serial``: one after another in this process;
- ``processes``: a pool of forked worker processes on this machine (the
  loaded workloads are shared by the fork, not copied);
- ``ray``: Ray tasks, on a local Ray instance started for the purpose (one
  worker per core, listening on 127.0.0.1 only) or on an existing Ray cluster
  (``address``). Each workload is put in Ray's object store once, so nodes
  need corral installed but not the trace; a run's files come back to this
  machine as bytes, so they land in the output folder whichever node ran it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.errors import CorralError

if TYPE_CHECKING:
    from corral.model.cluster import Cluster
    from corral.model.jobs import JobTable
    from corral.sim.output import RunOutput
    from corral.sim.run import RunSpec

Workload = tuple["JobTable", "Cluster"]
RUNNERS = ("serial", "processes", "ray")
RUN_FILES = ("jobs.csv", "timeline.csv", "summary.json")
ERROR_LOG = "error.log"
"""A failed run's traceback, in its folder."""
FAILED = "error"
"""The ``status`` of a failed run's row (a run that ended has none)."""


@dataclass
class RunTask:
    """One simulation: ``spec`` on ``workloads[workload]``, written to ``out / name``."""

    name: str
    workload: int
    spec: RunSpec
    extra: dict[str, Any] = field(default_factory=dict)


def run_output(
    jobs: JobTable,
    machines: Cluster,
    spec: RunSpec,
    extra: dict[str, Any],
    progress: Callable[[int, int], None] | None = None,
) -> RunOutput:
    """One policy's run on either engine (gang engine, or Hare's round model)."""
    from corral.policies.rounds.planners import ROUND_PLANNERS
    from corral.sim.output import sim_output
    from corral.sim.rounds.output import round_output
    from corral.sim.run import simulate, simulate_rounds

    if spec.policy in ROUND_PLANNERS:
        result = simulate_rounds(jobs, machines, spec)
        output = round_output(result, jobs.offered_load(machines.total_gpus), extra)
    else:
        output = sim_output(simulate(jobs, machines, spec, progress), extra)
    if spec.label is not None:  # a variant: its label, still marked if an oracle
        oracle = str(output.summary.get("policy", "")).endswith(" (oracle)")
        output.summary["policy"] = spec.label + (" (oracle)" if oracle else "")
    return output


def run_and_write(
    jobs: JobTable,
    machines: Cluster,
    spec: RunSpec,
    out_dir: Path,
    extra: dict[str, Any],
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run one policy and write its files; its summary."""
    from corral.sim.output import write_outputs

    return write_outputs(run_output(jobs, machines, spec, extra, progress), out_dir)


def failed(spec: RunSpec, run_dir: str, exc: BaseException) -> tuple[dict[str, Any], str]:
    """The row of a run whose policy raised, and the traceback for its ``error.log``.

    The row says what was raised and where: the last line of the policy's own
    source in the traceback (a researcher's bug is there, not in numpy or the
    engine that called it), else the line that raised."""
    import traceback

    from corral.policies import folder_name, source_file

    frames = traceback.extract_tb(exc.__traceback__)
    own = source_file(spec.policy)
    where = next((f for f in reversed(frames) if own and f.filename == own), None)
    where = where or (frames[-1] if frames else None)
    message = (str(exc).strip().splitlines() or [""])[0]
    try:
        name = spec.label or folder_name(spec.policy)
    except Exception:  # (a policy that cannot even be loaded)
        name = spec.policy
    row = {
        "policy": name,
        "run_dir": run_dir,
        "status": FAILED,
        "error": f"{type(exc).__name__}: {message}" if message else type(exc).__name__,
        "raised_at": f"{where.filename}:{where.lineno} ({where.name})" if where else None,
        "log": f"{run_dir}/{ERROR_LOG}",
    }
    return row, "".join(traceback.format_exception(exc))


def run_or_fail(
    jobs: JobTable,
    machines: Cluster,
    spec: RunSpec,
    out_dir: Path,
    extra: dict[str, Any],
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """:func:`run_and_write`, or, when the run raises, its error row (and ``error.log``
    beside it), so one crashing policy does not spoil the others' results."""
    try:
        return run_and_write(jobs, machines, spec, out_dir, extra, progress)
    except Exception as exc:
        row, log = failed(spec, str(extra.get("run_dir", Path(out_dir).name)), exc)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / ERROR_LOG).write_text(log, encoding="utf-8")
        return row


def run_tasks(
    tasks: list[RunTask],
    workloads: list[Workload],
    out: Path,
    runner: str = "processes",
    workers: int | None = None,
    address: str | None = None,
    on_done: Callable[[RunTask, dict[str, Any]], None] | None = None,
    isolate: bool = False,
    progress: Callable[[RunTask], Callable[[int, int], None] | None] | None = None,
) -> list[dict[str, Any]]:
    """Carry out every task; their summaries in the tasks' order.

    ``on_done`` is called as each run ends (in the order they end); ``progress``
    gives a task's arrivals callback (the serial runner's only). A run's
    error stops the whole batch with that run's message, unless ``isolate``:
    then its summary is an error row (see :func:`failed`) and the others go on.
    """
    if runner not in RUNNERS:
        raise CorralError(f"unknown runner '{runner}' (choose from {', '.join(RUNNERS)})")
    if address and runner != "ray":
        raise CorralError("an address is a Ray cluster's: it needs the ray runner")
    workers = max(1, min(len(tasks) or 1, workers or os.cpu_count() or 1))
    if runner == "ray":
        return _on_ray(tasks, workloads, out, workers, address, on_done, isolate)
    run = run_or_fail if isolate else run_and_write
    if runner == "serial" or workers == 1:
        summaries = []
        for task in tasks:
            jobs, machines = workloads[task.workload]
            told = progress(task) if progress is not None else None
            summary = run(jobs, machines, task.spec, out / task.name, task.extra, told)
            if on_done is not None:
                on_done(task, summary)
            summaries.append(summary)
        return summaries
    return _in_processes(tasks, workloads, out, workers, on_done, run)


def _in_processes(
    tasks: list[RunTask],
    workloads: list[Workload],
    out: Path,
    workers: int,
    on_done: Callable[[RunTask, dict[str, Any]], None] | None,
    run: Callable[..., dict[str, Any]] = run_and_write,
) -> list[dict[str, Any]]:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method)
    results: dict[int, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {}
        for k, task in enumerate(tasks):
            jobs, machines = workloads[task.workload]
            future = pool.submit(run, jobs, machines, task.spec, out / task.name, task.extra)
            futures[future] = k
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                if future.exception() is not None:
                    pool.shutdown(wait=False, cancel_futures=True)
                k = futures[future]
                results[k] = future.result()
                if on_done is not None:
                    on_done(tasks[k], results[k])
    return [results[k] for k in range(len(tasks))]


def run_in_memory(
    workload: Workload, spec: RunSpec, extra: dict[str, Any], isolate: bool = False
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A run's summary and its files' bytes (what a Ray task sends back); with
    ``isolate``, a run that raises sends its error row and ``error.log``."""
    from corral.sim.output import write_outputs

    jobs, machines = workload
    try:
        with tempfile.TemporaryDirectory(prefix="corral-run-") as scratch:
            summary = write_outputs(run_output(jobs, machines, spec, extra), scratch)
            files = {name: (Path(scratch) / name).read_bytes() for name in RUN_FILES}
    except Exception as exc:
        if not isolate:
            raise
        row, log = failed(spec, str(extra.get("run_dir", spec.policy)), exc)
        return row, {ERROR_LOG: log.encode()}
    return summary, files


STARTS = 3
"""Tries at starting Ray: its node start gives its raylet 30 s to register, which a
busy machine can take longer than (Ray then raises a plain Exception)."""


def start_ray(address: str | None, workers: int) -> bool:
    """Connect to Ray; True when this call started it (the caller shuts it down)."""
    from corral.ray_support import import_ray

    ray = import_ray(address, "the ray runner (or use --runner processes)")
    if ray.is_initialized():
        return False
    quiet = {"log_to_driver": False, "configure_logging": True, "logging_level": "ERROR"}
    where = f"the Ray cluster at {address}" if address else "a local Ray instance"
    for attempt in range(STARTS):
        try:
            if address:
                ray.init(address=address, **quiet)
            else:
                # "local": a new instance of our own, never a cluster some earlier run
                # left behind (Ray would attach to it, and refuse num_cpus)
                ray.init(
                    address="local",
                    num_cpus=workers,
                    num_gpus=0,
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    **quiet,
                )
            return True
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise CorralError(f"cannot start or reach {where}: {exc}") from None
        except Exception as exc:  # Ray's own: its raylet slow to register (a busy machine)
            with contextlib.suppress(Exception):
                ray.shutdown()
            if attempt + 1 == STARTS:
                raise CorralError(
                    f"cannot start or reach {where} (tried {STARTS} times): {exc}"
                ) from None
    return True


def _on_ray(
    tasks: list[RunTask],
    workloads: list[Workload],
    out: Path,
    workers: int,
    address: str | None,
    on_done: Callable[[RunTask, dict[str, Any]], None] | None,
    isolate: bool = False,
) -> list[dict[str, Any]]:
    import ray

    started = start_ray(address, workers)
    try:
        refs = [ray.put(w) for w in workloads]
        remote = ray.remote(num_cpus=1, max_retries=0)(run_in_memory)
        futures = {
            remote.remote(refs[t.workload], t.spec, t.extra, isolate): k
            for k, t in enumerate(tasks)
        }
        results: dict[int, dict[str, Any]] = {}
        pending = list(futures)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            k = futures[done[0]]
            try:
                summary, files = ray.get(done[0])
            except ray.exceptions.RayTaskError as exc:
                for ref in pending:
                    ray.cancel(ref, force=True)
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                if isinstance(cause, CorralError):
                    raise cause from None
                raise CorralError(f"run '{tasks[k].name}' failed: {cause}") from None
            folder = out / tasks[k].name
            folder.mkdir(parents=True, exist_ok=True)
            for name, data in files.items():
                (folder / name).write_bytes(data)
            results[k] = summary
            if on_done is not None:
                on_done(tasks[k], summary)
    finally:
        if started:
            ray.shutdown()
    return [results[k] for k in range(len(tasks))]
