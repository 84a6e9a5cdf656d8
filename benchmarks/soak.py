"""Soak: thousands of jobs through ``corral serve`` on 8 virtual GPUs, with random
cancels, suspends and resumes, jobs that crash, and ``kill -9`` restarts of the
service. Prints jobs lost (must be 0), double starts (must be 0), jobs run
twice after succeeding (must be 0) and submit throughput.

    python benchmarks/soak.py                      # 10,000 jobs, 20 restarts
    python benchmarks/soak.py --jobs 500 --restarts 3

Every acknowledged submission must end in a terminal state; no GPU may hold
two attempts at once; no job may have two attempts open at once.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from corral.runtime.storage.store import AttemptRow, JobRow
from corral.testing.service_process import ServiceProcess

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}
TOKENS = {"alice": "alice-soak-token", "root": "root-soak-token"}


def job_spec(rng: random.Random) -> dict[str, object]:
    roll = rng.random()
    if roll < 0.1:  # crashes: retried once, then FAILED
        command = ["sh", "-c", f"sleep {rng.uniform(0.01, 0.2):.2f}; exit 3"]
    else:
        command = ["sleep", f"{rng.uniform(0.05, 0.6):.2f}"]
    return {
        "command": command,
        "gpus": rng.choice([1, 1, 1, 2, 2, 4]),
        "max_retries": 1,
        "name": "soak",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--policy", default="las")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds for all to end")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="corral-soak-") as folder:
        service = ServiceProcess(
            Path(folder),
            args.policy,
            {"quantum": 2.0} if args.policy == "las" else {},
            users=TOKENS,
            gpus=[{"type": "V100", "count": 4}, {"type": "K80", "count": 4}],
            stop_grace=2,
            retry={"backoff": 0.1, "backoff_max": 0.5},
        )
        headers = {"Authorization": f"Bearer {TOKENS['alice']}"}
        acknowledged: list[int] = []
        restarts_at = {int(args.jobs * (k + 1) / (args.restarts + 1)) for k in range(args.restarts)}
        submit_seconds = 0.0
        try:
            service.start()
            http = httpx.Client(base_url=service.url, headers=headers, timeout=30)
            while len(acknowledged) < args.jobs:
                if len(acknowledged) in restarts_at:
                    restarts_at.discard(len(acknowledged))
                    service.kill9()
                    service.start()
                t0 = time.perf_counter()
                try:
                    answer = http.post("/v1/jobs", json=job_spec(rng))
                except httpx.HTTPError:
                    time.sleep(0.2)
                    continue
                submit_seconds += time.perf_counter() - t0
                if answer.status_code == 201:
                    acknowledged.append(answer.json()["id"])
                if acknowledged and rng.random() < 0.03:
                    victim = rng.choice(acknowledged[-200:])
                    verb = rng.choice(["cancel", "suspend", "suspend", "resume"])
                    with contextlib.suppress(httpx.HTTPError):
                        http.post(f"/v1/jobs/{victim}/{verb}")
            # suspended jobs are resumed so every job can end
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                live = http.get("/v1/jobs", params={"limit": 100000}).json()
                if not live:
                    break
                for job in live:
                    if job["status"] == "SUSPENDED":
                        http.post(f"/v1/jobs/{job['id']}/resume")
                time.sleep(1.0)
            http.close()
            report(service, acknowledged, submit_seconds)
        except Exception:
            if service.log.exists():  # the folder goes with the run: show why first
                print(f"--- end of {service.log.name} ---")
                print(service.log.read_text()[-4000:])
            raise
        finally:
            service.close()


def report(service: ServiceProcess, acknowledged: list[int], submit_seconds: float) -> None:
    store = service.store()
    try:
        with store.session() as s:
            status = {r.id: r.status for r in s.query(JobRow)}
            attempts = list(s.query(AttemptRow).order_by(AttemptRow.start_time))
    finally:
        store.dispose()
    lost = [j for j in acknowledged if status.get(j) not in TERMINAL]
    double = 0
    by_gpu: dict[int, list[tuple[float, float, int]]] = {}
    by_job: dict[int, list[tuple[float, float]]] = {}
    for a in attempts:
        end = a.end_time if a.end_time is not None else float("inf")
        by_job.setdefault(a.job_id, []).append((a.start_time, end))
        for g in a.gpus:
            by_gpu.setdefault(g, []).append((a.start_time, end, a.job_id))
    for spans in by_gpu.values():
        spans.sort()
        double += sum(1 for x, y in itertools.pairwise(spans) if y[0] < x[1] - 1e-6)
    for spans in by_job.values():
        spans.sort()
        double += sum(1 for x, y in itertools.pairwise(spans) if y[0] < x[1] - 1e-6)
    succeeded = Counter(a.job_id for a in attempts if a.cause == "succeeded")
    twice = sum(1 for count in succeeded.values() if count > 1)
    states: dict[str, int] = {}
    for j in acknowledged:
        states[status.get(j, "missing")] = states.get(status.get(j, "missing"), 0) + 1
    print(f"jobs submitted (acknowledged): {len(acknowledged)}")
    print(f"end states:                    {dict(sorted(states.items()))}")
    print(f"attempts:                      {len(attempts)}")
    print(f"jobs lost:                     {len(lost)}  (must be 0)")
    print(f"double starts:                 {double}  (must be 0)")
    print(f"jobs run again after success:  {twice}  (must be 0)")
    rate = len(acknowledged) / submit_seconds if submit_seconds else 0.0
    print(f"submit throughput:             {rate:.0f} jobs/s (time in POST /v1/jobs)")


if __name__ == "__main__":
    main()
