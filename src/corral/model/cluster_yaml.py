"""corral's YAML cluster spec, validated with pydantic.

Kept apart from :mod:`corral.model.cluster_specs` so that a run on a preset
cluster (``philly``, ``gavel:8:8:8``) does not import pydantic and YAML.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from corral.errors import InputError
from corral.model.cluster import (
    DEFAULT_RACK_SIZE,
    LINK_PRESETS,
    Cluster,
    Links,
    Node,
    assign_racks,
)
from corral.model.gpu_names import normalise_gpu_type
from corral.yamlio import LineDict, load_yaml, validation_error


class _NodeGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu_type: str = Field(min_length=1)
    gpus: int = Field(ge=1, le=64)
    count: int = Field(default=1, ge=1, le=100_000)
    name: str | None = None
    cpus: int = Field(default=0, ge=0)
    memory_gb: float = Field(default=0.0, ge=0)
    rack: str | None = None


class _LinksSpec(BaseModel):
    """Effective GB/s of gradient traffic; ``intra_node`` may name a preset."""

    model_config = ConfigDict(extra="forbid")
    intra_node: float = Field(default=Links.intra_node)
    cross_node: float = Field(default=Links.cross_node, gt=0)
    cross_rack: float = Field(default=Links.cross_rack, gt=0)
    intra_latency: float = Field(default=Links.intra_latency, ge=0)
    net_latency: float = Field(default=Links.net_latency, ge=0)

    @field_validator("intra_node", mode="before")
    @classmethod
    def _preset_or_positive(cls, value: object) -> float:
        if isinstance(value, str) and value.strip().lower() in LINK_PRESETS:
            return LINK_PRESETS[value.strip().lower()]
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            number = float("nan")
        if not number > 0:
            presets = " or ".join(LINK_PRESETS)
            raise ValueError(f"must be a positive GB/s, or {presets}; got {value!r}")
        return number

    def links(self) -> Links:
        return Links(
            intra_node=self.intra_node,
            cross_node=self.cross_node,
            cross_rack=self.cross_rack,
            intra_latency=self.intra_latency,
            net_latency=self.net_latency,
        )


class _ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    rack_size: int = Field(default=DEFAULT_RACK_SIZE, ge=1)
    nodes: list[dict[str, Any]] = Field(min_length=1)
    links: _LinksSpec | None = None


def cluster_from_yaml(path: Path, rack_size: int | None = None) -> Cluster:
    """corral's cluster spec::

    name: lab                # optional
    rack_size: 8             # nodes per rack for groups that name no rack
    nodes:
      - {gpu_type: V100, gpus: 4, count: 16, cpus: 32, memory_gb: 256}
      - {gpu_type: K80, gpus: 8, count: 4, rack: old-rack}
    links:                   # optional: effective GB/s of gradient traffic
      intra_node: nvlink     # pcie | nvlink | GB/s
      cross_node: 3.0
      cross_rack: 1.5
    """
    doc = load_yaml(path)
    source = str(path)
    if not isinstance(doc, dict):
        raise InputError(source, 1, None, "a cluster spec is a mapping with a 'nodes' list")
    try:
        spec = _ClusterSpec.model_validate(doc)
    except ValidationError as exc:
        raise validation_error(source, doc, exc) from None
    size = rack_size or spec.rack_size
    named: dict[str, list[Node]] = {}
    auto: list[Node] = []
    for i, raw in enumerate(doc["nodes"]):
        if not isinstance(raw, dict):
            line = doc.line_of("nodes") if isinstance(doc, LineDict) else None
            raise InputError(source, line, f"nodes[{i}]", "each node group is a mapping")
        try:
            group = _NodeGroup.model_validate(raw)
            gpu_type = normalise_gpu_type(group.gpu_type)
        except ValidationError as exc:
            raise validation_error(source, raw, exc, prefix=f"nodes[{i}].") from None
        prefix = group.name or f"{gpu_type.lower()}-g{i}"
        made = [
            Node(
                name=prefix if group.count == 1 else f"{prefix}-{k}",
                gpu_type=gpu_type,
                gpus=group.gpus,
                cpus=group.cpus,
                memory_gb=group.memory_gb,
            )
            for k in range(group.count)
        ]
        if group.rack is not None:
            named.setdefault(group.rack, []).extend(made)
        else:
            auto.extend(made)
    nodes: list[Node] = []
    rack_names: list[str] = []
    for rack_name, members in named.items():
        nodes.extend(replace(n, rack=len(rack_names)) for n in members)
        rack_names.append(rack_name)
    if auto:
        placed = assign_racks(auto, size)
        offset = len(rack_names)
        n_auto_racks = max(n.rack for n in placed) + 1
        nodes.extend(replace(n, rack=n.rack + offset) for n in placed)
        rack_names.extend(f"rack{offset + r}" for r in range(n_auto_racks))
    return Cluster(
        spec.name or path.stem,
        nodes,
        racks=rack_names,
        rack_size=size,
        links=spec.links.links() if spec.links is not None else None,
    )
