"""One command that checks corral on a GPU machine.

    python benchmarks/gpu_check.py                 # everything, about 7 minutes on one GPU
    python benchmarks/gpu_check.py --json out.json

Runs, on a machine with NVIDIA GPUs and PyTorch:

- ``gpu-tests``: the tests that need a CUDA GPU (model residency, warm switches,
  and the standby worker's CUDA-before-fork checks, which on a GPU see real CUDA);
- ``switching``: the switching benchmark on the ResNet-50 layout (warm, copy,
  cold), five switches of each kind;
- ``live-cold``, ``live-parked``, ``live-standby``, ``live-warm``: ``corral
  serve`` with ``gpus: auto`` running a ResNet-50-layout and a BERT-base-layout
  task job under LAS with a short quantum, so that they preempt each other:
  restarted cold, parked in place, started in standby workers (the path that
  crashed with "Cannot re-initialize CUDA in forked subprocess"), and run in a
  warm worker that keeps its CUDA context; each with the switch time from a
  stop to the other job's first step, and where it went;
- ``hare-keepers``: a job given as a task run as Hare's rounds, its tasks held
  by round keepers (which start in standby workers);
- ``gandiva-timeslice``: Gandiva sharing one GPU between two jobs;
- ``gandiva-turns``: the pair taking turns under Gandiva (packing off), with the
  switch time from one job's pause to the other's first step;
- ``pollux-live``: a Pollux job on the GPU (the digits CNN reporting its gradient
  noise scale) has its batch raised from its measured step times and trains at it
  from its next step, in the same attempt;
- ``driver-read``: what NVIDIA's management library reports (the GPUs, their
  topology and the links the locality model gets, faults, utilisation), and in
  ``live-cold`` each job's GPU utilisation and memory as the service measured them;
- ``antman-cap``: AntMan's memory cap: an opportunistic ResNet-50-layout job
  that needs more GPU memory than its cap (``memory_fraction`` 0.05) must fail
  out of memory with its measured GPU memory within the cap (plus the CUDA
  context, which the allocator's cap does not count), not take the memory.
- ``confinement``: a job given no GPU cannot create a CUDA context (the device
  cgroup), one given the GPU can;
- ``adascale``: the examples' models at 1x, 2x and 4x the batch with AdaScale,
  steps to the base batch's loss (``benchmarks/adascale_steps.py``).

Prints one table, writes it as JSON, and the last line says how many checks
passed out of how many. Where no GPU is found it says so, checks the parts that
run on a CPU (the standby worker's CUDA-before-fork tests) and exits 0.

Faults are not injected on a real GPU (the health checks' reactions are tested
on CPU against a fake of the library); here the read must find none.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPU_TESTS = [
    "tests/train/test_residency.py",
    "tests/train/test_warm_switch.py",
    "tests/runtime/test_cuda_before_fork.py",
]
CPU_TESTS = ["tests/runtime/test_cuda_before_fork.py"]
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"}
RESNET = {"factory": "corral.examples.tasks:resnet50", "kwargs": {"batch": 32, "size": 224}}
BERT = {"factory": "corral.examples.tasks:bert_base", "kwargs": {"batch": 32, "length": 128}}
DRY_RUN = {"factory": "corral.examples.tasks:digits", "kwargs": {"step_time": 0.03}}
SETUP: dict[str, Any] = {"gpus": "auto", "model": RESNET, "pair": [(RESNET, 300), (BERT, 200)]}
"""What the live checks run on: the machine's GPUs, the ResNet-50 layout, and the pair
a switch is measured on (ResNet-50 and BERT-base, with their steps), or, with
``--dry-run`` on a machine without one, one virtual GPU and a small model (to try
the script itself)."""
RESIDENT = "corral: resumed in memory"
"""A task job's log line when it took its task back from its warm worker's memory."""
WARM = {"warm": True, "warm_idle": 120}
"""Warm workers: one per user and GPU, keeping its CUDA context between jobs."""
DONE_LINE = re.compile(r"^corral: step \d+ done at t=([\d.]+)$", re.M)
"""A task job's first step of a run (its start, each resumption): a switch to it ends."""


def gpu_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(0))


