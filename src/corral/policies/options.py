"""Policy options, declared: name, kind, range and one line of help, in one table per class.

A policy lists its options in ``Policy.options`` beside its ``__init__``
(whose signature gives the defaults). Every way of setting an option, the
command line's ``--policy-opt``, the service's ``policy_options`` and
:func:`corral.policies.make_policy` in Python, goes through :func:`convert`:
a value of the wrong kind or out of range is refused with the option's name,
what it accepts and its help, before the policy sees it. ``corral policies
NAME`` prints the table. A plugin that declares nothing gets its values as
given (its own ``__init__`` checks them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KINDS = ("number", "integer", "flag", "choice", "text")


@dataclass(frozen=True)
class Option:
    """One option: what it means and what it accepts.

    ``kind``: ``number`` (a float), ``integer``, ``flag`` (true/false, 1/0,
    yes/no), ``choice`` (one of ``choices``) or ``text`` (the policy parses
    it, e.g. a list of quotas). ``low``/``high`` bound a number inclusively,
    ``above`` exclusively; ``unset`` allows ``None`` (the policy picks).
    """

    help: str
    kind: str = "number"
    low: float | None = None
    high: float | None = None
    above: float | None = None
    choices: tuple[str, ...] = ()
    unset: bool = False

    def accepts(self) -> str:
        """What the option accepts, in words ('a number > 0', 'one of a, b')."""
        if self.kind == "flag":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "text":
            return "text"
        what = "a whole number" if self.kind == "integer" else "a number"
        bounds = []
        if self.above is not None:
            bounds.append(f"> {self.above:g}")
        if self.low is not None:
            bounds.append(f">= {self.low:g}")
        if self.high is not None:
            bounds.append(f"<= {self.high:g}")
        return f"{what} {' and '.join(bounds)}".strip() if bounds else what

    def convert(self, value: Any) -> Any:
        """The value as the policy takes it; ValueError saying what is accepted."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
            if self.unset:
                return None
            if self.kind == "text" and value is not None:
                return ""
            raise ValueError(f"must be {self.accepts()}")
        if self.kind == "flag":
            return _flag(value)
        if self.kind == "choice":
            text = str(value).strip()
            if text not in self.choices:
                raise ValueError(f"must be {self.accepts()}, got '{value}'")
            return text
        if self.kind == "text":
            return value  # the policy parses it (a list, quotas as a mapping or as text)
        number = _number(value, self.kind == "integer", self.accepts())
        if (
            (self.above is not None and not number > self.above)
            or (self.low is not None and number < self.low)
            or (self.high is not None and number > self.high)
        ):
            raise ValueError(f"must be {self.accepts()}, got {value}")
        return number


def plain_number(text: str) -> Any:
    """A value as written: a number where it parses as one, else the text (the
    declared option's type is applied later)."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got '{value}'")


def _number(value: Any, integer: bool, accepts: str) -> float | int:
    if isinstance(value, bool):
        raise ValueError(f"must be {accepts}, got {value}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be {accepts}, got '{value}'") from None
    if not math.isfinite(number):
        raise ValueError(f"must be {accepts}, got '{value}'")
    if integer:
        if number != int(number):
            raise ValueError(f"must be {accepts}, got '{value}'")
        return int(number)
    return number


def declared(cls: type) -> dict[str, Option]:
    """The options a class declares, its bases' included (a subclass may refine one)."""
    out: dict[str, Option] = {}
    for klass in reversed(cls.__mro__):
        out.update(vars(klass).get("options", {}) or {})
    return out


def convert(policy: str, cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Each given option converted and checked against the declaration; a ValueError
    names the option, what it accepts and what it is for."""
    table = declared(cls)
    out: dict[str, Any] = {}
    for name, value in values.items():
        option = table.get(name)
        if option is None:
            out[name] = value
            continue
        try:
            out[name] = option.convert(value)
        except ValueError as exc:
            raise ValueError(f"option '{name}' {exc} ({option.help})") from None
    return out
