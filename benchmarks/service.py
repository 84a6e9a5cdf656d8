"""The live service's speed: submissions per second, submit-to-start latency,
and the preempt -> checkpoint -> resume cycle of the example jobs.

Runs ``corral serve`` on 127.0.0.1 with 4 virtual GPUs (2 V100, 2 K80) in a
temporary folder and talks to it over HTTP, as users do.

1. Submissions: a blocker job holds all 4 GPUs; N jobs (default 1,000) are
   submitted behind it through the API, one client, one request at a time,
   then with 4 client threads. Also timed: until the scheduler has queued
   them all (each has a pending reason other than "Submitted"). ``--store``
   runs this part on another database (PostgreSQL).
2. Submit -> start on an idle cluster: submit -> the scheduler launches the
   attempt (store), and submit -> the job's first line of Python runs.
3. Preemption: an example job runs on all 4 GPUs under LAS; a 4-GPU job
   arrives and preempts it. Timed: the stop order -> the job has saved its
   checkpoint and exited; exit -> relaunch; relaunch -> training resumed
   (after Python and PyTorch import and the checkpoint load).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from corral.model.jobs import JobStatus
from corral.testing.service_process import ServiceProcess, wait_for

PY = sys.executable


def submissions(folder: Path, n: int, store: str | None) -> None:
    service = ServiceProcess(folder / "submit", "fifo", store=store)
    service.start()
    try:
        client = service.client
        if client.jobs(",".join(JobStatus.__members__)):
            raise SystemExit(f"the store {store} already holds jobs: give an empty database")
        blocker = client.submit({"name": "blocker", "gpus": 4, "command": ["sleep", "600"]})
        wait_for(lambda: client.job(blocker["id"])["status"] == "RUNNING")
        spec = {"name": "queued", "gpus": 1, "command": ["true"]}
        t0 = time.perf_counter()
        ids = [client.submit(spec)["id"] for _ in range(n)]
        serial = time.perf_counter() - t0
        wait_for(lambda: all(j["reason"] != "Submitted" for j in client.jobs("PENDING")), 300)
        ingested = time.perf_counter() - t0

        threads, per = 4, n // 4
        errors: list[BaseException] = []

        def worker() -> None:
            from corral.api.client import Client

            try:
                with Client(service.url, service.users["alice"]) as mine:
                    for _ in range(per):
                        mine.submit(spec)
            except BaseException as exc:  # reported below
                errors.append(exc)

        t1 = time.perf_counter()
        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        parallel = time.perf_counter() - t1
        if errors:
            raise errors[0]
        print(f"submissions ({n} jobs, 1 client):   {n / serial:8.1f} jobs/s ({serial:.2f} s)")
        print(f"  queued by the scheduler after:    {ingested:8.2f} s")
        print(
            f"submissions ({threads * per} jobs, {threads} clients):  "
            f"{threads * per / parallel:8.1f} jobs/s ({parallel:.2f} s)"
        )
        del ids
    finally:
        service.close()


def start_latency(folder: Path, repeats: int) -> None:
    service = ServiceProcess(folder / "latency", "fifo", tick=0.5)
    service.start()
    launch, first_line = [], []
    try:
        client = service.client
        for _ in range(repeats):
            job = client.submit(
                {"name": "ping", "command": [PY, "-c", "import time; print(repr(time.time()))"]}
            )
            done = wait_for(lambda: (j := client.job(job["id"]))["status"] == "SUCCEEDED" and j)  # noqa: B023
            started = float(client.logs(job["id"]).text.strip().splitlines()[-1])
            launch.append(done["attempts"][0]["start_time"] - done["submit_time"])
            first_line.append(started - done["submit_time"])
    finally:
        service.close()
    print(
        f"submit -> launch (idle cluster, {repeats} jobs):  "
        f"median {1000 * statistics.median(launch):6.1f} ms, max {1000 * max(launch):6.1f} ms"
    )
    print(
        f"submit -> job's first line:                 "
        f"median {1000 * statistics.median(first_line):6.1f} ms, "
        f"max {1000 * max(first_line):6.1f} ms"
    )


def preemption(folder: Path, example: str, repeats: int) -> None:
    stop_to_exit, exit_to_launch, launch_to_train = [], [], []
    for k in range(repeats):
        service = ServiceProcess(
            folder / f"preempt-{example}-{k}", "las", {"quantum": 1.0}, stop_grace=60
        )
        service.start()
        try:
            client = service.client
            command = [
                PY,
                "-m",
                f"corral.examples.{example}",
                "--steps",
                "400",
                "--step-time",
                "0.02",
            ]
            job = client.submit({"name": example, "gpus": 4, "command": command})
            wait_for(lambda: client.job(job["id"])["steps"] >= 30)  # noqa: B023
            client.submit({"name": "short", "gpus": 4, "command": ["true"]})
            done = wait_for(
                lambda: (j := client.job(job["id"]))["status"] == "SUCCEEDED" and j,  # noqa: B023
                300,
            )
            first, second = done["attempts"][:2]
            stop = next(e for e in done["events"] if e["kind"] == "stop")
            resumed = re.search(
                r"resumed from step \d+ at t=([\d.]+)", client.logs(job["id"], attempt=2).text
            )
            assert first["cause"] == "preempted" and resumed is not None
            stop_to_exit.append(first["end_time"] - stop["time"])
            exit_to_launch.append(second["start_time"] - first["end_time"])
            launch_to_train.append(float(resumed.group(1)) - second["start_time"])
        finally:
            service.close()
    med = statistics.median
    print(f"{example}: stop order -> checkpointed and exited  {1000 * med(stop_to_exit):7.1f} ms")
    print(
        f"{example}: exit -> relaunch on the freed GPUs       "
        f"{1000 * med(exit_to_launch):7.1f} ms (the preempting job ran in between)"
    )
    print(
        f"{example}: relaunch -> training resumed           "
        f"{1000 * med(launch_to_train):7.1f} ms (Python + PyTorch import + restore)"
    )


SETTLE_S = 20.0
"""Seconds the scale table waits after the batch before its settled figures."""


def scale(folder: Path, n: int, runs: int = 5) -> None:
    """The service at cluster scale: ``n`` jobs queued behind a blocker, submitted in
    batches; then the commands users type, timed from the shell (a new process each),
    last the cancel of every waiting job in one command."""
    import os
    import subprocess

    service = ServiceProcess(folder / "scale", "fifo", max_jobs_per_user=max(n * 2, 10_000))
    service.start()
    try:
        client = service.client
        blocker = client.submit({"name": "blocker", "gpus": 4, "command": ["sleep", "3600"]})
        wait_for(lambda: client.job(blocker["id"])["status"] == "RUNNING")
        specs = [{"name": f"q{k}", "gpus": 1, "command": ["true"]} for k in range(n)]
        t0 = time.perf_counter()
        client.submit_many(specs)
        batched = time.perf_counter() - t0
        env = {
            **os.environ,
            "CORRAL_URL": service.url,
            "CORRAL_TOKEN": service.users["alice"],
            "COLUMNS": "200",
        }
        corral = str(Path(sys.executable).parent / "corral")

        def shell(*argv: str) -> float:
            samples = []
            for _ in range(runs):
                t = time.perf_counter()
                subprocess.run([corral, *argv], env=env, capture_output=True, check=True)
                samples.append(time.perf_counter() - t)
            return statistics.median(samples)

        # right after the batch the loop is still taking ten thousand jobs in (it
        # reads and validates each spec), sharing the process with the API; the
        # commands are timed then, and again once it has settled
        burst = shell("submit", "--", "true")
        time.sleep(SETTLE_S)
        rows = [
            (
                f"submit {n:,} jobs in batches of 1,000 (API)",
                f"{n / batched:,.0f} jobs/s",
                ">= 1,000/s",
            ),
            ("corral submit (shell), right after the batch", f"{burst:.2f} s", "<= 0.3 s"),
            (
                f"corral submit (shell), {SETTLE_S:.0f} s later",
                f"{shell('submit', '--', 'true'):.2f} s",
                "<= 0.3 s",
            ),
            (
                f"corral queue, {n + 2 * runs:,} queued (shell)",
                f"{shell('queue'):.2f} s",
                "<= 0.5 s",
            ),
            ("corral queue --json (shell)", f"{shell('queue', '--json'):.2f} s", ""),
            ("corral queue --limit 50 (shell)", f"{shell('queue', '--limit', '50'):.2f} s", ""),
            ("corral --version (shell)", f"{shell('--version'):.2f} s", ""),
        ]
        # last: cancelling every waiting job of the user's in one request (scancel -u)
        t = time.perf_counter()
        subprocess.run(
            [corral, "cancel", "-u", "alice", "-t", "PD"], env=env, capture_output=True, check=True
        )
        cancelled = time.perf_counter() - t
        rows.append(
            (f"corral cancel -u alice -t PD, {n:,} jobs (shell)", f"{cancelled:.2f} s", "<= 2 s")
        )
        print(f"\n{'scale':<48} {'measured':>14}  target")
        for what, got, target in rows:
            print(f"{what:<48} {got:>14}  {target}")
    finally:
        service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--preempt-repeats", type=int, default=3)
    parser.add_argument(
        "--store",
        help="SQLAlchemy URL of an empty database for the submission benchmark "
        "(e.g. postgresql+psycopg://user@/db?host=/run/postgresql); default SQLite",
    )
    parser.add_argument("--only-submissions", action="store_true")
    parser.add_argument(
        "--scale", type=int, default=0, help="only the scale table, with this many jobs queued"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.scale:
            scale(folder, args.scale)
            return
        print(f"store: {args.store or 'SQLite (WAL) in the state folder'}")
        submissions(folder, args.jobs, args.store)
        if args.only_submissions:
            return
        start_latency(folder, args.repeats)
        for example in ("digits_cnn", "tiny_transformer"):
            preemption(folder, example, args.preempt_repeats)


if __name__ == "__main__":
    main()
