"""How long a data-parallel step takes: compute, plus gradient sync over the links it spans.

A step of a gang of N GPUs is the local compute of its per-GPU batch plus the
synchronisation of the model's gradients (``G`` bytes), partly hidden behind
compute as frameworks overlap the two (bucketed all-reduce during the
backward pass). Overlap is the p-norm ``(compute^p + sync^p)^(1/p)``: p = 1
adds them, p -> infinity hides the shorter one completely (Pollux's
throughput model uses this form too).

The sync time depends on the **architecture** and the **links**:

* **ring all-reduce** (NCCL, Horovod): every GPU sends and receives
  ``2 (N-1)/N x G`` over the slowest link of the ring (inside a node, between
  nodes of a rack, or between racks), plus a latency per hop.
* **parameter servers** (``servers`` S, machines of their own): a worker
  pushes ``G`` and pulls ``G``; the servers together receive ``N x G``, so
  the time is ``max(G, N G / S) / bandwidth`` over the network, for a gang
  inside one node too. Few servers make it the bottleneck.
* **BytePS** (``cpu_machines`` k spare CPU machines as summation servers
  beside the n GPU machines): each GPU machine keeps a share y of the
  summation and the CPU machines the rest; traffic per GPU machine is
  ``G (1 + (n-2) y)`` and per CPU machine ``n G (1 - n y)/k``. The best y
  balances the two; with k >= n CPU machines y = 0 and a step moves only
  ``G``, half of all-reduce's ``2 (n-1)/n G`` (BytePS' claim); with k = 0 it
  is all-reduce. Inside a GPU machine gradients are first summed over PCIe or
  NVLink.

Per model the compute time is linear in the local batch (fitted to its
1-GPU measurements), ``G`` is 4 bytes per parameter of the published models
(fitted for the two whose size Pollux's artifact does not pin down), and the
overlap exponent is fitted per model. :func:`calibrate` fits all of it, and
the links, to Pollux's placement measurements; ``docs/validation/communication.md``
reports how well it fits. The simulator's locality slowdown for a model known
here comes from this model (``LocalityModel``); others keep the fixed factors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

import numpy as np

from corral.errors import CorralError
from corral.lazy import LazyModule
from corral.model.cluster import Cluster, Links
from corral.perf.pollux_models import POLLUX_MODELS, StepSample, pollux_model, step_samples

optimize = LazyModule("scipy.optimize")

GB = 1e9

GRADIENT_BYTES: dict[str, float] = {
    "bert": 110e6 * 4,  # BERT-base, 110M parameters
    "cifar10": 11.2e6 * 4,  # ResNet-18 (CIFAR variant), 11.2M
    "imagenet": 25.6e6 * 4,  # ResNet-50, 25.6M
    "yolov3": 61.9e6 * 4,  # YOLOv3 (Darknet-53), 61.9M
}
"""fp32 gradient bytes of the models whose size is published; DeepSpeech2's
and NCF's depend on the artifact's configuration, so :func:`calibrate` fits them."""

Architecture = Literal["allreduce", "ps", "byteps"]
ARCHITECTURES: tuple[str, ...] = ("allreduce", "ps", "byteps")


@dataclass(frozen=True)
class Sync:
    """How a gang synchronises gradients."""

    architecture: Architecture = "allreduce"
    servers: int = 1
    """Parameter servers (``ps``)."""
    cpu_machines: int = 0
    """Spare CPU machines summing gradients (``byteps``)."""

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise CorralError(
                f"unknown sync architecture '{self.architecture}' "
                f"(choose from {', '.join(ARCHITECTURES)})"
            )
        if self.servers < 1 or self.cpu_machines < 0:
            raise CorralError("a parameter-server sync needs >= 1 server and >= 0 CPU machines")


@dataclass(frozen=True)
class Span:
    """Where a gang's GPUs are: GPUs on each node used, and how many racks."""

    per_node: tuple[int, ...]
    racks: int = 1

    @property
    def gpus(self) -> int:
        return sum(self.per_node)

    @property
    def nodes(self) -> int:
        return len(self.per_node)

    @classmethod
    def of(cls, cluster: Cluster, gpus: Sequence[int]) -> Span:
        nodes = cluster.gpu_node[np.asarray(gpus, dtype=np.int64)]
        used, counts = np.unique(nodes, return_counts=True)
        racks = len(np.unique(cluster.node_rack[used]))
        return cls(tuple(int(c) for c in counts), racks)

    @classmethod
    def packed(cls, gpus: int, node_size: int) -> Span:
        """The fewest nodes of ``node_size`` GPUs that hold ``gpus`` (one rack)."""
        full, rest = divmod(gpus, node_size)
        return cls(tuple([node_size] * full + ([rest] if rest else [])))


