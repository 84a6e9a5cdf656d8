"""The command line's JSON (:mod:`corral.wire_json`) is the standard ``json``'s:
the same text written, the same values read, and the same inputs refused."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral import wire_json

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN (``json`` reads "NaN" as a float NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@given(values)
def test_values_are_written_and_read_as_json_does(value: object) -> None:
    text = wire_json.dumps(value)
    assert text == json.dumps(value)
    assert same(wire_json.loads(text), json.loads(text))
    assert same(wire_json.loads(f" \n{text}\t\r".encode()), value)


@given(st.text(max_size=30))
def test_any_text_is_read_or_refused_as_json_does(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            wire_json.loads(text)
    else:
        assert same(wire_json.loads(text), expected)


@pytest.mark.parametrize("text", ["", "  ", "[1", "1 2", "nul", '{"a": 1,}', "[1] x", "{'a': 1}"])
def test_what_is_not_json_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        wire_json.loads(text)


def test_what_json_cannot_write_is_refused_as_json_does() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        wire_json.dumps(loop)
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        wire_json.dumps({"a": {1, 2}})
    assert wire_json.dumps({1: 2, None: 3, 2.5: 4}) == json.dumps({1: 2, None: 3, 2.5: 4})
