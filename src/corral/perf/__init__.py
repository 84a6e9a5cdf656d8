"""How fast a job runs on an allocation, and what switching it costs."""

from corral.perf.locality import LocalityModel
from corral.perf.switching import SWITCH_MECHANISMS, switch_cost_seconds

__all__ = ["SWITCH_MECHANISMS", "LocalityModel", "switch_cost_seconds"]
