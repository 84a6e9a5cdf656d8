"""User-facing errors.

Everything a person can get wrong (a trace row, a cluster spec, a flag) raises
a :class:`CorralError` whose message says where and what; the CLI prints the
message and exits non-zero instead of showing a traceback.
"""

from __future__ import annotations


class CorralError(Exception):
    """An error caused by input; its message is meant for people.

    ``exit_code`` is what the command line exits with (the README's exit-code table):
    2 for bad usage or input, unless a subclass says otherwise."""

    exit_code = 2


class OperationFailed(CorralError):
    """What was asked could not be done (a job in the wrong state, a job that failed
    while ``--wait`` watched it, the service's own error)."""

    exit_code = 1


class NotFound(CorralError):
    """The job, node or file asked for does not exist."""

    exit_code = 3


class Unreachable(CorralError):
    """The service could not be reached."""

    exit_code = 4


class PermissionDenied(CorralError):
    """The service refused the caller (no token, a wrong one, someone else's job)."""

    exit_code = 5


class Throttled(CorralError):
    """The service asks the caller to wait (429): too many wrong tokens from this
    address (a lock-out, for the seconds it says), or too many jobs not yet ended."""

    exit_code = 6


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
