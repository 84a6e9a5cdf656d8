"""A placement strategy of your own: worst fit.

Consolidation (corral's default) packs a job onto the fullest node it fits, to
keep whole nodes free for big gangs. Worst fit does the opposite for jobs that
fit on one node: it puts each on the node with the most free GPUs, spreading
load so jobs share a node's PCIe switches, NICs and CPUs with fewer others.
Gangs wider than a node are consolidated as usual.

    corral compare --policies fifo,las --placement examples/policies/worst_fit.py:WorstFit

    # the service's config
    placement: /home/me/policies/worst_fit.py:WorstFit
"""

from __future__ import annotations

import numpy as np

from corral.model.free_gpus import FreeGPUs
from corral.placement.strategies import Consolidate


class WorstFit(Consolidate):
    name = "worst-fit"
    description = "a job that fits on one node goes to the node with the most free GPUs"

    def choose(self, free: FreeGPUs, n: int) -> list[int] | None:
        if n > free.total:
            return None
        if n <= free.cluster.max_node_gpus:
            room = free.node_free
            fits = np.flatnonzero(room >= n)
            if len(fits):
                emptiest = int(fits[np.argmax(room[fits])])  # (the lowest-numbered on ties)
                return free.in_node(emptiest, n)
        return super().choose(free, n)
