"""Tiresias' placement rule: consolidate only the jobs that need it.

Tiresias observed that a model's sensitivity to being spread over machines
comes from tensor-size skew: models with a few very large tensors (VGG,
AlexNet: big fully connected layers) slow down badly when their parameter
exchange crosses the network, while models with many small tensors (ResNet,
Inception, GoogLeNet) barely notice. So it consolidates the skewed ones and
lets the rest take any free GPUs, which lowers queueing for everyone else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.errors import CorralError
from corral.model.free_gpus import FreeGPUs
from corral.placement.strategies import AnyFree, Consolidate, PlacementStrategy

if TYPE_CHECKING:
    from corral.model.state import SchedulerState

SKEWED_MODELS = frozenset({"alexnet", "vgg11", "vgg13", "vgg16", "vgg19"})
"""Placement-sensitive: large fully connected layers (skewed tensor sizes)."""

BALANCED_MODELS = frozenset(
    {
        "googlenet",
        "inception3",
        "inception4",
        "resnet18",
        "resnet34",
        "resnet50",
        "resnet101",
        "resnet152",
    }
)
"""Not placement-sensitive: many small tensors."""


class ModelAware(PlacementStrategy):
    """Consolidate skewed models; any free GPUs for balanced ones.

    ``unknown`` says what models on neither list get: ``consolidate`` (the
    safe default: a scheduler that does not know a model should not risk it)
    or ``any``.
    """

    name = "model-aware"
    description = "consolidate placement-sensitive models only (Tiresias)"

    def __init__(self, unknown: str = "consolidate") -> None:
        if unknown not in ("consolidate", "any"):
            raise CorralError(
                f"unknown-model placement must be 'consolidate' or 'any', got {unknown}"
            )
        self.unknown = unknown
        self._consolidate = Consolidate()
        self._any = AnyFree()

    def sensitive(self, model: str) -> bool:
        name = model.strip().lower()
        if name in SKEWED_MODELS:
            return True
        if name in BALANCED_MODELS:
            return False
        return self.unknown == "consolidate"

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        return (self._consolidate if self.unknown == "consolidate" else self._any).choose(free, n)

    def choose_job(self, free: FreeGPUs, state: SchedulerState, i: int) -> list[int] | None:
        strategy = self._consolidate if self.sensitive(state.model[i]) else self._any
        return strategy.choose(free, int(state.gpus[i]))
