"""GPU memory: what a GPU type holds and what a training job needs of it.

AntMan packs an opportunistic job onto a GPU a guaranteed job under-uses only
when both fit in its memory. Where Gavel measured a pair packed on one GPU,
its table says whether they fit (it records 0 throughput for pairs that ran
out of memory): :meth:`~corral.perf.throughputs.ThroughputTable.relative_pair`.
For other pairs this module's *stated model* is used:

* GPU memory per type: from a size in the type's name (``PHILLY-24GB``), else
  the vendor's figure for common types (K80: 12 GB per die, P100 and V100:
  16 GB as in Gavel's machines, T4: 16, A100: 40, H100: 80), else unknown.
* A job's training footprint: ``base + per_sample x batch size`` GB for the
  model families of Gavel's job types, estimated from fp32 weights, optimizer
  state and activations at the batch sizes Gavel ran (estimates, not
  measurements: a 16 GB GPU holds every family at its largest measured batch
  alone, and two large-batch ResNet-50s do not fit together, as Gavel's
  out-of-memory pairs show). Jobs of unknown type have no footprint.

Unknown on either side means "assumed to fit": AntMan's universal memory lets
the opportunistic job spill tensors to host memory rather than fail.
"""

from __future__ import annotations

import math
import re

GPU_MEMORY_GB: dict[str, float] = {
    "K80": 12.0,
    "P100": 16.0,
    "V100": 16.0,
    "T4": 16.0,
    "A100": 40.0,
    "H100": 80.0,
}

FOOTPRINT_GB: dict[str, tuple[float, float]] = {
    # family: (base GB, GB per sample of the batch)
    "ResNet-18": (0.6, 0.012),
    "ResNet-50": (1.5, 0.09),
    "Transformer": (1.2, 0.04),
    "LM": (0.8, 0.05),
    "Recommendation": (1.0, 0.0004),
    "A3C": (1.0, 0.0),
    "CycleGAN": (4.0, 0.0),
}

_SIZE_IN_NAME = re.compile(r"(\d+(?:\.\d+)?)\s*G(?:B|IB)?\b", re.IGNORECASE)
_BATCH = re.compile(r"^(.*?)\s*\(batch size (\d+)\)\s*$")


def gpu_memory_gb(gpu_type: str) -> float | None:
    """GB of memory of one GPU of this type, None when unknown."""
    match = _SIZE_IN_NAME.search(gpu_type)
    if match:
        return float(match[1])
    return GPU_MEMORY_GB.get(gpu_type.strip().upper())


def footprint_gb(job_type: str) -> float | None:
    """GB a job of this type needs on each of its GPUs (None: unknown type)."""
    match = _BATCH.match(job_type)
    family, batch = (match[1], int(match[2])) if match else (job_type.strip(), 0)
    model = FOOTPRINT_GB.get(family)
    if model is None:
        return None
    base, per_sample = model
    return base + per_sample * batch


def fits_together(job_types: list[str], gpu_type: str, squeeze: float = 1.0) -> bool:
    """Whether jobs of these types fit on one GPU of ``gpu_type`` together; the
    last one may be squeezed to ``squeeze`` of its footprint (AntMan shrinks an
    opportunistic job's memory, spilling the rest to host memory)."""
    needs = [footprint_gb(t) for t in job_types]
    if any(n is None for n in needs):
        return True
    return fits_gb([*needs[:-1], squeeze * (needs[-1] or 0.0)], gpu_type)  # type: ignore[list-item]


def fits_gb(needs: list[float], gpu_type: str) -> bool:
    """Whether needs of these many GB fit one GPU of ``gpu_type`` together;
    True when the GPU's memory or a need is unknown (NaN)."""
    memory = gpu_memory_gb(gpu_type)
    total = sum(needs)
    return memory is None or not math.isfinite(total) or total <= memory


MEMORY_MARGIN = 0.05
"""Share of a GPU's memory left unclaimed beside a shared job (allocator slack)."""
MIN_MEMORY_SHARE = 0.05


def memory_left(used_bytes: float, capacity_bytes: float) -> float:
    """The share of a GPU's memory another job may take beside ``used_bytes``."""
    share = 1.0 - used_bytes / capacity_bytes - MEMORY_MARGIN
    return round(min(max(share, MIN_MEMORY_SHARE), 1.0 - MEMORY_MARGIN), 3)