def _slowest(span: Span, links: Links) -> tuple[float, float]:
    """(GB/s, latency) of the slowest link a gang's traffic crosses."""
    if span.nodes <= 1:
        return links.intra_node, links.intra_latency
    if span.racks > 1:
        return links.cross_rack, links.net_latency
    return links.cross_node, links.net_latency


def sync_time(gradient_bytes: float, span: Span, links: Links, sync: Sync = Sync()) -> float:
    """Seconds a step spends exchanging gradients, before any overlap with compute."""
    n = span.gpus
    if n <= 1:  # one worker updates its own weights: nothing to exchange
        return 0.0
    g = gradient_bytes / GB
    if sync.architecture == "ps":
        # the servers are machines of their own: a gang in one node, too,
        # pushes and pulls its gradients over the network
        bandwidth = links.cross_rack if span.racks > 1 else links.cross_node
        return max(g, n * g / sync.servers) / bandwidth + 2 * links.net_latency
    bandwidth, latency = _slowest(span, links)
    if sync.architecture == "allreduce":
        return 2 * (n - 1) / n * g / bandwidth + latency * (n - 1)
    # BytePS: sum inside each GPU machine first, then between machines
    machines = span.nodes
    local = 0.0
    if max(span.per_node) > 1:
        most = max(span.per_node)
        local = 2 * (most - 1) / most * g / links.intra_node + links.intra_latency * (most - 1)
    if machines <= 1:
        return local
    k = sync.cpu_machines
    if k == 0:
        share = 1.0 / machines
    else:
        share = max(0.0, (machines - k) / (k * (machines - 2) + machines * machines))
    gpu_side = g * (1 + (machines - 2) * share)
    cpu_side = machines * g * (1 - machines * share) / k if k else 0.0
    return local + max(gpu_side, cpu_side) / bandwidth + 2 * latency


@dataclass(frozen=True)
class ModelProfile:
    """What the step-time model knows of one model (fitted to measurements)."""

    name: str
    gradient_bytes: float
    compute_fixed: float
    """Seconds of a step's compute that do not grow with the batch."""
    compute_per_sample: float
    overlap: float
    """p of the p-norm that overlaps compute and sync (1: none)."""
    typical_batch: int
    """The median local batch measured: the batch used when a job does not say."""

    def compute_time(self, local_batch: float) -> float:
        return self.compute_fixed + self.compute_per_sample * local_batch

    def step_time(
        self, span: Span, links: Links, sync: Sync = Sync(), local_batch: float | None = None
    ) -> float:
        """Seconds per step of a gang laid out as ``span``."""
        compute = self.compute_time(self.typical_batch if local_batch is None else local_batch)
        comm = sync_time(self.gradient_bytes, span, links, sync)
        if comm <= 0:
            return compute
        p = self.overlap
        return float((compute**p + comm**p) ** (1.0 / p))


@dataclass
class Calibration:
    """Fitted links and model profiles, with the relative error of every
    multi-GPU sample (predicted / measured - 1)."""

    links: Links
    profiles: dict[str, ModelProfile]
    errors: dict[str, np.ndarray] = field(default_factory=dict)
    compute_errors: dict[str, np.ndarray] = field(default_factory=dict)
    held_out_errors: dict[str, np.ndarray] = field(default_factory=dict)
    """Relative errors on the samples left out of the fit (``calibrate(held_out=...)``)."""


def _compute_fit(samples: Sequence[StepSample]) -> tuple[float, float, np.ndarray]:
    """Least-squares line through the 1-GPU step times: (fixed, per sample, rel. errors)."""
    one = [s for s in samples if s.replicas == 1]
    a = np.array([[1.0, s.local_bsz] for s in one])
    y = np.array([s.step_time for s in one])
    (fixed, per), *_ = np.linalg.lstsq(a, y, rcond=None)
    fixed, per = max(float(fixed), 0.0), max(float(per), 0.0)
    return fixed, per, (fixed + per * a[:, 1]) / y - 1


