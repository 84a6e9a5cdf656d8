"""Scheduling policies and their registry (one module per family)."""

from __future__ import annotations

import inspect
from typing import Any

from corral.errors import CorralError
from corral.placement.registry import make_placement
from corral.policies.allox import Allox
from corral.policies.antman import AntMan
from corral.policies.base import PlanBuilder, Policy
from corral.policies.fifo import Fifo
from corral.policies.gandiva import Gandiva
from corral.policies.gavel import GAVEL_POLICIES, GavelPolicy
from corral.policies.hived import HiveD
from corral.policies.las import Las
from corral.policies.liquid import Liquid
from corral.policies.optimus import Optimus
from corral.policies.philly import Philly
from corral.policies.pollux import Pollux
from corral.policies.shortest import Sjf, Srtf
from corral.policies.themis import Themis
from corral.policies.tiresias import TiresiasGittins, TiresiasLas

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        Fifo,
        Sjf,
        Srtf,
        Las,
        TiresiasLas,
        TiresiasGittins,
        Philly,
        HiveD,
        AntMan,
        Liquid,
        Gandiva,
        *GAVEL_POLICIES,
        Allox,
        Themis,
        Optimus,
        Pollux,
    )
}
POLICIES["gavel"] = GavelPolicy
"""``gavel`` names Gavel's default policy, heterogeneity-aware max-min fairness."""


def policy_options(cls: type[Policy]) -> dict[str, Any]:
    """The options a policy takes (``--policy-opt``), with their defaults."""
    params = inspect.signature(cls.__init__).parameters.values()
    return {
        p.name: p.default
        for p in params
        if p.name not in ("self", "placement") and p.kind is p.POSITIONAL_OR_KEYWORD
    }


ROUND_MODEL_LIVE = (
    "plans task-level rounds: a job given as a task (task: {factory, steps, round_steps}) "
    "runs as rounds whose tasks are one-GPU jobs NAME.rR.K, placed on GPUs of any type; "
    "jobs given as a command are refused"
)


def live_refusal(name: str, options: dict[str, Any] | None = None) -> str | None:
    """Why ``corral serve`` cannot run the policy named ``name`` with these
    options (None: it can)."""
    key = name.strip().lower()
    if key in POLICIES:
        for option, why in POLICIES[key].simulator_only.items():
            if (options or {}).get(option):
                return why
        return None
    from corral.sim.rounds.planners import ROUND_PLANNERS

    if key in ROUND_PLANNERS:
        try:
            ROUND_PLANNERS[key](**(options or {}))
        except TypeError as exc:
            return f"policy '{name}': {exc}"
        return None
    return f"unknown policy '{name}' (choose from {', '.join(POLICIES)}; see 'corral policies')"


def live_support(cls: type[Policy]) -> str:
    """What the policy's live version does differently from the simulator ("" when nothing)."""
    notes = [cls.live_note] if cls.live_note else []
    if cls.simulator_only:
        notes.append(f"simulator only: {', '.join(cls.simulator_only)}")
    if cls.oracle or cls.reads_durations:
        notes.append(
            "durations come from a job's 'duration' (or 'wall_time'), else an estimate "
            "from its owner's finished jobs"
        )
    return "; ".join(notes)


def make_policy(name: str, placement: str | None = None, seed: int = 0, **options: Any) -> Policy:
    """A policy by name with a placement strategy by name (None: the policy's default)."""
    try:
        cls = POLICIES[name.strip().lower()]
    except KeyError:
        raise CorralError(
            f"unknown policy '{name}' (choose from {', '.join(POLICIES)}; see 'corral policies')"
        ) from None
    try:
        strategy = make_placement(placement, seed) if placement is not None else None
        return cls(strategy, **options)
    except (TypeError, ValueError) as exc:
        raise CorralError(f"policy '{name}': {exc}") from None


__all__ = [
    "POLICIES",
    "PlanBuilder",
    "Policy",
    "live_refusal",
    "live_support",
    "make_policy",
    "policy_options",
]
