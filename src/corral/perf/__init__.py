"""How fast a job runs on an allocation, and what switching it costs.

Names load on first use (see :mod:`corral.lazy`).
"""

from __future__ import annotations

from corral.lazy import lazy_exports

_WHERE = {
    "SWITCH_MECHANISMS": "corral.perf.switching",
    "LocalityModel": "corral.perf.locality",
    "switch_cost_seconds": "corral.perf.switching",
}
__getattr__ = lazy_exports("corral.perf", _WHERE)

__all__ = ["SWITCH_MECHANISMS", "LocalityModel", "switch_cost_seconds"]
