"""Building clusters from presets, corral's YAML spec and Tiresias cluster CSVs.

``--cluster`` accepts:

* ``philly`` / ``philly-revised``: the real Philly machine lists;
* ``alibaba-pai``: the real Alibaba PAI GPU machines (CPU-only ones dropped);
* ``gavel:<v100>:<p100>:<k80>``: GPU counts, servers of 4 GPUs (Gavel's setup);
* ``uniform:<nodes>x<gpus-per-node>:<type>``, e.g. ``uniform:16x4:V100``;
* a path to a YAML spec (see :func:`corral.model.cluster_yaml.cluster_from_yaml`) or to a Tiresias
  cluster CSV (recognised by its header).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from corral.data import data_path
from corral.errors import CorralError, InputError
from corral.model.cluster import (
    DEFAULT_RACK_SIZE,
    Cluster,
    Node,
    assign_racks,
)
from corral.model.gpu_names import normalise_gpu_type

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
    from corral.model.cluster_yaml import cluster_from_yaml  # pydantic and YAML: only here

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


def _int_field(value: str, path: Path | str, line: int, field: str) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        raise InputError(str(path), line, field, f"expected an integer, got '{value}'") from None
