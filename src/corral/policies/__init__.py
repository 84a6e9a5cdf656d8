"""Scheduling policies and their registry (one module per family)."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from corral.errors import CorralError
from corral.placement.registry import make_placement
from corral.policies.base import PlanBuilder, Policy

PLUGIN_GROUP = "corral.policies"
"""The entry-point group a package names its policies in (``name = "module:Class"``)."""


class _Registry(Mapping[str, type[Policy]]):
    """Policy classes by name, each module imported when its class is first
    asked for: a run imports the policy it uses, not all twenty (a tenth of a
    second of every simulation's start).

    Besides the built-in names it knows policies from outside the project:
    ``package.module:Class`` or ``path/to/file.py:Class`` (imported when
    asked for), and those installed packages declare in the ``corral.policies``
    entry-point group (listed with the built-in ones)."""

    def __init__(self, where: dict[str, str]) -> None:
        self._where = where
        self._loaded: dict[str, type[Policy]] = {}

    def __getitem__(self, name: str) -> type[Policy]:
        where_, _, attr = name.rpartition(":")
        if where_.endswith(".py"):  # a file by where it is, not as written: the same
            # 'mine.py:X' from another folder is another file
            name = f"{Path(where_).expanduser().resolve()}:{attr}"
        cls = self._loaded.get(name)
        if cls is None:
            where = self._where.get(name) or self._plugins().get(name)
            if where is not None:
                module, attr = where.split(":")
                cls = getattr(importlib.import_module(module), attr)
            elif ":" in name:
                cls = _load_plugin(name)
            else:
                raise KeyError(name)
            self._loaded[name] = cls
        return cls

    def __iter__(self) -> Iterator[str]:
        return iter([*self._where, *(n for n in self._plugins() if n not in self._where)])

    def __len__(self) -> int:
        return len(list(iter(self)))

    @staticmethod
    def _plugins() -> dict[str, str]:
        """Installed packages' policies: entry-point name -> ``module:Class``."""
        from importlib.metadata import entry_points

        return {ep.name.lower(): ep.value for ep in entry_points(group=PLUGIN_GROUP)}


def _load_plugin(spec: str) -> type[Policy]:
    """The class ``module:Class`` or ``file.py:Class`` names; a clear error otherwise."""
    from corral.plugins import load_class

    return load_class(spec, Policy, "policy")


def folder_name(name: str) -> str:
    """The folder a run of the policy named ``name`` writes to: its name, or for a
    policy given as ``module:Class`` or ``file.py:Class``, the class's own ``name``
    (its class name if it has none), in letters, digits, ``.``, ``_`` and ``-``."""
    key = policy_key(name)
    if ":" not in key:
        return key
    cls = POLICIES[key]
    label = cls.name if cls.name and cls.name != Policy.name else cls.__name__
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or "policy"


def source_file(name: str) -> str | None:
    """The source file of the policy (or round planner) named ``name``; None when it
    cannot be found or loaded (callers describe a result either way)."""
    import inspect

    key = policy_key(name)
    try:
        if key in POLICIES:
            return inspect.getsourcefile(POLICIES[key])
        from corral.policies.rounds.planners import ROUND_PLANNERS

        return inspect.getsourcefile(type(ROUND_PLANNERS[key]))
    except Exception:  # (a plugin that does not import, a name that is no policy)
        return None


def policy_key(name: str) -> str:
    """How a policy's name is looked up: built-in and entry-point names in any case,
    a ``module:Class`` or ``file.py:Class`` as written."""
    text = name.strip()
    return text if ":" in text else text.lower()


POLICIES: Mapping[str, type[Policy]] = _Registry(
    {
        "fifo": "corral.policies.fifo:Fifo",
        "sjf": "corral.policies.shortest:Sjf",
        "srtf": "corral.policies.shortest:Srtf",
        "las": "corral.policies.las:Las",
        "tiresias-las": "corral.policies.tiresias:TiresiasLas",
        "tiresias-gittins": "corral.policies.tiresias:TiresiasGittins",
        "philly": "corral.policies.philly:Philly",
        "hived": "corral.policies.hived:HiveD",
        "antman": "corral.policies.antman:AntMan",
        "liquid": "corral.policies.liquid:Liquid",
        "gandiva": "corral.policies.gandiva:Gandiva",
        "gavel-max-min-fairness": "corral.policies.gavel:GavelPolicy",
        "gavel-max-min-fairness-agnostic": "corral.policies.gavel:GavelMaxMinAgnostic",
        "gavel-finish-time-fairness": "corral.policies.gavel:GavelFinishTimeFairness",
        "gavel-min-makespan": "corral.policies.gavel:GavelMinMakespan",
        "gavel-max-throughput": "corral.policies.gavel:GavelMaxThroughput",
        "gavel-max-min-fairness-packed": "corral.policies.gavel:GavelMaxMinPacked",
        "allox": "corral.policies.allox:Allox",
        "themis": "corral.policies.themis:Themis",
        "optimus": "corral.policies.optimus:Optimus",
        "pollux": "corral.policies.pollux:Pollux",
        # Gavel's default policy, heterogeneity-aware max-min fairness
        "gavel": "corral.policies.gavel:GavelPolicy",
    }
)
"""Every policy by its name (``Policy.name``), and ``gavel`` for Gavel's default."""


def policy_options(cls: type[Policy]) -> dict[str, Any]:
    """The options a policy takes (``--policy-opt``), with their defaults: its own
    ``__init__``'s, and, where that passes ``**params`` on, its bases' (a Gavel
    variant takes Gavel's options), up to :class:`Policy`, which takes none."""
    out: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass is Policy or klass is object or "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        for p in params:
            if p.name not in ("self", "placement") and p.kind is p.POSITIONAL_OR_KEYWORD:
                out.setdefault(p.name, p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return out


def unknown_option(name: str, option: str, accepted: list[str]) -> str:
    """The message for an option a policy does not take, with the nearest it does."""
    import difflib

    near = difflib.get_close_matches(option, accepted, n=1)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    takes = ", ".join(accepted) if accepted else "no options"
    return f"policy '{name}' has no option '{option}'{hint} (it takes {takes})"


def options_of(name: str) -> list[str]:
    """The options the policy (or round planner) named ``name`` takes."""
    return list(option_defaults(name))


def checked_options(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` converted and checked against the options the policy (or round
    planner) named ``name`` declares; a CorralError names the option, what it
    accepts and what it is for."""
    from corral.policies.options import convert

    key = policy_key(name)
    if key in POLICIES:
        cls: type = POLICIES[key]
    else:
        from corral.policies.rounds.planners import ROUND_PLANNERS

        if key not in ROUND_PLANNERS:
            return dict(values)
        cls = ROUND_PLANNERS[key]
    try:
        return convert(key, cls, values)
    except ValueError as exc:
        raise CorralError(f"policy '{key}': {exc}") from None


def option_table(name: str) -> dict[str, dict[str, Any]]:
    """Each option of the policy named ``name``: default, what it accepts, help."""
    from corral.policies.options import declared

    key = policy_key(name)
    if key in POLICIES:
        cls: type = POLICIES[key]
    else:
        from corral.policies.rounds.planners import ROUND_PLANNERS

        cls = ROUND_PLANNERS[key]
    table = declared(cls)
    out: dict[str, dict[str, Any]] = {}
    for option, default in option_defaults(key).items():
        spec = table.get(option)
        out[option] = {
            "default": default,
            "accepts": spec.accepts() if spec else "",
            "help": spec.help if spec else "",
        }
    return out


def option_defaults(name: str) -> dict[str, Any]:
    """The options the policy (or round planner) named ``name`` takes, with defaults."""
    key = policy_key(name)
    if key in POLICIES:
        return policy_options(POLICIES[key])
    from corral.policies.rounds.planners import ROUND_PLANNERS

    if key in ROUND_PLANNERS:
        return policy_options(ROUND_PLANNERS[key])  # type: ignore[arg-type]
    return {}


ROUND_MODEL_LIVE = (
    "plans task-level rounds: a job given as a task (task: {factory, steps, round_steps}) "
    "runs as rounds whose tasks are one-GPU jobs NAME.rR.K, placed on GPUs of any type; "
    "jobs given as a command are refused"
)


def live_refusal(name: str, options: dict[str, Any] | None = None) -> str | None:
    """Why ``corral serve`` cannot run the policy named ``name`` with these
    options (None: it can)."""
    key = policy_key(name)
    if key in POLICIES:
        accepted = options_of(key)
        for option in options or {}:
            if option not in accepted:
                return unknown_option(key, option, accepted)
        for option, why in POLICIES[key].simulator_only.items():
            if (options or {}).get(option):
                return why
        return None
    from corral.policies.rounds.planners import ROUND_PLANNERS

    if key in ROUND_PLANNERS:
        accepted = options_of(key)
        for option in options or {}:
            if option not in accepted:
                return unknown_option(key, option, accepted)
        try:
            ROUND_PLANNERS[key](**(options or {}))
        except TypeError as exc:
            return f"policy '{name}': {exc}"
        return None
    return unknown_policy(name, list(POLICIES))


def unknown_policy(name: str, known: list[str]) -> str:
    """The message for a policy name that is none of ``known``, with the nearest one
    when it looks misspelt (``tiresias-lass``: did you mean 'tiresias-las'?)."""
    import difflib

    near = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    choose = f"choose from {', '.join(known)}; see 'corral policies'"
    return f"unknown policy '{name}'{hint} ({choose})"


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


def make_policy(
    name: str,
    placement: str | None = None,
    seed: int = 0,
    admission: str | None = None,
    **options: Any,
) -> Policy:
    """A policy by name with a placement strategy by name (None: the policy's default)
    and an admission rule (``file.py:Class[...]``; None: every job admitted)."""
    try:
        cls = POLICIES[policy_key(name)]
    except KeyError:
        raise CorralError(unknown_policy(name, list(POLICIES))) from None
    try:
        strategy = make_placement(placement, seed) if placement is not None else None
        from corral.policies.options import convert

        made = cls(strategy, **convert(name, cls, options))
    except (TypeError, ValueError) as exc:
        raise CorralError(f"policy '{name}': {exc}") from None
    if admission is not None:
        from corral.policies.admission import make_admission

        made.admission = make_admission(admission)
    return made


__all__ = [
    "POLICIES",
    "PlanBuilder",
    "Policy",
    "checked_options",
    "folder_name",
    "live_refusal",
    "live_support",
    "make_policy",
    "option_table",
    "options_of",
    "policy_key",
    "policy_options",
    "unknown_option",
]
