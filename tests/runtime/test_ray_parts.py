"""The Ray executor's parts that need no Ray: references, how a gang's end is
read from its ranks', configs refused, and when Ray is kept on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import InputError
from corral.ray_support import TOKEN_SETTINGS, ensure_token, is_local
from corral.runtime.execution.executor import ProcessRef
from corral.runtime.execution.ray_executor import _append, _attempt_end, parse_ref
from corral.runtime.jobspec.config import load_config


def test_references_name_the_attempts_ranks():
    assert parse_ref(ProcessRef(12, "ray:0a1b2c3d4e5f:2")) == ("0a1b2c3d4e5f", 2)
    assert parse_ref(ProcessRef(12, "123456")) is None  # a local process
    assert len("ray:0a1b2c3d4e5f:2") <= 32  # fits the store's column


def test_a_gang_ends_at_its_first_failure_or_when_all_ranks_succeeded():
    ok = {"exit_code": 0, "signal": None, "detail": None}
    assert _attempt_end([ok, None]) is None  # rank 1 still runs
    assert _attempt_end([ok, ok]).exit_code == 0
    failed = _attempt_end([ok, {"exit_code": 3, "signal": None, "detail": "boom"}])
    assert failed.exit_code == 3 and failed.detail == "rank 1: boom"
    lost = _attempt_end([None, {"lost": True, "detail": "rank 1 on node n lost"}])
    assert lost.lost and "rank 1" in lost.detail


def test_ranks_after_the_first_are_prefixed_in_the_log(tmp_path):
    log = tmp_path / "log.txt"
    _append(log, b"a\nb\n", 0)
    _append(log, b"c\nd", 1)
    assert log.read_bytes() == b"a\nb\n[rank 1] c\nd"


def test_loopback_addresses_and_local_instances_stay_local():
    assert is_local(None) and is_local("127.0.0.1:6379") and is_local("localhost:1")
    assert is_local("ray://127.0.0.1:10001")
    assert not is_local("10.0.0.5:6379") and not is_local("auto")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("executor: ray\nworkers: {standby: 1}\n", "standby workers run with the local"),
        (
            "executor: ray\nray: {address: '10.0.0.1:6379'}\ngpus: [{type: V100, count: 1}]\n",
            "the GPUs are the Ray cluster's",
        ),
        ("executor: ray\nray: {adress: x}\n", "ray.adress"),
        ("executor: mpi\n", "executor"),
    ],
)
def test_bad_ray_settings_are_refused_with_the_line(tmp_path, extra, words):
    path = tmp_path / "corral.yaml"
    path.write_text("users: [{name: a, token: aaaaaaaa}]\n" + extra)
    with pytest.raises(InputError) as err:
        load_config(path)
    assert words in str(err.value), str(err.value)


def test_a_token_is_made_for_rays_own_instance_once_and_kept_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in TOKEN_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    ensure_token()
    path = tmp_path / ".ray" / "auth_token"
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert path.stat().st_mode & 0o777 == 0o600
    ensure_token()
    assert path.read_text() == token  # an existing token is Ray's: never replaced
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "elsewhere"))
    path.unlink()
    ensure_token()
    assert not path.exists()  # the owner said where the token is
