"""The cluster topology: nodes with GPUs of one type each, grouped in racks.

A :class:`Cluster` is immutable. Besides the node list it keeps flat numpy
arrays (GPU -> node, node -> rack, node -> first GPU id) because placement and
locality checks run inside the simulator's hot loop; GPU ids are dense
integers ``0 .. total_gpus-1`` numbered node by node.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from corral.errors import CorralError

DEFAULT_RACK_SIZE = 16
"""Nodes per rack when a spec does not say (a typical top-of-rack switch)."""


@dataclass(frozen=True)
class Node:
    """One machine. ``rack`` is an index into :attr:`Cluster.racks`."""

    name: str
    gpu_type: str
    gpus: int
    cpus: int = 0
    memory_gb: float = 0.0
    rack: int = 0

    @property
    def kind(self) -> tuple[str, int, int, float]:
        """Machines of one kind are interchangeable; scaling keeps their mix."""
        return (self.gpu_type, self.gpus, self.cpus, self.memory_gb)


@dataclass(frozen=True)
class Links:
    """What a gang's gradient traffic crosses: effective bandwidths (GB/s, each
    direction) and per-hop latencies (seconds) inside a node, between nodes of a
    rack and between racks.

    The defaults are what the Pollux testbed's measurements imply for PyTorch's
    data parallelism (``perf.communication.calibrate`` fits them; its test keeps
    them within reach of the fit): far below the links' nominal rates (a 50 Gb/s
    network carried ~0.55 GB/s of gradient sync), as real training stacks are.
    Across racks half the in-rack rate (2:1 oversubscribed uplinks), an assumption.
    """

    intra_node: float = 2.17
    cross_node: float = 0.55
    cross_rack: float = 0.275
    intra_latency: float = 6.5e-4
    net_latency: float = 4.5e-4

    def __post_init__(self) -> None:
        for name in ("intra_node", "cross_node", "cross_rack"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise CorralError(f"link bandwidth {name} must be a positive GB/s, got {value}")
        for name in ("intra_latency", "net_latency"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise CorralError(f"link latency {name} must be >= 0 seconds, got {value}")


LINK_PRESETS = {"pcie": 2.17, "nvlink": 40.0}
"""Named intra-node links for cluster specs (effective GB/s for gradient
all-reduce): PCIe as the Pollux testbed measured; NVLink ~18x it, the ratio of
NVLink 2 (V100, 150 GB/s) to PCIe 3 x16 (~8 GB/s nominal)."""


class Cluster:
    """A set of GPU nodes in racks."""

    def __init__(
        self,
        name: str,
        nodes: Sequence[Node],
        racks: Sequence[str] | None = None,
        rack_size: int | None = None,
        links: Links | None = None,
    ) -> None:
        nodes = tuple(n for n in nodes if n.gpus > 0)
        if not nodes:
            raise CorralError(f"cluster '{name}' has no GPUs")
        self.name = name
        self.nodes: tuple[Node, ...] = nodes
        n_racks = max(n.rack for n in nodes) + 1
        self.racks: tuple[str, ...] = (
            tuple(racks) if racks is not None else tuple(f"rack{i}" for i in range(n_racks))
        )
        if len(self.racks) < n_racks:
            raise CorralError(
                f"cluster '{name}': a node names rack {n_racks - 1} of {len(racks or [])}"
            )
        self.rack_size = rack_size
        self.links = links or Links()
        self.node_gpus = np.array([n.gpus for n in nodes], dtype=np.int64)
        self.node_rack = np.array([n.rack for n in nodes], dtype=np.int64)
        self.node_first_gpu = np.concatenate(([0], np.cumsum(self.node_gpus)[:-1])).astype(np.int64)
        self.total_gpus = int(self.node_gpus.sum())
        self.gpu_node = np.repeat(np.arange(len(nodes), dtype=np.int64), self.node_gpus)
        self.gpu_rack = self.node_rack[self.gpu_node]
        self.node_types: tuple[str, ...] = tuple(n.gpu_type for n in nodes)
        type_names = sorted(set(self.node_types))
        self.gpu_type_names: tuple[str, ...] = tuple(type_names)
        type_index = {t: i for i, t in enumerate(type_names)}
        self.gpu_type_id = np.repeat(
            np.array([type_index[t] for t in self.node_types], dtype=np.int64), self.node_gpus
        )
        self.type_gpus = np.bincount(self.gpu_type_id, minlength=len(type_names)).astype(np.int64)
        """GPUs of each type, in ``gpu_type_names`` order."""
        self.max_node_gpus = int(self.node_gpus.max())
        # Plain-list copies for scalar lookups in hot loops (numpy indexing of
        # one element costs more than a list's).
        self.gpu_node_list: list[int] = self.gpu_node.tolist()
        self.node_rack_list: list[int] = self.node_rack.tolist()
        self.node_first_gpu_list: list[int] = self.node_first_gpu.tolist()
        self.node_gpus_list: list[int] = self.node_gpus.tolist()
        self.gpu_rack_list: list[int] = self.gpu_rack.tolist()
        self.rack_node_bits: list[int] = [0] * len(self.racks)
        """Bit ``node`` set in entry ``rack`` for each node of the rack (bitset
        placement reads it with the free-GPU index)."""
        for node, rack in enumerate(self.node_rack_list):
            self.rack_node_bits[rack] |= 1 << node
        self.capacity_fullest_first: list[int] = np.cumsum(np.sort(self.node_gpus)[::-1]).tolist()
        """GPUs held by the k largest nodes, for k = 1, 2, ... (how few servers
        can hold a gang)."""

    def __repr__(self) -> str:
        return f"Cluster({self.name!r}, {len(self.nodes)} nodes, {self.total_gpus} GPUs)"

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def type_name(self, gpu: int) -> str:
        """The type of GPU ``gpu`` (a gang's GPUs share one type)."""
        return self.gpu_type_names[int(self.gpu_type_id[gpu])]

    def in_layout(self, gpus: Sequence[int] | np.ndarray, nodes: int) -> bool:
        """Whether ``gpus`` lie on exactly ``nodes`` nodes, the same number on each
        (a gang asked for as ``-N nodes --gpus-per-node``)."""
        counts = np.bincount(self.gpu_node[np.asarray(gpus, dtype=np.int64)])
        used = counts[counts > 0]
        return len(used) == nodes > 0 and int(used.min()) == int(used.max())

    def gpus_by_type(self) -> dict[str, int]:
        """GPU count per GPU type."""
        counts: Counter[str] = Counter()
        for node in self.nodes:
            counts[node.gpu_type] += node.gpus
        return dict(sorted(counts.items()))

    def describe(self) -> str:
        """One line for people: size, types and racks."""
        types = ", ".join(f"{c} {t}" for t, c in self.gpus_by_type().items())
        return (
            f"{self.name}: {self.num_nodes} nodes, {self.total_gpus} GPUs ({types}), "
            f"{len(self.racks)} racks"
        )

    def scaled(self, factor: float) -> Cluster:
        """A cluster ``factor`` times as large with the same mix of machine kinds.

        Each kind's node count is rounded to the nearest integer; kinds that
        round to zero are dropped, but a cluster never scales to nothing.
        Racks are re-formed with the original rack size.
        """
        if not math.isfinite(factor) or factor <= 0:
            raise CorralError(f"--cluster-scale must be a positive number, got {factor}")
        if factor == 1.0:
            return self
        by_kind: dict[tuple[str, int, int, float], list[Node]] = {}
        for node in self.nodes:
            by_kind.setdefault(node.kind, []).append(node)
        kept: list[Node] = []
        for group in by_kind.values():
            count = math.floor(len(group) * factor + 0.5)
            if factor > 1:
                kept.extend(_grow(group, count))
            else:
                kept.extend(group[:count])
        if not kept:
            biggest = max(by_kind.values(), key=len)
            kept = biggest[:1]
        rack_size = self.rack_size or max(1, round(len(self.nodes) / len(self.racks)))
        return Cluster(
            f"{self.name}x{factor:g}",
            assign_racks(kept, rack_size),
            rack_size=rack_size,
            links=self.links,
        )


def _grow(group: list[Node], count: int) -> list[Node]:
    """``count`` nodes of the group's kind: its own nodes, then numbered copies."""
    out = list(group)
    template = group[0]
    for i in range(len(group), count):
        out.append(replace(template, name=f"{template.name}-s{i}"))
    return out[:count]


def assign_racks(nodes: Iterable[Node], rack_size: int) -> list[Node]:
    """Put nodes into racks of ``rack_size``, machines of one kind together.

    Real racks hold one kind of server, so nodes are grouped by kind (in order
    of first appearance) before being cut into racks.
    """
    if rack_size < 1:
        raise CorralError(f"rack size must be at least 1, got {rack_size}")
    by_kind: dict[tuple[str, int, int, float], list[Node]] = {}
    for node in nodes:
        by_kind.setdefault(node.kind, []).append(node)
    out: list[Node] = []
    rack = 0
    for group in by_kind.values():
        for start in range(0, len(group), rack_size):
            out.extend(replace(n, rack=rack) for n in group[start : start + rack_size])
            rack += 1
    return out
