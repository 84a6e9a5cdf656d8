"""Slowdown of a gang spread over several nodes or racks.

For a model we know nothing about, a gang on one node runs at full speed,
across nodes of one rack at ``cross_node`` of it, and across racks at
``cross_rack``. The defaults are deliberately mild next to Pollux's
measurements (4 GPUs split 2+2 over two nodes run 1.2-2.5x slower than on one
node at small per-GPU batch sizes, e.g. ResNet-50 0.16 s vs 0.38 s per step,
BERT 0.53 s vs 1.95 s), because large-batch jobs hide most of the sync cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from corral.errors import CorralError
from corral.model.cluster import Cluster


@dataclass(frozen=True)
class LocalityModel:
    cross_node: float = 0.8
    cross_rack: float = 0.7

    def __post_init__(self) -> None:
        for name in ("cross_node", "cross_rack"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise CorralError(f"locality factor {name} must be in (0, 1], got {value}")

    def factor(self, cluster: Cluster, gpus: Sequence[int]) -> float:
        """Speed factor (<= 1) of a gang on these GPUs."""
        if len(gpus) <= 1:
            return 1.0
        idx = np.asarray(gpus, dtype=np.int64)
        nodes = cluster.gpu_node[idx]
        if (nodes == nodes[0]).all():
            return 1.0
        racks = cluster.node_rack[nodes]
        if (racks == racks[0]).all():
            return self.cross_node
        return self.cross_rack
