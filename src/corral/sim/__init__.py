"""The discrete-event simulator: engine, invariants, metrics and reports."""

from corral.sim.engine import SimConfig, SimResult, Simulator

__all__ = ["SimConfig", "SimResult", "Simulator"]
