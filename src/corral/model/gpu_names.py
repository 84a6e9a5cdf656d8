"""GPU type names, in a module of their own so that reading a job spec (the
command line's ``corral submit``) needs no numpy."""

from __future__ import annotations


def normalise_gpu_type(name: str) -> str:
    """GPU type names are case-insensitive; corral spells them upper case."""
    text = str(name).strip()
    if not text:
        raise ValueError("empty GPU type")
    return text.upper()
