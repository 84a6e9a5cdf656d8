"""Policy options from the command line."""

from __future__ import annotations

import pytest

from corral.errors import CorralError
from corral.sim.run import parse_policy_options


def test_policy_options_apply_where_they_belong():
    assert parse_policy_options(["quantum=300"], "las") == {"quantum": 300}
    assert parse_policy_options(["quantum=300"], "fifo") == {}
    assert parse_policy_options(["las.quantum=60.5", "srtf.x=1"], "las") == {"quantum": 60.5}
    with pytest.raises(CorralError):
        parse_policy_options(["quantum"], "las")
