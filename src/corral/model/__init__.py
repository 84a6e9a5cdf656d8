"""Domain types: GPU types, nodes, racks, clusters, jobs and plans.

The names are loaded on first use, so that importing one light module of the
package (the job states, say) does not import numpy and pandas.
"""

from __future__ import annotations

from corral.lazy import lazy_exports

_WHERE = {
    "Cluster": "corral.model.cluster",
    "Node": "corral.model.cluster",
    "JobStatus": "corral.model.status",
    "JobTable": "corral.model.jobs",
    "Plan": "corral.model.plan",
    "SchedulerState": "corral.model.state",
}

__getattr__ = lazy_exports("corral.model", _WHERE)


__all__ = ["Cluster", "JobStatus", "JobTable", "Node", "Plan", "SchedulerState"]
