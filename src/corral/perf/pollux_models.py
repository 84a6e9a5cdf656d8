"""Pollux's per-model measurements: step time by placement, and training length.

Each model folder holds ``placements.csv`` (placement as GPUs per node, e.g.
``22`` = two nodes x 2 GPUs; local batch size; step and sync time),
``scalability.csv`` (nodes, replicas, local batch size, step and sync time)
and ``validation-<batch>.csv`` (training progress until the target metric;
its last row's ``iteration`` is the number of steps a run at that global
batch size takes).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache

from corral.data import data_path
from corral.errors import CorralError

POLLUX_MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


@dataclass(frozen=True)
class StepSample:
    nodes: int
    replicas: int
    local_bsz: int
    step_time: float
    sync_time: float
    per_node: tuple[int, ...]
    """GPUs on each node (scalability runs: spread evenly)."""


@cache
def step_samples(model: str) -> tuple[StepSample, ...]:
    """All measured step times of a model (placements and scalability runs)."""
    if model not in POLLUX_MODELS:
        raise CorralError(
            f"no Pollux measurements for model '{model}' (have {', '.join(POLLUX_MODELS)})"
        )
    out: list[StepSample] = []
    with data_path("pollux", "models", model, "placements.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            digits = [int(c) for c in row["placement"].strip()]
            out.append(
                StepSample(
                    len(digits),
                    sum(digits),
                    int(row["local_bsz"]),
                    float(row["step_time"]),
                    float(row["sync_time"]),
                    tuple(digits),
                )
            )
    with data_path("pollux", "models", model, "scalability.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            nodes, replicas = int(row["num_nodes"]), int(row["num_replicas"])
            per, extra = divmod(replicas, nodes)
            out.append(
                StepSample(
                    nodes,
                    replicas,
                    int(row["local_bsz"]),
                    float(row["step_time"]),
                    float(row["sync_time"]),
                    tuple(per + (1 if i < extra else 0) for i in range(nodes)),
                )
            )
    return tuple(out)


def step_time(model: str, replicas: int, global_batch: int) -> float:
    """Measured seconds per step with the fewest nodes that hold ``replicas`` GPUs.

    Uses the sample with that replica count (or the nearest measured one) on
    the fewest nodes, at the local batch size closest to global / replicas.
    A local batch larger than any measured (than fits on a GPU) is run as
    gradient accumulation, as a real job (and Pollux's simulator) must: ``k``
    micro-batches of at most the largest measured size, so a step takes the
    sample's step time plus ``k - 1`` more compute passes (step minus sync).
    """
    samples = step_samples(model)
    counts = sorted({s.replicas for s in samples})
    nearest = min(counts, key=lambda c: (abs(c - replicas), c))
    same = [s for s in samples if s.replicas == nearest]
    fewest = min(s.nodes for s in same)
    local = global_batch / max(replicas, 1)
    micro, local = micro_batches(local, largest_local_batch(model))
    best = min(
        (s for s in same if s.nodes == fewest),
        key=lambda s: (abs(s.local_bsz - local), s.local_bsz),
    )
    return best.step_time + (micro - 1) * (best.step_time - best.sync_time)


def steps_to_target(model: str, global_batch: int) -> int:
    """Steps a run at this global batch size takes to reach the target metric."""
    return int(training_curve(model, global_batch)[0][-1])


RISING_METRICS = {"bert": 100.0, "cifar10": 1.0, "imagenet": 1.0, "ncf": 1.0}
"""Models whose validation metric rises (F1 in %, accuracy, hit rate), with its
ceiling: their loss-like curve is ceiling - metric. DeepSpeech2's (word error
rate) and YOLOv3's (validation loss) fall as they are."""


@cache
def _validation_rows(model: str, global_batch: int) -> tuple[dict[str, str], ...]:
    """The rows of a run's ``validation-<batch>.csv`` (progress to the target)."""
    path = data_path("pollux", "models", model, f"validation-{global_batch}.csv")
    if not path.exists():
        raise CorralError(f"no Pollux training curve for {model} at batch size {global_batch}")
    with path.open(encoding="utf-8") as fh:
        return tuple(csv.DictReader(fh))


@cache
def training_curve(model: str, global_batch: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(steps, loss-like value) of a run at this global batch size, falling
    towards its last point: the target the run trained to."""
    rows = _validation_rows(model, global_batch)
    steps = tuple(float(r["iteration"]) for r in rows)
    metric = [float(r["metric"]) for r in rows]
    ceiling = RISING_METRICS.get(model)
    values = tuple(ceiling - m for m in metric) if ceiling is not None else tuple(metric)
    return steps, values


@cache
def noise_curve(model: str, global_batch: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(steps, gradient noise scale) along a run at this batch size.

    The curves carry estimates of the squared gradient norm (``grad_sqr``) and
    of the gradient variance (``grad_var``) as AdaptDL records them: the
    variance of a gradient taken over the model's *initial* batch (its
    smallest trained one), whatever batch the run used, so that Pollux's gain
    at ``scale = batch / initial`` is ``(var + sqr) / (var / scale + sqr)``.
    The noise scale in examples (McCandlish et al.'s simple noise scale,
    Pollux's phi) is therefore ``initial x grad_var / grad_sqr``; it grows as
    training goes on. (Read per run's batch instead, it came out batch /
    initial times too large, 16-64x for Pollux's workloads' batches, and
    made large batches look nearly free.)
    """
    initial = trained_batches(model)[0]
    steps: list[float] = []
    noise: list[float] = []
    for row in _validation_rows(model, global_batch):
        sqr, var = float(row["grad_sqr"]), float(row["grad_var"])
        if sqr > 0 and var >= 0:
            steps.append(float(row["iteration"]))
            noise.append(initial * var / sqr)
    return tuple(steps), tuple(noise)


LOCAL_BATCH_CAPS = {"yolov3": 8}
"""Models whose largest local batch is below the largest measured: Pollux's
simulator caps YOLOv3 at 8 per GPU, though a step at 16 was measured."""


def micro_batches(local: float, largest: int) -> tuple[int, float]:
    """(passes, batch per pass) of a local batch on a GPU that takes at most
    ``largest`` in one pass: beyond it, gradients accumulate over passes."""
    micro = max(1, math.ceil(local / largest - 1e-9))
    return micro, local / micro


@cache
def largest_local_batch(model: str) -> int:
    """The largest batch one GPU takes in one pass (larger local batches
    accumulate gradients over several)."""
    measured = max(s.local_bsz for s in step_samples(model))
    return min(measured, LOCAL_BATCH_CAPS.get(model, measured))


@cache
def trained_batches(model: str) -> tuple[int, ...]:
    """The global batch sizes the model was trained to the target with, in order."""
    folder = data_path("pollux", "models", model)
    return tuple(sorted(int(p.stem.split("-")[1]) for p in folder.glob("validation-*.csv")))


@cache
def batch_limits(model: str) -> tuple[int, int]:
    """(largest global batch trained to the target, largest local batch):
    the range a batch-size search may use for this model."""
    return trained_batches(model)[-1], largest_local_batch(model)


MODEL_ALIASES = {"resnet50": "imagenet", "resnet18": "cifar10"}
"""Pollux names its workloads by data set; these are the models they train."""


def pollux_model(name: str) -> str | None:
    """The Pollux measurement folder for a model name, or None when unmeasured."""
    key = name.strip().lower()
    key = MODEL_ALIASES.get(key, key)
    return key if key in POLLUX_MODELS else None
