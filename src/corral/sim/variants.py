"""Variants: one policy several times in one comparison, each with its own options.

An ablation compares a policy with itself under other settings. In
``--policies`` an entry may carry options in brackets and a label::

    --policies 'las[quantum=60,label=las-1min],las[quantum=3600],las'

Each entry is a run of its own: its label (``label=``, else the entry as
written: ``las[quantum=3600]``) names it in the report, the CSVs and the
folder it writes (the label with anything but letters, digits, ``.``, ``_``
and ``-`` made ``-``). Options in brackets override ``--policy-opt`` for that
entry; ``--policy-opt LABEL.key=value`` addresses one entry by its label, as
``POLICY.key=value`` addresses every entry of a policy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from corral.errors import CorralError

_ENTRY = re.compile(r"^(?P<name>[^\[\]]+?)\s*(?:\[(?P<options>[^\[\]]*)\])?$")


@dataclass(frozen=True)
class Variant:
    """One entry of ``--policies``: a policy, what it is called, its own options."""

    policy: str
    """The policy's key (a built-in name, ``module:Class`` or ``file.py:Class``)."""
    label: str
    """What reports, CSVs and legends call this run."""
    options: dict[str, str] = field(default_factory=dict)
    """Options given in the entry's brackets, as written (typed when checked)."""

    @property
    def folder(self) -> str:
        """The folder the run writes to (the label, made safe for a path)."""
        # (no leading or trailing dots: a label of ".." must not write above the output)
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.label).strip("-.") or "policy"


def split_entries(text: str) -> list[str]:
    """``--policies`` split at the commas outside brackets."""
    entries: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise CorralError(f"--policies '{text}': a ']' without its '['")
        if char == "," and depth == 0:
            entries.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise CorralError(f"--policies '{text}': a '[' is not closed")
    entries.append("".join(current))
    return [e.strip() for e in entries if e.strip()]


def parse_variants(text: str) -> list[Variant]:
    """Every entry of ``--policies``; a clear error for a malformed one or for two
    entries that would write to one folder."""
    from corral.policies import policy_key

    variants = []
    for entry in split_entries(text):
        match = _ENTRY.match(entry)
        if match is None:
            raise CorralError(f"--policies: cannot read '{entry}' (expected NAME or NAME[k=v,...])")
        key = policy_key(match["name"])
        options: dict[str, str] = {}
        label: str | None = None
        for pair in (match["options"] or "").split(","):
            if not pair.strip():
                continue
            name, eq, value = pair.partition("=")
            name, value = name.strip(), value.strip()
            if not eq or not name:
                raise CorralError(f"--policies: '{entry}': expected key=value, got '{pair}'")
            if name == "label":
                label = value
            elif name in options:
                raise CorralError(f"--policies: '{entry}' gives '{name}' twice")
            else:
                options[name] = value
        if label is None:
            label = default_label(key, options)
        variants.append(Variant(key, label, options))
    if not variants:
        raise CorralError("--policies names no policy")
    folders = [v.folder for v in variants]
    twice = sorted({f for f in folders if folders.count(f) > 1})
    if twice:
        raise CorralError(
            f"--policies: two entries would write to one folder ({', '.join(twice)}); "
            "give one a label: NAME[...,label=TEXT]"
        )
    return variants


def default_label(key: str, options: dict[str, str]) -> str:
    """What an entry without ``label=`` is called: its policy (a file's by its class's
    name), with its options in brackets."""
    from corral.policies import folder_name

    own = folder_name(key) if ":" in key else key
    return f"{own}[{','.join(f'{k}={v}' for k, v in options.items())}]" if options else own


def variant_options(variant: Variant, pairs: list[str]) -> dict[str, Any]:
    """The options a variant runs with, checked and typed as its policy declares
    them: ``--policy-opt``'s for its policy, then its label's, then its own."""
    from corral.policies import checked_options, options_of, unknown_option
    from corral.policies.options import plain_number
    from corral.sim.run import option_pair, parse_policy_options

    given = parse_policy_options(pairs, variant.policy)  # (its label's pairs are not)
    for pair in pairs:
        target, name, value = option_pair(pair)
        if target == variant.label and target != variant.policy:
            given[name] = plain_number(value)
    given.update({k: plain_number(v) for k, v in variant.options.items()})
    takes = options_of(variant.policy)
    for name in given:
        if name not in takes:
            raise CorralError(
                f"--policies '{variant.label}': {unknown_option(variant.policy, name, takes)}"
            )
    try:
        return checked_options(variant.policy, given)
    except CorralError as exc:
        raise CorralError(f"--policies '{variant.label}': {exc}") from None
