"""AdaScale on the examples' models: steps to the same loss at 1x, 2x and 4x the batch.

    python benchmarks/adascale_steps.py                  # on the GPU when there is one
    python benchmarks/adascale_steps.py --json out.json

Pollux gives a job a bigger batch when it gives it more GPUs, and AdaScale
scales the learning rate so that a step at the bigger batch is worth more
steps at the batch the rate was tuned for. For each example model (the
digits CNN and the tiny transformer, Adam as the examples train them), the
base run trains at its own batch for its default steps; its training loss
over the last 50 steps is the target. Then runs at 2x and 4x the batch with
AdaScale (the noise scale measured every step), and at 4x without it (the
base learning rate), train until they reach that target (at most three times
the base run's steps), and the script prints the steps each took and the
speed-up in steps over the base run. The examples' batches are their own,
drawn from the step number, so every run is reproducible.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODELS: dict[str, tuple[str, int]] = {
    "digits-cnn": ("corral.examples.digits_cnn", 400),
    "tiny-transformer": ("corral.examples.tiny_transformer", 300),
}
"""Each model's module and its default steps."""


def runner(module: str) -> Callable[[list[str]], dict[str, Any]]:
    import importlib

    main: Callable[[list[str]], dict[str, Any]] = importlib.import_module(module).main
    return main


def measure(name: str, device: str, scales: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    module, steps = MODELS[name]
    main = runner(module)
    common = ["--device", device, "--noise-every", "1", "--checkpoint-every", "1e9"]
    common += ["--log-every", "1000000"]
    t0 = time.perf_counter()
    base = main([*common, "--steps", str(steps), "--adascale"])
    target = float(base["recent_loss"])
    rows: list[dict[str, Any]] = []
    for scale, adascale in [(k, True) for k in scales] + [(max(scales), False)]:
        args = [*common, "--steps", str(3 * steps), "--target-loss", repr(target)]
        args += ["--batch-scale", str(scale)] + (["--adascale"] if adascale else [])
        began = time.perf_counter()
        out = main(args)
        reached = float(out.get("recent_loss", float("inf"))) <= target
        rows.append(
            {
                "batch_scale": scale,
                "adascale": adascale,
                "steps": int(out["final_step"]),
                "reached": reached,
                "seconds": round(time.perf_counter() - began, 2),
                "test_loss": round(float(out["test_loss"]), 4),
            }
        )
    base_steps = next(r["steps"] for r in rows if r["batch_scale"] == 1)
    for row in rows:
        row["speedup"] = round(base_steps / row["steps"], 2) if row["reached"] else None
    return {
        "model": name,
        "device": device,
        "target_loss": round(target, 4),
        "runs": rows,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['model']} on {result['device']}: target loss {result['target_loss']} "
        f"(the base batch's, over its last 50 steps)"
    ]
    for r in result["runs"]:
        how = "AdaScale" if r["adascale"] else "base lr "
        got = f"{r['steps']:>5} steps" if r["reached"] else f"not in {r['steps']} steps"
        speed = f"{r['speedup']}x fewer steps" if r["speedup"] else "-"
        lines.append(f"  {r['batch_scale']}x batch, {how}: {got}  ({speed}; {r['seconds']} s)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda, or auto")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    args = parser.parse_args()
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    results = [measure(m, device) for m in args.models.split(",") if m]
    for result in results:
        print(table(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
