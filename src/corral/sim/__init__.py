"""The discrete-event simulator: engine, invariants, metrics and reports.

The names are loaded on first use, so the CLI can read the presets without
importing the engine.
"""

from __future__ import annotations

from corral.lazy import lazy_exports

_WHERE = {
    "SimConfig": "corral.sim.result",
    "SimResult": "corral.sim.result",
    "Simulator": "corral.sim.engine",
}

__getattr__ = lazy_exports("corral.sim", _WHERE)


__all__ = ["SimConfig", "SimResult", "Simulator"]