def calibrate(
    models: Sequence[str] = POLLUX_MODELS,
    links: Links | None = None,
    held_out: Callable[[StepSample], bool] | None = None,
) -> Calibration:
    """Fit step times to Pollux's measurements.

    Compute lines come from each model's 1-GPU samples. Then, on the log of
    every multi-GPU step time, a least-squares fit of each model's overlap
    exponent, the gradient size of the models :data:`GRADIENT_BYTES` lacks,
    and (unless ``links`` is given) the in-node and between-node bandwidths and
    latencies. Racks are not in the measurements: ``cross_rack`` stays at half
    the fitted cross-node rate. Samples ``held_out`` says so of are kept out of
    every fit and scored apart (out-of-sample errors).
    """
    models = list(models)
    samples = {m: step_samples(m) for m in models}
    out = held_out or (lambda _s: False)
    lines = {m: _compute_fit([s for s in samples[m] if not out(s)]) for m in models}
    unknown = [m for m in models if m not in GRADIENT_BYTES]
    free_links = links is None
    n_links = 4 if free_links else 0

    multi = [(m, s) for m in models for s in samples[m] if s.replicas > 1]
    fitted = np.array([not out(s) for _, s in multi], dtype=bool)
    model_ix = np.array([models.index(m) for m, _ in multi])
    gpus = np.array([s.replicas for _, s in multi], dtype=np.float64)
    one_node = np.array([s.nodes == 1 for _, s in multi])
    compute = np.array(
        [lines[m][0] + lines[m][1] * s.local_bsz for m, s in multi], dtype=np.float64
    )
    measured = np.array([s.step_time for _, s in multi], dtype=np.float64)
    known_g = np.array([GRADIENT_BYTES.get(m, np.nan) / GB for m in models])
    unknown_ix = np.array([models.index(m) for m in unknown], dtype=np.int64)

    def unpack(x: np.ndarray) -> tuple[np.ndarray, ...]:
        if free_links:
            intra, net, lat_in, lat_net = np.exp(x[:4])
        else:
            assert links is not None
            intra, net = links.intra_node, links.cross_node
            lat_in, lat_net = links.intra_latency, links.net_latency
        p = 1.0 + np.exp(x[n_links : n_links + len(models)])
        g = known_g.copy()
        g[unknown_ix] = np.exp(x[n_links + len(models) :])
        bw = np.where(one_node, intra, net)
        lat = np.where(one_node, lat_in, lat_net)
        return p, g, np.array([intra, net, lat_in, lat_net]), bw, lat

    def residuals(x: np.ndarray) -> np.ndarray:
        p, g, _, bw, lat = unpack(x)
        comm = 2 * (gpus - 1) / gpus * g[model_ix] / bw + lat * (gpus - 1)
        pm = p[model_ix]
        with np.errstate(over="ignore"):  # trial overlaps far out, on the way to the fit
            pred = (compute**pm + comm**pm) ** (1.0 / pm)
        return np.log(pred / measured)

    def fit_residuals(x: np.ndarray) -> np.ndarray:
        return residuals(x)[fitted]

    x0 = [np.log(2.0), np.log(0.5), np.log(5e-4), np.log(5e-4)] if free_links else []
    x0 += [0.0] * len(models) + [np.log(0.1)] * len(unknown)
    fit = optimize.least_squares(fit_residuals, np.array(x0, dtype=np.float64))
    p, g, link_values, _, _ = unpack(fit.x)
    if free_links:
        intra, net, lat_in, lat_net = (float(v) for v in link_values)
        links = Links(intra, net, net / 2, lat_in, lat_net)
    assert links is not None
    profiles: dict[str, ModelProfile] = {}
    for k, m in enumerate(models):
        batches = sorted(s.local_bsz for s in samples[m])
        profiles[m] = ModelProfile(
            m, float(g[k]) * GB, lines[m][0], lines[m][1], float(p[k]), batches[len(batches) // 2]
        )
    errors = np.exp(residuals(fit.x)) - 1
    return Calibration(
        links,
        profiles,
        {m: errors[(model_ix == k) & fitted] for k, m in enumerate(models)},
        {m: lines[m][2] for m in models},
        {m: errors[(model_ix == k) & ~fitted] for k, m in enumerate(models)},
    )


@cache
def default_profiles() -> dict[str, ModelProfile]:
    """Profiles fitted with the default links: what the simulator uses."""
    return calibrate(links=Links()).profiles


def model_profile(model: str) -> ModelProfile | None:
    """The step-time profile of a model name (aliases: resnet50, resnet18), or None."""
    key = pollux_model(model) if model else None
    return default_profiles().get(key) if key is not None else None


def ps_factor(
    profile: ModelProfile, gpus: int, servers: int, node_size: int, links: Links
) -> float:
    """Speed of a gang of ``gpus`` on the fewest nodes synchronising through
    ``servers`` parameter servers, relative to the same gang's all-reduce."""
    span = Span.packed(gpus, node_size)
    ring = profile.step_time(span, links)
    return ring / profile.step_time(span, links, Sync("ps", servers))


def spread_factor(
    profile: ModelProfile, cluster: Cluster, gpus: Sequence[int], sync: Sync = Sync()
) -> float:
    """Speed of a gang on these GPUs relative to the fewest whole nodes of the
    cluster's largest size (what a trace's run time means); never above 1."""
    span = Span.of(cluster, gpus)
    base = Span.packed(span.gpus, int(cluster.node_gpus.max()))
    if span.per_node == base.per_node and span.racks == 1:
        return 1.0
    links = cluster.links
    return min(1.0, profile.step_time(base, links, sync) / profile.step_time(span, links, sync))


__all__ = [
    "ARCHITECTURES",
    "GRADIENT_BYTES",
    "Calibration",
    "ModelProfile",
    "Span",
    "Sync",
    "calibrate",
    "default_profiles",
    "model_profile",
    "ps_factor",
    "spread_factor",
    "sync_time",
]
