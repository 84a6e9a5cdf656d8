"""Slowdown of a gang spread over several nodes or racks.

For a model the communication model knows (Pollux's six: BERT, CIFAR-10 /
ResNet-18, DeepSpeech2, ImageNet / ResNet-50, NCF, YOLOv3), the factor is its
predicted step time on the fewest whole nodes over its step time as placed,
over the cluster's links (``perf.communication``: fitted to Pollux's
placement measurements, any gang size, racks included). Models it does not
know use the configured factors: a gang on one node runs at full speed,
across nodes of one rack at ``cross_node`` of it, and across racks at
``cross_rack``. The defaults are deliberately mild next to Pollux's
measurements (4 GPUs split 2+2 over two nodes run 1.2-2.5x slower than on one
node at small per-GPU batch sizes, e.g. ResNet-50 0.16 s vs 0.38 s per step,
BERT 0.53 s vs 1.95 s), because large-batch jobs hide most of the sync cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from corral.errors import CorralError
from corral.model.cluster import Cluster
from corral.perf.communication import model_profile, spread_factor


@dataclass(frozen=True)
class LocalityModel:
    cross_node: float = 0.8
    cross_rack: float = 0.7
    measured: bool = True
    """Use the communication model for the models it knows."""

    def __post_init__(self) -> None:
        for name in ("cross_node", "cross_rack"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise CorralError(f"locality factor {name} must be in (0, 1], got {value}")

    def factor(self, cluster: Cluster, gpus: Sequence[int], model: str = "") -> float:
        """Speed factor (<= 1) of a gang on these GPUs."""
        if len(gpus) <= 1:
            return 1.0
        gpu_node = cluster.gpu_node_list
        nodes = {gpu_node[g] for g in gpus}
        if len(nodes) == 1:
            return 1.0
        profile = model_profile(model) if self.measured and model else None
        if profile is not None:
            return spread_factor(profile, cluster, gpus)
        rack = cluster.node_rack_list
        return self.cross_node if len({rack[node] for node in nodes}) == 1 else self.cross_rack
