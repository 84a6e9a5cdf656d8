"""Preemption live, cold against parked: what a switch costs the jobs.

Two task jobs (the digits CNN, 600 steps stretched to about 10 s each) take
turns on one virtual GPU under LAS with a 4 s quantum, in ``corral serve``.
(With a quantum shorter than a cold restart, about 2-3 s on a 2-core CPU, the
cold jobs would make no progress at all: each is preempted again before its
first step.)
Cold, each preemption is today's default: the job checkpoints and exits, and
starts again as a new process (interpreter, PyTorch, model, checkpoint).
Parked (``workers: {park: 1}``), the preempted job pauses at its next
iteration boundary with its state resident and resumes in place when the
policy gives it the GPU again.

Prints, per mode: the preemptions, the attempts (processes started), the
time from submitting the first job to both ending (makespan), and for parked
runs the median time from the policy's decision to run a parked job again to
its resumption (the other job pausing, then a signal). The last line is the
cold/parked makespan ratio.

    python benchmarks/live_preemption.py [--repeats 2] [--quantum 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from corral.testing.service_process import ServiceProcess, wait_for

STEPS = 600
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}


def run(park: int, quantum: float) -> dict[str, Any]:
    users = {"alice": "alice-token-1", "root": "root-token-1"}
    task = {
        "factory": "corral.examples.tasks:digits",
        "steps": STEPS,
        "kwargs": {"seed": 0, "step_time": 0.015},
    }
    with tempfile.TemporaryDirectory() as folder:
        service = ServiceProcess(
            Path(folder),
            "las",
            {"quantum": quantum},
            users=users,
            gpus=[{"type": "V100", "count": 1}],
            workers={"park": park},
            stop_grace=20,
        )
        try:
            service.start()
            client = service.client
            first = client.submit({"name": "a", "task": task, "gpus": 1})
            wait_for(lambda: client.job(first["id"])["steps"] > 5, 60, "the first job to train")
            second = client.submit({"name": "b", "task": task, "gpus": 1})
            for job in (first, second):
                wait_for(lambda j=job: client.job(j["id"])["status"] in TERMINAL, 300)
            jobs = [client.job(j["id"]) for j in (first, second)]
        finally:
            service.close()
    if any(j["status"] != "SUCCEEDED" for j in jobs):
        raise RuntimeError(f"a job did not succeed: {[j['status'] for j in jobs]}")
    gaps = []
    for job in jobs:
        allocated = None
        for event in job["events"]:
            if event["kind"] == "allocated":
                allocated = event["time"]
            elif event["kind"] == "unpark" and allocated is not None:
                gaps.append(event["time"] - allocated)
    return {
        "preemptions": sum(j["preemptions"] for j in jobs),
        "attempts": sum(len(j["attempts"]) for j in jobs),
        "makespan": max(j["end_time"] for j in jobs) - jobs[0]["submit_time"],
        "gaps": gaps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quantum", type=float, default=4.0, help="LAS quantum, seconds")
    args = parser.parse_args()
    print(f"{'mode':<8}{'preemptions':>12}{'attempts':>10}{'makespan s':>12}{'resume ms':>11}")
    makespans: dict[str, list[float]] = {"cold": [], "parked": []}
    for _ in range(args.repeats):
        for mode, park in (("cold", 0), ("parked", 1)):
            r = run(park, args.quantum)
            makespans[mode].append(r["makespan"])
            gap = f"{statistics.median(r['gaps']) * 1e3:.0f}" if r["gaps"] else "-"
            print(
                f"{mode:<8}{r['preemptions']:>12}{r['attempts']:>10}"
                f"{r['makespan']:>12.2f}{gap:>11}",
                flush=True,
            )
    ratio = statistics.median(makespans["cold"]) / statistics.median(makespans["parked"])
    print(f"{ratio:.2f}x")


if __name__ == "__main__":
    main()
