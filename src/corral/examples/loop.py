"""The training loop both examples share: resume, train, report, stop when told.

Batches are a function of the step number (drawn from a generator seeded by
``(seed, step)``), and the RNG state travels in the checkpoint, so a run that
is preempted and resumed computes exactly what an uninterrupted run would.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from corral.train import AdaScale, GradientNoise, Session

TARGET_WINDOW = 50
"""Steps the target loss is averaged over (one step's loss is noisy). A resumed
run refills the window first, so it stops where an uninterrupted run would, up
to the steps it takes to refill."""


def parse_args(description: str, steps: int, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps, help="training steps in all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument(
        "--step-time", type=float, default=0.0, help="extra seconds per step (a larger model)"
    )
    parser.add_argument("--checkpoint-every", type=float, default=60.0, help="seconds")
    parser.add_argument("--result", type=Path, default=None, help="write final metrics (JSON) here")
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument(
        "--batch", type=int, default=None, help="batch per GPU (default: the model's)"
    )
    parser.add_argument(
        "--elastic-batch",
        action="store_true",
        help="global batch = --batch x the GPUs this attempt was given (a job resized by "
        "optimus or pollux trains at its new size's batch from its checkpoint on)",
    )
    parser.add_argument(
        "--noise-every",
        type=int,
        default=0,
        help="estimate the gradient noise scale every N steps and report it (0: never)",
    )
    parser.add_argument(
        "--adascale",
        action="store_true",
        help="scale the learning rate by AdaScale's gain when the batch is bigger than "
        "--batch (needs --noise-every: the gain is read from the noise scale)",
    )
    parser.add_argument(
        "--batch-scale",
        type=int,
        default=1,
        help="train at this many times the batch, as a scheduler that gave the job that "
        "many GPUs would (AdaScale's base batch stays --batch)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda, cuda:N, or auto (the GPU when PyTorch sees one, else the CPU)",
    )
    parser.add_argument(
        "--target-loss",
        type=float,
        default=None,
        help="stop once the training loss (averaged over the last 50 steps) is this low",
    )
    return parser.parse_args(argv)


def device_of(args: argparse.Namespace) -> torch.device:
    """Where the model and its data live (``--device``)."""
    if args.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(args.device)


def grad_sqnorm(model: torch.nn.Module) -> float:
    """Squared norm of the model's current gradient."""
    return float(
        sum(float((p.grad.detach() ** 2).sum()) for p in model.parameters() if p.grad is not None)
    )


def train(
    args: argparse.Namespace,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train_step: Callable[[int, int], torch.Tensor],
    evaluate: Callable[[], dict[str, float]],
    batch: int,
) -> dict[str, Any]:
    """Run ``train_step(step, batch size)`` for steps [restored, args.steps); returns
    the final metrics. ``batch`` is the model's batch per GPU (``--batch`` overrides)."""
    torch.set_num_threads(1)  # small models: one thread is fastest and deterministic
    session = Session(model=model, optimizer=optimizer, checkpoint_every=args.checkpoint_every)
    step = session.restore()
    size = (args.batch or batch) * (session.num_gpus if args.elastic_batch else 1)
    size *= max(args.batch_scale, 1)
    if step:
        print(f"resumed from step {step} at t={time.time():.3f} (batch {size})", flush=True)
    noise = GradientNoise() if args.noise_every > 0 else None
    scale = (
        AdaScale(optimizer, base_batch=args.batch or batch, noise=noise)
        if args.adascale and noise is not None
        else None
    )
    recent: deque[float] = deque(maxlen=TARGET_WINDOW)
    while step < args.steps:
        model.train()
        if args.elastic_batch and session.batch_size and session.batch_size != size:
            print(
                f"step {step}: batch {size} -> {session.batch_size} (set by the scheduler)",
                flush=True,
            )
            size = session.batch_size
        small: float | None = None
        if noise is not None and step % args.noise_every == 0 and size >= 2:
            optimizer.zero_grad(set_to_none=True)
            train_step(step, size // 2).backward()
            small = grad_sqnorm(model)
        optimizer.zero_grad(set_to_none=True)
        loss = train_step(step, size)
        loss.backward()
        if noise is not None and small is not None:
            noise.update(small, size // 2, grad_sqnorm(model), size)
        if scale is not None:
            scale.step(size)
        optimizer.step()
        step += 1
        if args.step_time > 0:
            time.sleep(args.step_time)
        session.report(
            step,
            loss=loss.item(),
            batch_size=size,
            grad_noise_scale=noise.scale if noise is not None else None,
        )
        if step % args.log_every == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        recent.append(loss.item())
        if (
            args.target_loss is not None
            and len(recent) == TARGET_WINDOW
            and sum(recent) / TARGET_WINDOW <= args.target_loss
        ):
            print(f"reached the target loss {args.target_loss} at step {step}", flush=True)
            break
        if session.should_stop and step < args.steps:
            print(f"stopping at step {step}: {session.stop_reason}", flush=True)
            session.stop(step)
    model.eval()
    with torch.no_grad():
        metrics: dict[str, Any] = {"final_step": step, **evaluate()}
    if recent:  # what --target-loss compares: the training loss over the last steps
        metrics["recent_loss"] = sum(recent) / len(recent)
    session.finish(step)
    print(json.dumps(metrics), flush=True)
    result = args.result or _default_result()
    if result is not None:
        result.parent.mkdir(parents=True, exist_ok=True)
        result.write_text(json.dumps(metrics))
    return metrics


def _default_result() -> Path | None:
    folder = os.environ.get("CORRAL_CHECKPOINT_DIR")
    return Path(folder) / "result.json" if folder else None


def batch_rng(seed: int, step: int) -> np.random.Generator:
    """The generator of one step's batch: the same whether or not the run was interrupted."""
    return np.random.default_rng([seed, step])