def run_pytest(paths: list[str]) -> tuple[bool, str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rfE", "-p", "no:cacheprovider", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary = [line.strip("= ") for line in lines if " passed" in line or " failed" in line]
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    detail = "; ".join(summary[-1:] + failed[:3]) or (lines[-1] if lines else done.stderr[-300:])
    return done.returncode == 0, detail


def switching() -> tuple[bool, str]:
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/switching.py",
            "--switches",
            "5",
            "--models",
            "resnet50",
            "--no-profile",
            "--no-jobs",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [line for line in done.stdout.splitlines() if "resnet50" in line or "x" in line[-3:]]
    return done.returncode == 0, " | ".join(r.strip() for r in rows[-6:])


def service(folder: Path, policy: str, options: dict[str, Any], **settings: Any) -> Any:
    from corral.testing.service_process import ServiceProcess

    made = ServiceProcess(
        folder,
        policy,
        options,
        gpus=SETUP["gpus"],
        stop_grace=30,
        heartbeat_interval=0.5,
        **settings,
    )
    made.start(120)
    return made


def wait_all(svc: Any, ids: list[int], timeout: float) -> list[dict[str, Any]]:
    from corral.testing.service_process import wait_for

    for job in ids:
        wait_for(lambda j=job: svc.admin.job(j)["status"] in TERMINAL, timeout, f"job {job}")
    return [svc.admin.job(j) for j in ids]


def driver_read() -> tuple[bool, str]:
    """The GPUs as NVIDIA's management library reports them."""
    from corral.runtime.execution.gpu_driver import links_of, open_driver

    driver = open_driver()
    if driver is None:
        return False, "NVIDIA's management library could not be opened (pip install nvidia-ml-py)"
    try:
        gpus = driver.gpus()
        topology = driver.topology()
        faults = driver.faults()
        usage = driver.usage()
    finally:
        driver.close()
    links = links_of(topology)
    kinds = sorted(set(topology.values()))
    detail = (
        f"{len(gpus)} GPU(s): {gpus[0].name if gpus else '-'}, "
        f"{gpus[0].memory_gb if gpus else 0:.0f} GB; links {kinds or 'one GPU'} -> "
        f"intra-node {'NVLink' if links else 'PCIe (default)'}; faults {faults or 'none'}; "
        f"utilisation read for {len(usage)} GPU(s)"
    )
    return bool(gpus) and not faults and len(usage) == len(gpus), detail


def antman_cap(folder: Path) -> tuple[bool, str]:
    """An opportunistic job whose GPU memory cap is below what it needs fails out of
    memory within the cap instead of taking the memory."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory / 1e9
    fraction = 0.05
    svc = service(folder, "antman", {"quotas": "a=1", "memory_fraction": fraction}, gpu_poll=0.3)
    try:
        big = {"factory": RESNET["factory"], "kwargs": {"batch": 128, "size": 224}}
        job = svc.client.submit(
            {"name": "capped", "vc": "b", "max_retries": 0, "task": {**big, "steps": 30}}
        )["id"]
        peak = 0.0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            view = svc.admin.job(job)
            peak = max(peak, view.get("gpu_memory_gb") or 0.0)
            if view["status"] in TERMINAL:
                break
            time.sleep(0.2)
        causes = [a["cause"] for a in view["attempts"]]
        cap = fraction * total
        ok = "oom" in causes and peak <= cap + 1.5
        return ok, (
            f"{view['status']}, attempts {causes}; cap {cap:.1f} GB of {total:.0f} GB; "
            f"peak measured {peak:.2f} GB (the CUDA context is outside the cap)"
        )
    finally:
        svc.close()


def switch_times(svc: Any, ids: list[int]) -> tuple[list[float], str]:
    """Seconds from each stop (or park) the service asked of one job to the first step
    the other job then made (its attempts' logs' ``step N done at`` lines), sorted;
    and where the time went (medians): the stopped job's own stop (its checkpoint
    and exit), the service's handover (from that attempt's end to the next one's
    start) and the next attempt's start to its first step."""
    views = {j: svc.admin.job(j) for j in ids}
    firsts: dict[int, list[float]] = {}
    for j, view in views.items():
        logs = [svc.admin.logs(j, 0, a["number"]).text for a in view["attempts"]]
        firsts[j] = [float(t) for text in logs for t in DONE_LINE.findall(text)]
    out: list[float] = []
    parts: dict[str, list[float]] = {"stop": [], "handover": [], "start": []}
    for j, view in views.items():
        for event in view["events"]:
            if event["kind"] not in ("stop", "park"):
                continue
            t = event["time"]
            after = [x for k in ids if k != j for x in firsts[k] if x > t]
            if not after:
                continue
            first = min(after)
            out.append(first - t)
            ended = [
                a["end_time"]
                for a in view["attempts"]
                if a["end_time"] is not None and a["start_time"] <= t <= a["end_time"]
            ]
            begun = [
                a["start_time"]
                for k in ids
                if k != j
                for a in views[k]["attempts"]
                if t <= a["start_time"] <= first
            ]
            if ended and begun:
                parts["stop"].append(ended[0] - t)
                parts["handover"].append(min(begun) - ended[0])
                parts["start"].append(first - min(begun))
    where = ", ".join(
        f"{name} {statistics.median(v) * 1e3:.0f} ms" for name, v in parts.items() if v
    )
    return sorted(out), (f" (median {where})" if where else "")


