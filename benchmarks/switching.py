"""Cold against warm task switching, for the example models.

    python benchmarks/switching.py              # 20 switches of each kind per model
    python benchmarks/switching.py --switches 5 --models digits

**Cold** is today's preemption: the outgoing job writes its checkpoint to
disk, and a new process starts, imports PyTorch, builds the model and
optimiser and reads the checkpoint, until it is ready to run its next step
(timed from the save to the new process saying it is ready).

**Warm** is a standby worker (:class:`corral.train.task.WarmWorker`) holding
two jobs of the model and alternating between them. On a CPU it is timed
around the switch (RNG state swapped; no memory moves). On a GPU the
outgoing job's state goes to pinned host memory and the incoming one's comes
back, overlapped with its first step, so a switch is timed as what it costs
that step: the first step after the switch less the same job's next step
(paired, so the difference is the switch and nothing else). ``warm`` is the
pipelined transfer (PipeSwitch); ``copy`` moves the whole job before it
computes (the plain copy PipeSwitch compares with); ``host`` is the time the
switch itself takes on the host (queueing the copies, pointing tensors at
their new memory); ``move`` is the bare transfer, the outgoing job's state out
and the incoming one's in (switch and synchronise, no step).
On a GPU the ResNet-50 layout trains at ImageNet's shape (32 images of
224x224) unless ``--resnet-batch``/``--resnet-size`` say otherwise.

**Standby** is what ``corral serve`` does live with ``workers: {standby: N}``:
a one-step task job launched through the executor, from launch to exit,
started cold (new interpreter) or in a standby worker (PyTorch loaded).

Prints median and p95 per model and kind; the last line is the smallest
cold/warm ratio over the models measured, as ``<ratio>x``. Writes the figures
as this machine's switching profile (``--profile``; by default where
``corral sim --switch-cost measured`` looks for it), unless ``--no-profile``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from corral.perf.switching import default_profile_path, write_profile
from corral.train import checkpoint
from corral.train.task import WarmWorker, load_factory

MODELS = {
    "digits": "corral.examples.tasks:digits",
    "tiny_transformer": "corral.examples.tasks:tiny_transformer",
    "resnet50": "corral.examples.tasks:resnet50",
}
READY = (
    "import json, sys, torch; torch.set_num_threads(1)\n"
    "from corral.train import checkpoint, residency\n"
    "from corral.train.task import load_factory\n"
    "task = load_factory(sys.argv[1])(**json.loads(sys.argv[4]))\n"
    "checkpoint.restore(checkpoint.load(__import__('pathlib').Path(sys.argv[2])), task.objects)\n"
    "if sys.argv[3] != 'cpu':\n"
    "    residency.place(task.objects, sys.argv[3]); torch.cuda.synchronize()\n"
    "print('ready', flush=True)\n"
)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def cold(factory: str, switches: int, device: str, kwargs: dict[str, Any]) -> list[float]:
    task = load_factory(factory)(**kwargs)
    task.step(0)
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(switches):
            start = time.perf_counter()
            checkpoint.save(Path(folder), 1, task.objects, {})
            child = subprocess.Popen(
                [sys.executable, "-c", READY, factory, folder, device, json.dumps(kwargs)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None
            line = child.stdout.readline()
            times.append(time.perf_counter() - start)
            child.wait()
            if line.strip() != "ready":
                raise RuntimeError(f"the cold start of {factory} failed")
    return times


def warm(factory: str, switches: int, kwargs: dict[str, Any]) -> list[float]:
    """CPU: seconds around each switch of a worker alternating two jobs, one step each."""
    worker = WarmWorker()
    worker.admit("a", factory, seed=1, **kwargs)
    worker.admit("b", factory, seed=2, **kwargs)
    times = []
    for k in range(switches + 2):
        took = worker.switch_to("a" if k % 2 == 0 else "b")
        worker.run(1)
        if k >= 2:  # the first switch of each job builds its state for the first time
            times.append(took)
    return times


def warm_gpu(
    factory: str, switches: int, device: str, pipeline: bool, kwargs: dict[str, Any]
) -> dict[str, list[float]]:
    """GPU: what each switch adds to the incoming job's first step (``warm``: that
    step less the same job's next one), the host's time inside the switch
    (``host``) and the bare transfer (``move``: switch, then synchronise)."""
    worker = WarmWorker(device=device, pipeline=pipeline)
    worker.admit("a", factory, seed=1, **kwargs)
    worker.admit("b", factory, seed=2, **kwargs)
    times: dict[str, list[float]] = {"warm": [], "host": [], "move": []}
    for k in range(2 * switches + 4):
        job = "a" if k % 2 == 0 else "b"
        torch.cuda.synchronize()
        start = time.perf_counter()
        worker.switch_to(job)
        host = time.perf_counter() - start
        if k % 4 >= 2:  # every other switch of each job: the bare transfer
            torch.cuda.synchronize()
            if k >= 4:
                times["move"].append(time.perf_counter() - start)
            worker.run(2)
            continue
        worker.run(1)  # a step's loss is read on the host: it has finished
        first = time.perf_counter() - start
        start = time.perf_counter()
        worker.run(1)
        if k >= 4:  # the first switches move each job to the device for the first time
            times["warm"].append(first - (time.perf_counter() - start))
            times["host"].append(host)
    return times


def job_start(factory: str, repeats: int, standby: bool) -> list[float]:
    """Launch-to-exit seconds of a one-step task job through the local executor."""
    from corral.runtime.execution.executor import LaunchRequest, LocalExecutor
    from corral.runtime.jobspec.config import GpuGroup
    from corral.runtime.jobspec.specs import JobSpec

    spec = JobSpec.model_validate({"task": {"factory": factory, "steps": 1}})
    executor = LocalExecutor(
        [GpuGroup(type="V100", count=1)], standby=1 if standby else 0, preload=["sklearn.datasets"]
    )
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for k in range(repeats):
            if executor.pool is not None:
                while executor.pool.ready() < 1:
                    time.sleep(0.05)
            attempt = Path(folder) / f"attempt-{k}"
            attempt.mkdir()
            env = {"CORRAL_CHECKPOINT_DIR": str(attempt / "checkpoint")}
            start = time.perf_counter()
            ref = executor.launch(
                LaunchRequest(
                    spec.command,
                    env,
                    folder,
                    tuple(executor.slots()),
                    attempt,
                    attempt / "log.txt",
                    warm_argv=spec.warm_argv() if standby else None,
                )
            )
            while (record := executor.poll(ref, attempt)) is None:
                time.sleep(0.01)
            times.append(time.perf_counter() - start)
            if record.exit_code != 0:
                raise RuntimeError((attempt / "log.txt").read_text())
    if executor.pool is not None:
        executor.pool.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=20)
    parser.add_argument(
        "--cold-switches", type=int, default=None, help="cold switches (default: --switches)"
    )
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--resnet-batch", type=int, default=None, help="images per step")
    parser.add_argument("--resnet-size", type=int, default=None, help="image side, pixels")
    parser.add_argument(
        "--profile", type=Path, default=None, help="where to write the switching profile"
    )
    parser.add_argument("--no-profile", action="store_true", help="write no profile")
    parser.add_argument("--no-jobs", action="store_true", help="skip the executor's job starts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    gpu = args.device.startswith("cuda")
    where = torch.cuda.get_device_name() if gpu else "CPU"
    resnet = {
        "batch": args.resnet_batch or (32 if gpu else 2),
        "size": args.resnet_size or (224 if gpu else 64),
    }
    print(f"device: {where}; {args.switches} switches of each kind per model", end="")
    print(f" ({args.cold_switches} cold)" if args.cold_switches else "")
    print(f"resnet50 steps: {resnet['batch']} images of {resnet['size']}px")
    print(f"{'model':<18}{'params':>12}{'kind':>6}{'median ms':>12}{'p95 ms':>10}")
    ratios = []
    measured: dict[str, dict[str, float | int]] = {}
    for name in args.models.split(","):
        factory = MODELS[name]
        kwargs = resnet if name == "resnet50" else {}
        params = sum(p.numel() for p in load_factory(factory)(**kwargs).model.parameters())
        kinds = {"cold": cold(factory, args.cold_switches or args.switches, args.device, kwargs)}
        if gpu:
            kinds |= warm_gpu(factory, args.switches, args.device, True, kwargs)
            kinds["copy"] = warm_gpu(factory, args.switches, args.device, False, kwargs)["warm"]
        else:
            kinds["warm"] = warm(factory, args.switches, kwargs)
        for kind, times in kinds.items():
            median = statistics.median(times) * 1e3
            print(f"{name:<18}{params:>12,}{kind:>6}{median:>12.3f}{p95(times) * 1e3:>10.3f}")
        warm_median = max(statistics.median(kinds["warm"]), 1e-6)
        ratios.append(statistics.median(kinds["cold"]) / warm_median)
        measured[name] = {
            "parameters": params,
            "cold_median_s": statistics.median(kinds["cold"]),
            "cold_p95_s": p95(kinds["cold"]),
            "warm_median_s": statistics.median(kinds["warm"]),
            "warm_p95_s": p95(kinds["warm"]),
        }
    if not args.no_profile:
        path = args.profile or default_profile_path()
        model = write_profile(path, where, args.switches, measured)
        print(f"switching profile ({model}'s figures) written to {path}")
    if not args.no_jobs:
        print()
        print("a one-step task job through the executor, launch to exit:")
        print(f"{'model':<18}{'start':>10}{'median ms':>12}{'p95 ms':>10}")
        repeats = max(3, args.switches // 4)
        for name in args.models.split(","):
            for kind, standby in (("cold", False), ("standby", True)):
                times = job_start(MODELS[name], repeats, standby)
                median = statistics.median(times) * 1e3
                print(f"{name:<18}{kind:>10}{median:>12.1f}{p95(times) * 1e3:>10.1f}")
    print(f"{min(ratios):.0f}x")


if __name__ == "__main__":
    main()
