"""Building clusters from presets, corral's YAML spec and Tiresias cluster CSVs.

``--cluster`` accepts:

* ``philly`` / ``philly-revised``: the real Philly machine lists;
* ``alibaba-pai``: the real Alibaba PAI GPU machines (CPU-only ones dropped);
* ``gavel:<v100>:<p100>:<k80>``: GPU counts, servers of 4 GPUs (Gavel's setup);
* ``uniform:<nodes>x<gpus-per-node>:<type>``, e.g. ``uniform:16x4:V100``;
* a path to a YAML spec (see :func:`cluster_from_yaml`) or to a Tiresias
  cluster CSV (recognised by its header).
"""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from corral.data import data_path
from corral.errors import CorralError, InputError
from corral.model.cluster import (
    DEFAULT_RACK_SIZE,
    LINK_PRESETS,
    Cluster,
    Links,
    Node,
    assign_racks,
    normalise_gpu_type,
)
from corral.yamlio import LineDict, load_yaml, validation_error

TIRESIAS_HEADER = [
    "num_switch",
    "num_node_p_switch",
    "num_gpu_p_node",
    "num_cpu_p_node",
    "mem_p_node",
]
TIRESIAS_GPU_TYPE = "P100"
"""Tiresias' specs do not name a GPU type; its testbed used P100s."""

PRESETS = {
    "philly": "the real Philly cluster: 552 machines, 2,490 GPUs (321 x 2, 231 x 8)",
    "philly-revised": "Philly with the corrected machine list (3,205 GPUs)",
    "tiresias": "Tiresias' simulator cluster: 1 switch x 16 nodes x 4 GPUs (64 GPUs)",
    "alibaba-pai": "Alibaba PAI 2020: 1,814 machines, 6,742 P100/T4/V100/V100M32/MISC GPUs",
    "gavel:<v100>:<p100>:<k80>": "Gavel-style heterogeneous cluster, servers of 4 GPUs",
    "uniform:<nodes>x<gpus>:<type>": "identical nodes, e.g. uniform:16x4:V100",
}


def load_cluster(spec: str, rack_size: int | None = None, scale: float = 1.0) -> Cluster:
    """Resolve a ``--cluster`` value, then apply ``--cluster-scale``."""
    cluster = _resolve(spec.strip(), rack_size)
    return cluster.scaled(scale) if scale != 1.0 else cluster


def _resolve(spec: str, rack_size: int | None) -> Cluster:
    lowered = spec.lower()
    if lowered == "philly":
        return philly_cluster("machine_list.csv", rack_size)
    if lowered == "philly-revised":
        return philly_cluster("machine_list_revised.csv", rack_size)
    if lowered == "alibaba-pai":
        return alibaba_pai_cluster(rack_size)
    if lowered == "tiresias":
        return tiresias_cluster(data_path("tiresias", "cluster_spec.csv"), name="tiresias")
    if lowered.startswith("gavel:"):
        return gavel_cluster(spec, rack_size)
    if lowered.startswith("uniform:"):
        return uniform_cluster(spec, rack_size)
    path = Path(spec)
    if not path.exists():
        raise CorralError(
            f"unknown cluster '{spec}': not a file and not a preset (presets: {', '.join(PRESETS)})"
        )
    with path.open(encoding="utf-8") as fh:
        first = fh.readline()
    if [c.strip() for c in first.strip().split(",")] == TIRESIAS_HEADER:
        return tiresias_cluster(path)
    return cluster_from_yaml(path, rack_size)


def philly_cluster(filename: str, rack_size: int | None = None) -> Cluster:
    """Philly's machines from the trace's machine list.

    The plain list gives GPU memory (12 GB or 24 GB) but not the model, so the
    GPU types are named by memory. The revised list has no memory column; its
    machines are typed by GPU count as in the plain list (2 -> 12 GB, 8 -> 24 GB).
    """
    path = data_path("philly", filename)
    nodes: list[Node] = []
    with path.open(encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader)]
        for line, row in enumerate(reader, start=2):
            rec = dict(zip(header, (c.strip() for c in row), strict=False))
            name = rec.get("machineId", "")
            gpus = _int_field(rec.get("number of GPUs", ""), path, line, "number of GPUs")
            mem = rec.get("single GPU mem") or ("12GB" if gpus <= 2 else "24GB")
            nodes.append(Node(name=name, gpu_type=f"PHILLY-{mem.upper()}", gpus=gpus))
    size = rack_size or DEFAULT_RACK_SIZE
    name = "philly" if filename == "machine_list.csv" else "philly-revised"
    return Cluster(name, assign_racks(nodes, size), rack_size=size)