def spread(values: list[float]) -> str:
    """Median and p95 of switch times, for the table."""
    if not values:
        return "no switches"
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return (
        f"switch median {statistics.median(values) * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms "
        f"(n={len(values)})"
    )


def two_resnets(folder: Path, workers: dict[str, Any]) -> tuple[bool, str]:
    """A ResNet-50 and a BERT-base task job that preempt each other under LAS (4 s
    quantum) on one GPU, with the switch time from each stop to the other job's
    first step."""
    from corral.runtime.execution.standby import WARM_MARK
    from corral.runtime.execution.warm_worker import WARM_MARK as IN_WARM_WORKER

    svc = service(folder, "las", {"quantum": 4}, workers=workers, gpu_poll=0.5)
    try:
        if workers.get("standby"):
            from corral.testing.service_process import wait_for

            wait_for(lambda: svc.admin.json("GET", "/v1/health")["standby_ready"] >= 1, 120)
        if workers.get("warm"):  # a one-step job first: its launch starts the user's worker
            from corral.testing.service_process import wait_for

            primer = svc.client.submit({"name": "primer", "task": {**SETUP["model"], "steps": 1}})
            wait_all(svc, [primer["id"]], 120)
            sockets = folder / "state" / "warm"
            wait_for(lambda: any(sockets.glob("*.sock")), 120, "the warm worker")
        start = time.monotonic()
        ids = [
            svc.client.submit({"name": f"switch-{k}", "task": {**model, "steps": steps}})["id"]
            for k, (model, steps) in enumerate(SETUP["pair"])
        ]
        use: dict[int, tuple[float, float]] = {}
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            views = [svc.admin.job(j) for j in ids]
            for v in views:
                if v.get("gpu_utilization") is not None:
                    was = use.get(v["id"], (0.0, 0.0))
                    use[v["id"]] = (
                        max(was[0], v["gpu_utilization"]),
                        max(was[1], v.get("gpu_memory_gb") or 0.0),
                    )
            if all(v["status"] in TERMINAL for v in views):
                break
            time.sleep(0.3)
        jobs = wait_all(svc, ids, 10)
        makespan = time.monotonic() - start
        ok = all(j["status"] == "SUCCEEDED" for j in jobs)
        attempts = [len(j["attempts"]) for j in jobs]
        preempted = sum(int(j["preemptions"]) for j in jobs)  # parked ones included
        warm = sum(WARM_MARK in svc.admin.logs(j, 0, None).text for j in ids)
        in_worker = sum(
            IN_WARM_WORKER in svc.admin.logs(j["id"], 0, a["number"]).text
            for j in jobs
            for a in j["attempts"]
        )
        switches, where = switch_times(svc, ids)
        detail = (
            f"{[j['status'] for j in jobs]}, makespan {makespan:.1f} s, attempts {attempts}, "
            f"preemptions {preempted}, {spread(switches)}{where}"
        )
        if SETUP["gpus"] == "auto":
            shown = ", ".join(f"{u:.0f}% / {m:.1f} GB" for u, m in use.values())
            detail += f", GPU use measured (peak busy / memory): {shown or 'none'}"
            ok = ok and len(use) == len(ids)
        if workers.get("standby"):
            detail += f", started warm {warm}"
            ok = ok and warm >= 1
        if workers.get("warm"):
            resumed = sum(
                RESIDENT in svc.admin.logs(j["id"], 0, a["number"]).text
                for j in jobs
                for a in j["attempts"]
            )
            detail += f", attempts run in the warm worker {in_worker}, resumed in memory {resumed}"
            ok = ok and in_worker >= 1
        if not ok:
            detail += " | " + svc.admin.logs(ids[0], 0, None).text[-400:].replace("\n", " ")
        return ok, detail
    finally:
        svc.close()


