"""What the validation scripts share: running tasks in parallel or reloading
saved results, and the hand-written notes that end each report."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

Result = dict[str, Any]


def notes_for(script: str) -> list[str]:
    """The report's closing discussion, ``<script>_notes.md`` beside the script."""
    path = Path(script).with_name(Path(script).stem + "_notes.md")
    return [path.read_text(encoding="utf-8").rstrip(), ""] if path.exists() else []


def validation_main(
    description: str,
    name: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    make_tasks: Callable[[argparse.Namespace], list[Result]],
    run: Callable[[Result], Result],
    render: Callable[[list[Result]], str],
) -> None:
    """Run every task (or reload ``--from-json``), save the results, write the report."""
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=f"docs/validation/{name}.md")
    parser.add_argument("--json", default=f"docs/validation/data/{name}-results.json")
    parser.add_argument("--from-json", default=None, help="rewrite the report from saved results")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="take each task's result from the saved results (--json) where one was saved "
        "for the same task, and run only the others (for new seeds of an experiment whose "
        "code has not changed)",
    )
    args = parser.parse_args()
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
    else:
        tasks = make_tasks(args)
        saved = _saved(Path(args.json)) if args.reuse else []
        kept = [next((r for r in saved if _same_task(task, r)), None) for task in tasks]
        todo = [task for task, k in zip(tasks, kept, strict=True) if k is None]
        if args.reuse:
            print(f"{len(tasks) - len(todo)} of {len(tasks)} results taken from {args.json}")
        with ProcessPoolExecutor(args.workers) as pool:
            fresh = iter(list(pool.map(run, todo)))
        results = [k if k is not None else next(fresh) for k in kept]
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    Path(args.out).write_text(render(results) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


def _saved(path: Path) -> list[Result]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def _same_task(task: Result, result: Result) -> bool:
    """Whether a saved ``result`` is of ``task`` (a result keeps its task's fields)."""
    return all(key in result and result[key] == value for key, value in task.items())


def simulate_gavel_workload(
    cluster_spec: str, policy: str, task: Result, jobs: int, check_invariants: bool = False
) -> Any:
    """One run of Gavel's generated workload (``task``: its ``rate``, ``seed`` and,
    optionally, ``multi``) on ``cluster_spec`` under ``policy``: the SimResult."""
    from corral import Experiment

    trace = (
        f"gavel-synthetic:jobs={jobs},rate={task['rate']},multi={task.get('multi', 0)},"
        f"seed={task['seed']}"
    )
    run = Experiment(trace=trace, cluster=cluster_spec, policies=policy, check=check_invariants)
    return run.simulate()


def philly_with_gavel_types(jobs: int | None, policy: str, **settings: Any) -> Any:
    """The first ``jobs`` Philly jobs, given Gavel's measured job types (so that
    packing policies can pair them), on Philly's cluster x 0.17 (422 GPUs): the
    AntMan and Liquid pages' workload, as an :class:`corral.Experiment`."""
    from corral import Experiment

    return Experiment(
        trace="philly",
        max_jobs=jobs,
        job_types="gavel",
        cluster="philly",
        cluster_scale=0.17,
        policies=policy,
        **settings,
    )


def option_words(options: dict[str, Any]) -> list[str]:
    """Policy options as ``--policy-opt`` gives them (``Experiment(policy_opt=...)``):
    a list as comma-separated values, a flag as true/false."""
    words = []
    for key, value in options.items():
        if isinstance(value, dict):
            raise ValueError(f"option {key}: a mapping cannot be given as key=value")
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = "true" if value else "false"
        words.append(f"{key}={value}")
    return words


def mean_of(rows: list[Result], key: str) -> float:
    """``key`` averaged over ``rows`` (one per seed)."""
    return sum(r[key] for r in rows) / len(rows)


def shown(values: list[float], digits: int = 1, unit: str = "") -> str:
    """A mean over the seeds as the pages give it: with its 95% Student-t interval
    ``[low, high]`` where there are several seeds."""
    mean, low, high = interval(values)
    if len(values) < 2:
        return f"{mean:,.{digits}f}{unit}"
    return f"{mean:,.{digits}f}{unit} [{low:,.{digits}f}, {high:,.{digits}f}]"


def interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The mean of ``values`` (one per seed) and its ``confidence`` interval by
    Student's t (low, high): how a reproduction is stated, not by one seed or a
    sweep's peak. With one value the interval is the value itself."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, mean, mean
    spread = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * spread / n**0.5
    return mean, mean - half, mean + half
