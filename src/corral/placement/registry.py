"""Placement strategies by name, as ``--placement`` takes them."""

from __future__ import annotations

from corral.errors import CorralError
from corral.placement.network import NetworkBestFit
from corral.placement.relaxed import RelaxedLocality
from corral.placement.sensitivity import ModelAware
from corral.placement.strategies import (
    AnyFree,
    Consolidate,
    CountOneType,
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
        CountOneType,
        RandomPlacement,
        ModelAware,
        RelaxedLocality,
        NetworkBestFit,
    )
}


def make_placement(name: str, seed: int = 0) -> PlacementStrategy:
    """A strategy by name, or one of your own: ``file.py:Class`` or ``module:Class``
    (a :class:`PlacementStrategy` subclass; one whose ``__init__`` takes ``seed`` is
    given the run's)."""
    if ":" in name:
        import inspect

        from corral.plugins import load_class

        own = load_class(name, PlacementStrategy, "placement")
        takes_seed = "seed" in inspect.signature(own).parameters
        try:
            return own(seed=seed) if takes_seed else own()
        except TypeError as exc:
            raise CorralError(f"placement '{name}': {exc}") from None
    try:
        cls = PLACEMENTS[name]
    except KeyError:
        raise CorralError(
            f"unknown placement '{name}' (choose from {', '.join(PLACEMENTS)}, or "
            "file.py:Class for one of your own)"
        ) from None
    return cls(seed) if cls is RandomPlacement else cls()
