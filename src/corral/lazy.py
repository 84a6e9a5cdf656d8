"""Package namespaces whose names load on first use.

The CLI must start in a fraction of a second, and numpy, pandas and scipy
take over a second to import; a package's ``__init__`` therefore names where
each export lives and imports it only when it is asked for (PEP 562).
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)


if TYPE_CHECKING:  # (typing's import is a tenth of a quick command's)
    from collections.abc import Callable
    from typing import Any


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``where[name]`` and returns its ``name``."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module '{package}' has no attribute {name!r}")
        import importlib  # (here: ``import corral`` is on every quick command's path)

        return getattr(importlib.import_module(where[name]), name)

    return __getattr__


class LazyModule:
    """A module imported on first attribute access.

    For scipy: every policy module is imported to list the policies, but
    only the LP and fitting policies solve anything, and importing
    ``scipy.optimize`` costs a tenth of a second or more on each start of
    ``corral sim`` that never uses it.
    """

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import importlib

        return getattr(importlib.import_module(self._name), attr)
