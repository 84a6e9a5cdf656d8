"""Choosing concrete GPUs for a job: free-GPU bookkeeping and strategies."""

from corral.model.free_gpus import FreeGPUs
from corral.placement.registry import PLACEMENTS, make_placement
from corral.placement.sensitivity import ModelAware
from corral.placement.strategies import (
    AnyFree,
    Consolidate,
    PlacementStrategy,
    RandomPlacement,
    Spread,
)

__all__ = [
    "PLACEMENTS",
    "AnyFree",
    "Consolidate",
    "FreeGPUs",
    "ModelAware",
    "PlacementStrategy",
    "RandomPlacement",
    "Spread",
    "make_placement",
]
