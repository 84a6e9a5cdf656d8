"""Slurm partitions (``sbatch -p``): the service's config maps each name to a
virtual cluster, a GPU type or both; a job naming one gets them as if it had
asked, an unknown name or one at odds with the job's own choice is refused with
the field named, and a misconfigured map is refused at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from corral.api.app import create_app
from corral.errors import InputError
from corral.runtime.jobspec.config import Partition
from corral.runtime.jobspec.directives import script_fields
from corral.runtime.storage.store import JobRow, Store
from tests.runtime.harness import auth, make_config

PARTITIONS = {
    "gpu": Partition(vc="lab"),
    "old": Partition(gpu_type="k80"),  # (normalised: K80)
    "fast": Partition(vc="prod", gpu_type="V100"),
}


def client(tmp_path: Path, **config: Any) -> tuple[TestClient, Store]:
    made = make_config(tmp_path / "state", **config)
    store = Store(made.store_url)
    return TestClient(create_app(made, store)), store


def post(api: TestClient, **spec: Any) -> Any:
    return api.post(
        "/v1/jobs", json={"command": ["true"], "gpus": 1, **spec}, headers=auth("alice")
    )


def stored(store: Store, job: int) -> tuple[Any, Any, Any]:
    with store.session() as s:
        row = s.get(JobRow, job)
        assert row is not None
        return row.spec.get("partition"), row.spec.get("vc"), row.spec.get("gpu_type")


def test_a_partition_stands_for_its_vc_and_gpu_type(tmp_path: Path) -> None:
    api, store = client(tmp_path, vcs={"lab": 2, "prod": 2}, partitions=PARTITIONS)
    try:
        for name, expect in (
            ("gpu", ("gpu", "lab", None)),
            ("old", ("old", None, "K80")),
            ("fast", ("fast", "prod", "V100")),
        ):
            answer = post(api, partition=name)
            assert answer.status_code == 201, answer.text
            assert stored(store, answer.json()["id"]) == expect
        agreeing = post(api, partition="fast", vc="prod", gpu_type="v100")
        assert agreeing.status_code == 201, agreeing.text
        batch = api.post(
            "/v1/jobs/batch",
            json={"jobs": [{"command": ["true"], "partition": "old"}]},
            headers=auth("alice"),
        )
        assert batch.status_code == 201, batch.text
        assert stored(store, batch.json()[0]["id"]) == ("old", None, "K80")
    finally:
        store.dispose()


def test_an_unknown_partition_or_one_at_odds_with_the_job_is_refused(tmp_path: Path) -> None:
    api, store = client(tmp_path, vcs={"lab": 2, "prod": 2}, partitions=PARTITIONS)
    try:
        for spec, field, words in (
            ({"partition": "debug"}, "partition", "no partition 'debug' here (there are fast"),
            ({"partition": "fast", "vc": "lab"}, "vc", "means vc prod; the job asks for lab"),
            ({"partition": "old", "gpu_type": "V100"}, "gpu_type", "means gpu_type K80"),
        ):
            answer = post(api, **spec)
            assert answer.status_code == 422, answer.text
            said = str(answer.json())
            assert field in said and words in said, said
        with store.session() as s:
            assert s.query(JobRow).count() == 0  # nothing queued elsewhere than asked
    finally:
        store.dispose()
    bare, store = client(tmp_path / "bare")
    try:
        said = str(post(bare, partition="gpu").json())
        assert "names none ('partitions' in its config)" in said
    finally:
        store.dispose()


def test_a_partition_map_that_cannot_work_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="names virtual cluster 'nope', which is not in"):
        make_config(tmp_path, vcs={"lab": 2}, partitions={"gpu": Partition(vc="nope")})
    with pytest.raises(ValidationError, match="give the partition a 'vc', a 'gpu_type', or both"):
        Partition()
    with pytest.raises(ValidationError, match="not a valid partition name"):
        make_config(tmp_path, partitions={"bad name": Partition(vc="lab")})


def test_an_sbatch_partition_line_is_read(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -p gpu\n#SBATCH --gpus=2\npython train.py\n")
    assert script_fields(script)["partition"] == "gpu"
    script.write_text("#!/bin/bash\n#SBATCH --partition=a,b\npython train.py\n")
    with pytest.raises(InputError) as err:  # one partition; a list is refused with its line
        script_fields(script)
    assert "job.sh:2: field '--partition'" in str(err.value)
    assert "one partition" in str(err.value)