def hare_keepers(folder: Path) -> tuple[bool, str]:
    """A job run as Hare's rounds of one-GPU tasks, with round keepers (in standby
    workers) holding it on the GPU between its tasks."""
    svc = service(folder, "hare", {}, workers={"standby": 1, "keep": 1})
    try:
        task = {**SETUP["model"], "steps": 12, "round_steps": 2}
        job = svc.client.submit({"name": "rounds", "task": task})
        [done] = wait_all(svc, [job["id"]], 240)
        tasks = [t for t in svc.client.history() if t["id"] != job["id"]]
        reports = []
        for t in tasks:
            lines = svc.client.logs(t["id"]).text.splitlines()
            found = [json.loads(x) for x in lines if x.startswith('{"round"')]
            reports += found[:1]
        kept = [r for r in reports if r.get("kept")]
        ok = done["status"] == "SUCCEEDED" and all(t["status"] == "SUCCEEDED" for t in tasks)
        ok = ok and bool(kept)
        return ok, (
            f"{done['status']}, {len(tasks)} tasks, {len(kept)} ran on the state a keeper held"
        )
    finally:
        svc.close()


PAUSED_LINE = re.compile(r"^corral: paused at step \d+ at t=([\d.]+)$", re.M)
"""A job's log line when it gave the GPU up for a turn (or a park)."""


def gandiva_turns(folder: Path) -> tuple[bool, str]:
    """The ResNet-50 and BERT-base jobs time-sliced on one GPU by Gandiva (packing off,
    4 s quantum): the switch time from one job's pause to the other's first step."""
    svc = service(folder, "gandiva", {"quantum": 4, "packing": 0})
    try:
        ids = [
            svc.client.submit({"name": f"turns-{k}", "task": {**model, "steps": steps}})["id"]
            for k, (model, steps) in enumerate(SETUP["pair"])
        ]
        jobs = wait_all(svc, ids, 300)
        logs = {j["id"]: svc.admin.logs(j["id"], 0, None).text for j in jobs}
        switches = []
        for j, text in logs.items():
            for paused in PAUSED_LINE.findall(text):
                after = [
                    float(t) for k in ids if k != j for t in DONE_LINE.findall(logs[k])
                    if float(t) > float(paused)
                ]  # fmt: skip
                if after:
                    switches.append(min(after) - float(paused))
        ok = all(j["status"] == "SUCCEEDED" for j in jobs) and bool(switches)
        return ok, f"{[j['status'] for j in jobs]}, {spread(sorted(switches))}"
    finally:
        svc.close()


def gandiva_timeslice(folder: Path) -> tuple[bool, str]:
    svc = service(folder, "gandiva", {"quantum": 2})
    try:
        task = {**SETUP["model"], "steps": 200}
        ids = [svc.client.submit({"name": f"slice-{k}", "task": task})["id"] for k in range(2)]
        together = 0
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            states = [svc.admin.job(j)["status"] for j in ids]
            together = max(together, sum(s == "RUNNING" for s in states))
            if all(s in TERMINAL for s in states):
                break
            time.sleep(0.2)
        jobs = [svc.admin.job(j) for j in ids]
        ok = all(j["status"] == "SUCCEEDED" for j in jobs) and together == 2
        notes = sorted({str(j.get("reason")) for j in jobs})
        return (
            ok,
            f"{[j['status'] for j in jobs]}, both on the GPU at once: {together == 2}, {notes}",
        )
    finally:
        svc.close()


