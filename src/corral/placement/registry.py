"""Placement strategies by name, as ``--placement`` takes them."""

from __future__ import annotations

from corral.errors import CorralError
from corral.placement.network import NetworkBestFit
from corral.placement.relaxed import RelaxedLocality
from corral.placement.sensitivity import ModelAware
from corral.placement.strategies import (
    AnyFree,
    Consolidate,
    PlacementStrategy,
    RandomPlacement,
    Spread,
)

PLACEMENTS: dict[str, type[PlacementStrategy]] = {
    cls.name: cls
    for cls in (
        Consolidate,
        Spread,
        AnyFree,
        RandomPlacement,
        ModelAware,
        RelaxedLocality,
        NetworkBestFit,
    )
}


def make_placement(name: str, seed: int = 0) -> PlacementStrategy:
    try:
        cls = PLACEMENTS[name]
    except KeyError:
        raise CorralError(
            f"unknown placement '{name}' (choose from {', '.join(PLACEMENTS)})"
        ) from None
    return cls(seed) if cls is RandomPlacement else cls()
