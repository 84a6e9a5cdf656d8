"""Job specs and the service config: what is accepted, and errors that name the place."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import InputError
from corral.runtime.execution.executor import GpuSlot, gpu_type_from_name, virtual_slots
from corral.runtime.jobspec.config import GpuGroup, load_config
from corral.runtime.jobspec.specs import JobSpec, load_job_spec
from corral.runtime.loop.scheduler import cluster_from_slots
from corral.timespan import parse_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90.0),
        ("90", 90.0),
        ("1h30m", 5400.0),
        ("01:30:00", 5400.0),
        ("2:00", 120.0),
        ("1d", 86400.0),
        ("45s", 45.0),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "-5", "1:2:3:4", 0])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_seconds(text)


def test_job_spec_yaml_errors_name_file_line_field(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: x\ncommand: [python, train.py]\ngpus: -2\n")
    with pytest.raises(InputError) as err:
        load_job_spec(path)
    assert str(err.value).startswith(f"{path}:3: field 'gpus'")
    path.write_text("name: x\ncommand: python train.py\n")
    with pytest.raises(
        InputError, match=r"job.yaml:2: field 'command': give the command as a list"
    ):
        load_job_spec(path)
    path.write_text("command: [a]\ngpu_type: v100\nwall_time: 1h\nenv: {A: '1'}\n")
    spec = load_job_spec(path)
    assert spec.gpu_type == "V100" and spec.wall_time == 3600.0 and spec.env == {"A": "1"}


def test_config_errors_name_file_line_field(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    path.write_text("policy: las\nusers:\n  - {name: a, token: short}\n")
    with pytest.raises(InputError, match=r"corral.yaml:2: field 'users.0.token'"):
        load_config(path)
    path.write_text("policy: las\nport: 80000\nusers: [{name: a, token: long-enough}]\n")
    with pytest.raises(InputError, match=r"corral.yaml:2: field 'port'"):
        load_config(path)
    path.write_text(
        "state_dir: st\ngpus: [{type: v100, count: 2}]\nusers: [{name: a, token: long-enough}]\n"
    )
    config = load_config(path)
    assert config.state_dir == tmp_path / "st"  # relative to the file
    assert config.store_url == f"sqlite:///{tmp_path / 'st' / 'corral.db'}"
    assert config.host == "127.0.0.1"


def test_virtual_gpus_are_dense_and_grouped_by_node() -> None:
    slots = virtual_slots([GpuGroup(type="V100", count=2), GpuGroup(type="K80", count=3)])
    assert [s.id for s in slots] == [0, 1, 2, 3, 4]
    assert [s.gpu_type for s in slots] == ["V100"] * 2 + ["K80"] * 3
    cluster = cluster_from_slots(slots)
    assert cluster.gpus_by_type() == {"K80": 3, "V100": 2}
    assert [cluster.nodes[cluster.gpu_node[s.id]].name for s in slots] == [s.node for s in slots]
    assert all(isinstance(s, GpuSlot) and s.device is None for s in slots)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("Tesla K80", "K80"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ],
)
def test_gpu_type_from_product_name(name: str, short: str) -> None:
    assert gpu_type_from_name(name) == short


def test_a_stage_command_is_checked_as_a_command_and_keeps_a_task_out_of_standby() -> None:
    from pydantic import ValidationError

    from corral.runtime.jobspec.specs import JobSpec

    task = {"factory": "corral.examples.tasks:digits", "steps": 5}
    assert JobSpec.model_validate({"task": task}).warm_argv() is not None
    staged = JobSpec.model_validate({"task": task, "stage": ["cp", "-r", "/data", "/scratch"]})
    assert staged.stage == ["cp", "-r", "/data", "/scratch"]
    assert staged.warm_argv() is None  # staging runs first, as its own program
    for bad in ([], [""], ["cp", "a\x00b"]):
        with pytest.raises(ValidationError, match="stage"):
            JobSpec.model_validate({"command": ["true"], "stage": bad})


def test_parking_is_checked_in_the_config(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    users = "users: [{name: a, token: long-enough}]\n"
    path.write_text("policy: las\nworkers: {park: 2}\n" + users)
    assert load_config(path).workers.park == 2
    path.write_text("policy: las\nworkers: {park: -1}\n" + users)
    with pytest.raises(InputError, match=r"corral.yaml:2: field 'workers.park'"):
        load_config(path)
    path.write_text("policy: las\nexecutor: ray\nworkers: {park: 1}\n" + users)
    with pytest.raises(InputError, match="parked jobs run with the local executor only"):
        load_config(path)


def test_round_keepers_are_checked_in_the_config(tmp_path: Path) -> None:
    path = tmp_path / "corral.yaml"
    users = "users: [{name: a, token: long-enough}]\n"
    path.write_text("policy: hare\nworkers: {standby: 1, keep: 2}\n" + users)
    assert load_config(path).workers.keep == 2
    path.write_text("policy: hare\nworkers: {standby: 1, keep: 9}\n" + users)
    with pytest.raises(InputError, match=r"corral.yaml:2: field 'workers.keep'"):
        load_config(path)
    path.write_text("policy: hare\nworkers: {keep: 1}\n" + users)
    with pytest.raises(InputError, match="round keepers start in standby workers"):
        load_config(path)


def test_a_round_keeper_takes_its_tasks_arguments() -> None:
    spec = JobSpec.model_validate(
        {"gpus": 2, "task": {"factory": "m:f", "steps": 8, "kwargs": {"seed": 3}}}
    )
    task = spec.model_copy(
        update={
            "command": spec.round_argv(1, 0),
            "round_of": {"job": 7, "round": 1, "part": 0, "parts": 2, "rounds": 4},
        }
    )
    argv = task.keeper_argv(Path("/j/7/rounds/keeper-0.sock"))
    assert argv[0] == "corral.train.round_keeper"
    assert argv[1:-2] == spec.round_argv(1, 0)[3:]
    assert argv[-2:] == ["--socket", "/j/7/rounds/keeper-0.sock"]
