"""User-facing errors.

Everything a person can get wrong (a trace row, a cluster spec, a flag) raises
a :class:`CorralError` whose message says where and what; the CLI prints the
message and exits non-zero instead of showing a traceback.
"""

from __future__ import annotations


class CorralError(Exception):
    """An error caused by input; its message is meant for people."""


class InputError(CorralError):
    """A malformed input file: names the file, the line and the field."""

    def __init__(self, path: str, line: int | None, field: str | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        where = str(path)
        if line is not None:
            where += f":{line}"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {problem}")
