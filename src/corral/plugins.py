"""Classes from outside corral, named ``package.module:Class`` or ``path/to/file.py:Class``.

A researcher's policy, placement strategy or admission rule lives in their own
file; corral imports it by that name, the same way wherever a name is taken
(``--policy``, ``--placement``, ``--admission``, the service's config).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from corral.errors import CorralError


def load_class(spec: str, base: type[Any], what: str) -> type[Any]:
    """The subclass of ``base`` that ``spec`` names; a clear error naming ``what`` (the
    kind of thing: 'policy', 'placement') otherwise."""
    where, _, attr = spec.rpartition(":")
    try:
        if where.endswith(".py"):
            path = Path(where).expanduser().resolve()
            if not path.is_file():
                raise CorralError(f"{what} '{spec}': no file {path}")
            module_name = f"corral_plugin_{path.stem}_{abs(hash(str(path))):x}"
            module = sys.modules.get(module_name)
            if module is None:
                found = importlib.util.spec_from_file_location(module_name, path)
                assert found is not None and found.loader is not None
                module = importlib.util.module_from_spec(found)
                sys.modules[module_name] = module  # (dataclasses and pickling look it up)
                try:
                    found.loader.exec_module(module)
                except BaseException:
                    del sys.modules[module_name]
                    raise
        else:
            module = importlib.import_module(where)
    except CorralError:
        raise
    except Exception as exc:  # the plugin's own import failed: say so, with its error
        raise CorralError(f"{what} '{spec}': cannot import {where}: {exc}") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise CorralError(f"{what} '{spec}': {where} has no {base.__name__} subclass named {attr}")
    return cls
