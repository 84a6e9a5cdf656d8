"""Pollux's goodput: how fast a job really progresses at a size and batch size.

Goodput = throughput (examples/s) x statistical efficiency. A larger batch
processes more examples per second on more GPUs, but each example is worth
less: with gradient noise scale phi (examples), training at batch M instead
of the job's initial batch M0 needs ``(phi + M) / (phi + M0)`` times the
examples (McCandlish et al.), so the efficiency of M is
``E(M) = (phi + M0) / (phi + M)``. Small noise (early in training) makes large
batches wasteful; as phi grows they become nearly free, which is when Pollux
gives a job more GPUs and a larger batch.

Throughput comes from the communication model (``perf.communication``): a
step of global batch M on w GPUs of the fewest nodes takes the model's step
time at local batch M/w; or, for a scheduler that learns each job's scaling
as it runs (Pollux), from the job's own fitted model
(``estimate.step_time``). The batch is searched between M0 and the largest
batch the model was trained to the target with; a local batch beyond what
one GPU takes is run as gradient accumulation (as Pollux does), each further
micro-batch costing a compute pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corral.estimate.step_time import StepTimeModel
from corral.model.cluster import Links
from corral.perf.communication import ModelProfile, Span
from corral.perf.pollux_models import batch_limits, micro_batches, noise_curve

GRID = 24
"""Batch sizes tried between the smallest and largest allowed (geometric)."""


def efficiency(noise: float, initial: float, batch: float) -> float:
    """Statistical efficiency of ``batch`` relative to ``initial`` at noise scale ``noise``."""
    return (noise + initial) / (noise + batch)


@dataclass(frozen=True)
class GoodputModel:
    """A job's goodput as a function of GPUs and batch size."""

    profile: ModelProfile
    links: Links
    node_size: int
    initial_batch: int
    max_batch: int
    max_local: int
    fitted: StepTimeModel | None = None
    """The job's own step-time model, learnt from its measurements (None: the
    communication model's, known up front)."""

    def throughput(self, gpus: int, batch: float, span: Span | None = None) -> float:
        """Examples per second of ``gpus`` GPUs at global ``batch``, laid out as
        ``span`` (None: the fewest nodes). A local batch beyond what one GPU
        takes accumulates gradients over micro-batches: each further one costs
        a compute pass, so accumulation pays most where synchronising is dear
        (across nodes)."""
        if span is None:
            span = Span.packed(gpus, self.node_size)
        micro, local = micro_batches(batch / gpus, self.max_local)
        if self.fitted is not None:
            step = self.fitted.step_time(span.nodes, gpus, local)
            step += (micro - 1) * self.fitted.compute(local)
        else:
            step = self.profile.step_time(span, self.links, local_batch=local)
            step += (micro - 1) * self.profile.compute_time(local)
        return batch / step

    def best(self, gpus: int, noise: float, span: Span | None = None) -> tuple[float, float]:
        """(batch, goodput in examples/s at the initial batch's efficiency) that
        maximise goodput on ``gpus`` GPUs laid out as ``span`` (None: the fewest
        nodes)."""
        low = float(self.initial_batch)
        high = float(max(low, self.max_batch))
        batches = np.unique(np.geomspace(low, high, GRID)) if high > low else np.array([low])
        goodputs = [
            self.throughput(gpus, m, span) * efficiency(noise, self.initial_batch, m)
            for m in batches
        ]
        k = int(np.argmax(goodputs))
        return float(batches[k]), float(goodputs[k])


def goodput_model(
    profile: ModelProfile,
    links: Links,
    node_size: int,
    initial_batch: int,
    fitted: StepTimeModel | None = None,
) -> GoodputModel:
    max_batch, max_local = batch_limits(profile.name)
    return GoodputModel(profile, links, node_size, initial_batch, max_batch, max_local, fitted)


def noise_at(model: str, batch: int, steps: float) -> float:
    """The job's gradient noise scale after ``steps`` steps (its curve's last
    point at or before them; the first point before any; NaN when the curve
    records none)."""
    points, noise = noise_curve(model, batch)
    if not points:
        return float("nan")
    k = max(int(np.searchsorted(np.asarray(points), steps, side="right")) - 1, 0)
    return noise[k]
