"""Choosing concrete GPUs for a job: free-GPU bookkeeping and strategies."""

from corral.model.free_gpus import FreeGPUs
from corral.placement.strategies import (
    PLACEMENTS,
    Consolidate,
    PlacementStrategy,
    RandomPlacement,
    Spread,
    make_placement,
)

__all__ = [
    "PLACEMENTS",
    "Consolidate",
    "FreeGPUs",
    "PlacementStrategy",
    "RandomPlacement",
    "Spread",
    "make_placement",
]
