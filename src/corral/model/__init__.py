"""Domain types: GPU types, nodes, racks, clusters, jobs and plans."""

from corral.model.cluster import Cluster, Node
from corral.model.jobs import JobStatus, JobTable
from corral.model.plan import Plan
from corral.model.state import SchedulerState

__all__ = ["Cluster", "JobStatus", "JobTable", "Node", "Plan", "SchedulerState"]