def pollux_live(folder: Path) -> tuple[bool, str]:
    """A live Pollux job on the GPU: the digits CNN at batch 32 with an elastic batch,
    estimating and reporting its gradient noise scale; Pollux measures its step times
    from its heartbeats, raises its batch, and the job trains at the new batch from
    its next step, in the same attempt (one GPU: the batch is what Pollux resizes)."""
    svc = service(folder, "pollux", {"interval": 2.0, "max_gpus": 1})
    try:
        device = "cuda" if SETUP["gpus"] == "auto" else "cpu"
        command = [sys.executable, "-m", "corral.examples.digits_cnn", "--device", device]
        command += ["--batch", "32", "--elastic-batch", "--noise-every", "5", "--steps", "4000"]
        spec = {"name": "pollux-live", "command": command, "gpus": 1}
        job = svc.client.submit(spec | {"model": "cifar10", "batch_size": 32})["id"]
        seen: dict[str, Any] = {}
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            seen = svc.admin.job(job)
            if seen["status"] in TERMINAL or (seen.get("batch_size") or 0) > 32:
                break
            time.sleep(0.5)
        raised = (seen.get("batch_size") or 0) > 32
        log = svc.admin.logs(job, 0, None).text
        if seen["status"] not in TERMINAL:
            svc.client.action(job, "cancel")
            wait_all(svc, [job], 60)
        attempts = len(svc.admin.job(job)["attempts"])
        applied = "(set by the scheduler)" in log
        ok = raised and applied and attempts == 1
        detail = (
            f"batch 32 -> {seen.get('batch_size')} at noise scale "
            f"{seen.get('grad_noise_scale')}, trained at it in the job: {applied}, "
            f"attempts {attempts}"
        )
        return ok, detail if ok else detail + " | " + log[-400:].replace("\n", " ")
    finally:
        svc.close()


def confinement(folder: Path) -> tuple[bool, str]:
    """A job given no GPU cannot create a CUDA context; one given the GPU can (the
    attempt's launcher, as the service starts it)."""
    from corral.runtime.execution.executor import start_launcher
    from corral.runtime.execution.gpu_devices import in_force
    from corral.runtime.execution.launcher import Confinement

    code = "import torch; torch.zeros(1, device='cuda'); print('CONTEXT MADE')"
    seen = {}
    for given in ("none", "0"):
        attempt = folder / f"given-{given}"
        attempt.mkdir(parents=True)
        child = start_launcher(
            attempt,
            Confinement(gpu_devices=given),
            [sys.executable, "-c", code],
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            attempt / "log.txt",
        )
        child.wait(120)
        log = (attempt / "log.txt").read_text()
        how = [x for x in log.splitlines() if x.startswith("corral: GPU confinement")]
        last = log.strip().splitlines()[-1] if log.strip() else ""
        seen[given] = ("CONTEXT MADE" in log, (how[0][25:] if how else "-"), last[-90:])
    ok = not seen["none"][0] and seen["0"][0]
    return ok, (
        f"in force: {in_force()}; no GPU given: context made {seen['none'][0]} "
        f"({seen['none'][1]}; {seen['none'][2]}); GPU 0 given: context made {seen['0'][0]}"
    )


