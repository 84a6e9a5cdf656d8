"""JSON for short-lived processes, without importing ``json``: the command line's
requests and answers, and the launcher's records (one launcher a job).

Slurm's users submit in loops, one process a job, so what a command imports is
most of its cost. The standard ``json`` package imports ``re`` (and with it
``enum``, ``functools`` and ``collections``) for its pure-Python fallbacks:
10 ms of a 50 ms ``corral submit`` on the development machine. The C
accelerator it wraps, ``_json``, parses and writes JSON by itself; this module
drives it directly, with ``json``'s defaults (``ensure_ascii``, NaN allowed,
``", "`` and ``": "`` between items, duplicate keys: the last wins). Where the
accelerator is missing (another Python), ``json`` itself is used. Errors are
``ValueError``, as ``json``'s are (a test holds both to ``json`` over
generated values).
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from typing import Any

WHITESPACE = " \t\n\r"
"""What JSON allows between values (RFC 8259, section 2)."""

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Context:
    """What ``_json.make_scanner`` reads from a decoder: ``json``'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_CONSTANTS.__getitem__)


def _unserialisable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


try:
    import _json as _FAST
except ImportError:  # (not CPython)
    _FAST = None  # type: ignore[assignment]

_scan = None if _FAST is None else _FAST.make_scanner(_Context())  # type: ignore[arg-type]


def loads(data: bytes | str) -> Any:
    """The value ``data`` (UTF-8 bytes or text) holds; ``ValueError`` if it is not JSON."""
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    if _FAST is None:
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if text[end:].strip(WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value


def dumps(value: Any) -> str:
    """``value`` as JSON text, as ``json.dumps(value)`` writes it."""
    if _FAST is None:
        import json

        return json.dumps(value)
    encode = _FAST.make_encoder(  # (a new one each time: its circular-reference marks)
        {}, _unserialisable, _FAST.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    return "".join(encode(value, 0))
