"""Every policy declares its options (kind, range, help) beside its defaults, and
every way of setting one, command line, service config, Python, checks the value
against the declaration."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.errors import CorralError
from corral.policies import POLICIES, make_policy, option_table, policy_options
from corral.policies.options import Option, declared
from corral.policies.rounds.planners import ROUND_PLANNERS

CLASSES = {**POLICIES, **ROUND_PLANNERS}


@pytest.mark.parametrize("name", list(CLASSES))
def test_each_option_is_declared_and_each_declaration_is_an_option(name: str) -> None:
    cls = CLASSES[name]
    defaults = policy_options(cls)  # type: ignore[arg-type]
    table = declared(cls)
    assert set(table) == set(defaults), name
    for option, default in defaults.items():
        spec = table[option]
        assert spec.help and spec.kind in ("number", "integer", "flag", "choice", "text")
        # the default is a value the declaration accepts
        if isinstance(default, tuple):
            continue  # a list default (tiresias' thresholds): given as text, parsed by the policy
        spec.convert(default)


def test_a_bad_value_names_the_option_what_it_accepts_and_what_it_is_for() -> None:
    with pytest.raises(
        CorralError, match=r"option 'quantum' must be a number > 0, got 'abc' \(seconds"
    ):
        make_policy("las", quantum="abc")
    with pytest.raises(
        CorralError, match=r"'queue_order' must be one of entry, list, strict, got 'lists'"
    ):
        make_policy("tiresias-las", queue_order="lists")
    with pytest.raises(CorralError, match=r"'queues' must be a whole number >= 1, got '2.5'"):
        make_policy("tiresias-las", queues="2.5")
    with pytest.raises(CorralError, match=r"'slowdown' must be a number >= 0 and <= 1, got 2"):
        make_policy("antman", slowdown=2)
    with pytest.raises(CorralError, match=r"'packing' must be true or false, got 'maybe'"):
        make_policy("gandiva", packing="maybe")
    # values given as text (the command line's) arrive as their kind
    assert make_policy("gandiva", packing="false").packing is False  # type: ignore[attr-defined]
    assert make_policy("las", quantum="60").quantum == 60.0  # type: ignore[attr-defined]


def test_the_command_line_refuses_a_bad_value_before_loading_anything(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from corral.cli import app

    result = CliRunner().invoke(
        app,
        ["sim", "--policy", "las", "--policy-opt", "quantum=-5", "--trace", "nowhere.csv",
         "--out", str(tmp_path / "o")],
    )  # fmt: skip
    assert isinstance(result.exception, CorralError)
    assert "option 'quantum' must be a number > 0, got -5" in str(result.exception)
    assert not (tmp_path / "o").exists()


def test_the_service_config_refuses_a_bad_value_at_its_line(tmp_path: Path) -> None:
    from corral.runtime.jobspec.config import load_config

    config = tmp_path / "corral.yaml"
    config.write_text(
        "policy: tiresias-las\npolicy_options:\n  queues: many\n"
        "gpus: [{type: V100, count: 2}]\nusers: [{name: a, token: aaaaaaaaaaaaaaaa1}]\n"
    )
    with pytest.raises(CorralError, match=r"corral.yaml:2: .*'queues' must be a whole number"):
        load_config(config)


def test_corral_policies_name_shows_each_options_range_and_help() -> None:
    table = option_table("tiresias-gittins")
    assert table["delta"] == {
        "default": 3250.0,
        "accepts": "a number > 0",
        "help": "service quantum of the Gittins index (GPU-seconds)",
    }
    assert table["ties"]["accepts"] == "one of fifo, lifo"


@given(st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8) | st.integers())
def test_a_number_option_never_lets_through_what_it_does_not_accept(value: object) -> None:
    spec = Option("x", low=0, high=1)
    try:
        got = spec.convert(value)
    except ValueError as exc:
        assert "must be a number >= 0 and <= 1" in str(exc)
    else:
        assert isinstance(got, float) and 0 <= got <= 1


def test_declarations_sit_beside_the_init_they_describe() -> None:
    # each class that declares options defines the __init__ taking them
    for cls in CLASSES.values():
        own = vars(cls).get("options", {})
        if own:
            params = inspect.signature(vars(cls)["__init__"]).parameters
            assert set(own) <= set(params), cls