def alibaba_pai_cluster(rack_size: int | None = None) -> Cluster:
    """Alibaba PAI (cluster-trace-gpu-v2020): machine, gpu_type, cap_cpu, cap_mem, cap_gpu."""
    path = data_path("alibaba", "pai_machine_spec.csv")
    nodes: list[Node] = []
    with path.open(encoding="utf-8") as fh:
        for line, row in enumerate(csv.reader(fh), start=1):
            if len(row) != 5:
                raise InputError(str(path), line, None, f"expected 5 fields, found {len(row)}")
            machine, gpu_type, cpu, mem, gpus = (c.strip() for c in row)
            n_gpus = _int_field(gpus, path, line, "cap_gpu")
            if n_gpus == 0:
                continue
            nodes.append(
                Node(
                    name=machine,
                    gpu_type=normalise_gpu_type(gpu_type),
                    gpus=n_gpus,
                    cpus=_int_field(cpu, path, line, "cap_cpu"),
                    memory_gb=float(mem),
                )
            )
    size = rack_size or DEFAULT_RACK_SIZE
    return Cluster("alibaba-pai", assign_racks(nodes, size), rack_size=size)


def gavel_cluster(spec: str, rack_size: int | None = None) -> Cluster:
    """``gavel:<v100>:<p100>:<k80>`` GPU counts, in servers of 4 GPUs."""
    parts = spec.split(":")[1:]
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise CorralError(f"cluster '{spec}': expected gavel:<v100>:<p100>:<k80> (GPU counts)")
    nodes: list[Node] = []
    for gpu_type, count in zip(("V100", "P100", "K80"), (int(p) for p in parts), strict=True):
        full, rest = divmod(count, 4)
        sizes = [4] * full + ([rest] if rest else [])
        for i, size in enumerate(sizes):
            nodes.append(Node(name=f"{gpu_type.lower()}-{i}", gpu_type=gpu_type, gpus=size))
    size = rack_size or DEFAULT_RACK_SIZE
    return Cluster(spec, assign_racks(nodes, size), rack_size=size)


_UNIFORM = re.compile(r"^uniform:(\d+)x(\d+):([A-Za-z0-9_.\-]+)$", re.IGNORECASE)


def uniform_cluster(spec: str, rack_size: int | None = None) -> Cluster:
    """``uniform:<nodes>x<gpus-per-node>:<type>``."""
    match = _UNIFORM.match(spec)
    if not match:
        raise CorralError(f"cluster '{spec}': expected uniform:<nodes>x<gpus-per-node>:<type>")
    n_nodes, per_node, gpu_type = int(match[1]), int(match[2]), normalise_gpu_type(match[3])
    if n_nodes < 1 or per_node < 1:
        raise CorralError(f"cluster '{spec}': node and GPU counts must be at least 1")
    nodes = [Node(name=f"node{i}", gpu_type=gpu_type, gpus=per_node) for i in range(n_nodes)]
    size = rack_size or DEFAULT_RACK_SIZE
    return Cluster(spec, assign_racks(nodes, size), rack_size=size)


def tiresias_cluster(path: Path, name: str | None = None) -> Cluster:
    """A Tiresias cluster CSV: switches (racks) x nodes per switch x GPUs per node."""
    with path.open(encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2:
        raise InputError(str(path), 2, None, "no cluster row after the header")
    row = [c.strip() for c in rows[1]]
    if len(row) != len(TIRESIAS_HEADER):
        raise InputError(
            str(path), 2, None, f"expected {len(TIRESIAS_HEADER)} fields, found {len(row)}"
        )
    values = {
        field: _int_field(value, path, 2, field)
        for field, value in zip(TIRESIAS_HEADER, row, strict=True)
    }
    nodes = [
        Node(
            name=f"s{s}n{n}",
            gpu_type=TIRESIAS_GPU_TYPE,
            gpus=values["num_gpu_p_node"],
            cpus=values["num_cpu_p_node"],
            memory_gb=float(values["mem_p_node"]),
            rack=s,
        )
        for s in range(values["num_switch"])
        for n in range(values["num_node_p_switch"])
    ]
    return Cluster(name or path.stem, nodes, rack_size=values["num_node_p_switch"])


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


def _int_field(value: str, path: Path | str, line: int, field: str) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        raise InputError(str(path), line, field, f"expected an integer, got '{value}'") from None
