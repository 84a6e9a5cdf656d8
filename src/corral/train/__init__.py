"""The training library: checkpoint, resume, report progress, stop when told.

Its names are loaded on first use, so a process that only needs a small part
(a task of a round handing its work to a keeper) starts without NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.train.adascale import AdaScale
    from corral.train.noise import GradientNoise
    from corral.train.session import STOPPED_EXIT, Session

__all__ = ["STOPPED_EXIT", "AdaScale", "GradientNoise", "Session"]
_WHERE = {
    "AdaScale": "adascale",
    "GradientNoise": "noise",
    "Session": "session",
    "STOPPED_EXIT": "session",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'corral.train' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"corral.train.{_WHERE[name]}"), name)
