"""YAML reading that remembers line numbers, so errors can name the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from corral.errors import InputError
from corral.textfiles import read_text


class LineDict(dict):
    """A mapping read from YAML; ``line`` is where it starts, ``key_lines`` its keys' lines."""

    line: int = 0
    key_lines: dict[str, int]

    def line_of(self, key: object) -> int:
        return self.key_lines.get(str(key), self.line)


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode, deep: bool = False) -> LineDict:
    mapping = LineDict(loader.construct_mapping(node, deep=deep))
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file; syntax errors become :class:`InputError` with the line."""
    return parse_yaml(read_text(path), str(path))


def parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise InputError(source, line, None, f"not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(source, None, None, f"not valid YAML: {exc}") from None


def validation_error(source: str, raw: Any, exc: ValidationError, prefix: str = "") -> InputError:
    """The first pydantic error as file:line: field: problem."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    field = loc[0] if loc else None
    line = None
    if isinstance(raw, LineDict):
        line = raw.line_of(field) if field else raw.line
        # nested mappings (e.g. a cluster spec's links): the innermost key's line
        node = raw
        for part in loc:
            if not isinstance(node, LineDict) or part not in node:
                break
            line = node.line_of(part) or line
            node = node[part]
    return InputError(source, line, prefix + ".".join(loc) if loc else None, err["msg"])
