"""AdaScale: the learning rate that goes with a batch size a scheduler chose.

Pollux (Qiao et al., OSDI'21) changes a job's batch size as it gives the job
more or fewer GPUs, and keeps training on course with AdaScale SGD (Johnson
et al., ICML'20): at batch ``B`` against the batch ``B0`` the learning rate
was tuned for, each step is worth ``r`` steps at ``B0``, where the *gain
ratio*

    r = (tr(Sigma) / B0 + |G|^2) / (tr(Sigma) / B + |G|^2)
      = (B_noise / B0 + 1) / (B_noise / B + 1),      B_noise = tr(Sigma) / |G|^2

lies between 1 (no gradient noise: a bigger batch buys nothing) and
``B / B0`` (noise dominates: the bigger batch averages it away, as linear
scaling assumes). The learning rate is scaled by ``r``, and progress is
counted in steps at ``B0`` (the sum of the gains), so a schedule written for
``B0`` (warm-up, decay by step) is read at that scale-invariant step.
``B_noise`` is :class:`~corral.train.noise.GradientNoise`'s running estimate,
which the job also reports in its heartbeats (Pollux's statistical
efficiency, ``r / (B / B0)``, is what the simulator's goodput model charges).

Use::

    noise = GradientNoise()
    scale = AdaScale(optimizer, base_batch=64, noise=noise)
    ...  # each step: noise.update(...) as the examples do, then
    scale.step(batch)            # sets every group's lr to its base x gain
    optimizer.step()
"""

from __future__ import annotations

from typing import Any

from corral.train.noise import GradientNoise


class AdaScale:
    """Scales an optimiser's learning rates by AdaScale's gain ratio."""

    def __init__(self, optimizer: Any, base_batch: int, noise: GradientNoise) -> None:
        if base_batch < 1:
            raise ValueError(f"base_batch must be >= 1, got {base_batch}")
        self.optimizer = optimizer
        self.base_batch = int(base_batch)
        self.noise = noise
        self.base_lrs = [float(group["lr"]) for group in optimizer.param_groups]
        """Each parameter group's learning rate at ``base_batch`` (as given)."""
        self.progress = 0.0
        """Steps taken, counted at ``base_batch`` (the sum of the gains)."""

    def gain(self, batch: int) -> float:
        """What one step at ``batch`` is worth in steps at the base batch: 1 while
        the noise scale is unknown (no scaling until it is measured)."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        noise = self.noise.scale
        if noise is None:
            return 1.0
        return (noise / self.base_batch + 1.0) / (noise / batch + 1.0)

    def step(self, batch: int) -> float:
        """Before ``optimizer.step()``: set each group's learning rate to its base
        times the gain at ``batch``, count the step's worth; returns the gain."""
        gain = self.gain(batch)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * gain
        self.progress += gain
        return gain

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the progress and the base rates."""
        return {"progress": self.progress, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.progress = float(state["progress"])
        self.base_lrs = [float(v) for v in state["base_lrs"]]