def adascale(folder: Path) -> tuple[bool, str]:
    """The examples' models at 1x, 2x and 4x the batch with AdaScale on the GPU."""
    out = folder / "adascale.json"
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "adascale_steps.py"),
            "--device",
            "cuda",
            "--json",
            str(out),
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
    )
    if done.returncode != 0 or not out.exists():
        return False, (done.stderr or done.stdout)[-400:]
    parts, ok = [], True
    for result in json.loads(out.read_text()):
        runs = result["runs"]
        steps = {(r["batch_scale"], r["adascale"]): r for r in runs}
        parts.append(
            f"{result['model']}: "
            + ", ".join(
                f"{k}x{'' if a else ' base lr'} {r['steps'] if r['reached'] else 'not'}"
                for (k, a), r in steps.items()
            )
            + f" steps to loss {result['target_loss']}"
        )
        four = steps[(4, True)]
        ok = ok and four["reached"] and four["steps"] < steps[(1, True)]["steps"]
    return ok, "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", default="gpu_check.json", help="where the table goes")
    parser.add_argument("--only", default="", help="comma-separated check names")
    parser.add_argument(
        "--dry-run", action="store_true", help="no GPU: the live checks on one virtual GPU"
    )
    args = parser.parse_args()
    name = gpu_name()
    if args.dry_run and name is None:
        SETUP.update(gpus=[{"type": "V100", "count": 1}], model=DRY_RUN, pair=[(DRY_RUN, 200)] * 2)
    rows: list[dict[str, Any]] = []
    only = {n for n in args.only.split(",") if n}

    def check(key: str, fn: Callable[[], tuple[bool, str]]) -> None:
        if only and key not in only:
            return
        t0 = time.monotonic()
        try:
            ok, detail = fn()
        except Exception as exc:  # a check that breaks is a failed check, with its reason
            ok, detail = False, f"{type(exc).__name__}: {exc}"[:600]
        rows.append(
            {"check": key, "ok": ok, "seconds": round(time.monotonic() - t0, 1), "detail": detail}
        )
        print(f"{'PASS' if ok else 'FAIL'} {key} ({rows[-1]['seconds']} s): {detail}", flush=True)

    if name is None and args.dry_run:
        print("dry run: the live checks on one virtual GPU with a small model", flush=True)
        scratch = Path(tempfile.mkdtemp(prefix="corral-gpu-check-"))
        check("live-cold", lambda: two_resnets(scratch / "cold", {}))
        check("live-parked", lambda: two_resnets(scratch / "parked", {"park": 1}))
        check("live-standby", lambda: two_resnets(scratch / "standby", {"standby": 1}))
        check("live-warm", lambda: two_resnets(scratch / "warm", WARM))
        check("hare-keepers", lambda: hare_keepers(scratch / "hare"))
        check("gandiva-timeslice", lambda: gandiva_timeslice(scratch / "gandiva"))
        check("gandiva-turns", lambda: gandiva_turns(scratch / "gandiva-turns"))
        check("pollux-live", lambda: pollux_live(scratch / "pollux"))
    elif name is None:
        print("no NVIDIA GPU found (PyTorch sees no CUDA device): checking the CPU parts only")
        check("cpu-tests", lambda: run_pytest(CPU_TESTS))
    else:
        nvidia = shutil.which("nvidia-smi")
        driver = ""
        if nvidia:
            driver = subprocess.run(
                [nvidia, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
        import torch

        print(f"GPU: {name}; driver {driver or '?'}; PyTorch {torch.__version__}", flush=True)
        scratch = Path(tempfile.mkdtemp(prefix="corral-gpu-check-"))
        scratch.chmod(0o755)
        check("gpu-tests", lambda: run_pytest(GPU_TESTS))
        check("switching", switching)
        check("live-cold", lambda: two_resnets(scratch / "cold", {}))
        check("live-parked", lambda: two_resnets(scratch / "parked", {"park": 1}))
        check("live-standby", lambda: two_resnets(scratch / "standby", {"standby": 1}))
        check("live-warm", lambda: two_resnets(scratch / "warm", WARM))
        check("hare-keepers", lambda: hare_keepers(scratch / "hare"))
        check("gandiva-timeslice", lambda: gandiva_timeslice(scratch / "gandiva"))
        check("gandiva-turns", lambda: gandiva_turns(scratch / "gandiva-turns"))
        check("pollux-live", lambda: pollux_live(scratch / "pollux"))
        check("driver-read", driver_read)
        check("antman-cap", lambda: antman_cap(scratch / "antman"))
        check("confinement", lambda: confinement(scratch / "confinement"))
        check("adascale", lambda: adascale(scratch / "adascale"))
    print()
    print(f"{'check':<20} {'result':<7} {'s':>6}  detail")
    for row in rows:
        print(
            f"{row['check']:<20} {'pass' if row['ok'] else 'FAIL':<7} {row['seconds']:>6}  "
            f"{row['detail'][:150]}"
        )
    Path(args.json).write_text(json.dumps({"gpu": name, "checks": rows}, indent=2))
    passed = sum(r["ok"] for r in rows)
    print(f"{passed} of {len(rows)} checks passed" + ("" if name else " (no GPU: CPU parts only)"))
    return 0 if name is None or passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
