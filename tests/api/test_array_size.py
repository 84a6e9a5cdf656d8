"""Arrays as large as Slurm's: up to ``max_array_size`` tasks (its MaxArraySize:
indices 0 to one less), 10,001 unless the config says; larger ones refused with
the setting named, and a text naming billions of tasks refused before anything is
listed. A job may wait for a whole array of that size."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from corral.api.app import create_app
from corral.runtime.jobspec.specs import JobSpec
from corral.runtime.storage.store import JobRow, Store, encoded_with, to_json
from tests.runtime.harness import auth, make_config


def client(tmp_path: Path, **config: Any) -> tuple[TestClient, Store]:
    made = make_config(tmp_path / "state", max_jobs_per_user=50_000, **config)
    store = Store(made.store_url)
    return TestClient(create_app(made, store)), store


def post(api: TestClient, **spec: Any) -> Any:
    return api.post(
        "/v1/jobs", json={"command": ["true"], "gpus": 1, **spec}, headers=auth("alice")
    )


def test_an_array_of_slurms_default_size_is_queued_and_one_larger_is_refused(
    tmp_path: Path,
) -> None:
    api, store = client(tmp_path)
    try:
        began = time.perf_counter()
        answer = post(api, array="0-10000%8")
        took = time.perf_counter() - began
        assert answer.status_code == 201, answer.text
        tasks = answer.json()["array_tasks"]
        assert len(tasks) == 10_001
        with store.session() as s:
            last = s.get(JobRow, tasks[-1])
            assert last is not None
            assert (last.spec["array_index"], last.spec["array_limit"]) == (10_000, 8)
        print(f"10,001 tasks queued in {took:.2f} s")  # (a figure for people, not a target)
        refused = post(api, array="0-10001")
        assert refused.status_code == 422, refused.text
        said = str(refused.json())
        assert "10001" in said and "max_array_size" in said and "array" in said
        after = post(api, dependency=f"afterok:{tasks[0]}")  # the whole array, 10,001 jobs
        assert after.status_code == 201, after.text
        with store.session() as s:
            row = s.get(JobRow, after.json()["id"])
            assert row is not None and len(row.spec["dependency"]["afterok"]) == 10_001
    finally:
        store.dispose()


def test_the_config_sets_the_largest_array(tmp_path: Path) -> None:
    api, store = client(tmp_path, max_array_size=5)
    try:
        assert post(api, array="0-4").status_code == 201
        refused = post(api, array="2-5")
        assert refused.status_code == 422 and "max_array_size 5" in str(refused.json())
        five = post(api, array="0-4").json()["array_tasks"]
        whole = post(api, dependency=f"afterok:{five[0]}")
        assert whole.status_code == 201  # the array's 5 tasks: within the limit
        more = post(api, dependency=f"afterok:{five[0]},afterany:{whole.json()['id']}")
        assert more.status_code == 422 and "at most 5 others" in str(more.json())
    finally:
        store.dispose()


def test_a_text_naming_billions_of_tasks_is_refused_before_anything_is_listed() -> None:
    tracemalloc.start()
    try:
        for text in ("0-3999999999", "0-4000001", "5,0-99999999999:1"):
            try:
                JobSpec(command=["true"], array=text)
            except ValueError as exc:
                assert "past the largest" in str(exc)
            else:
                raise AssertionError(f"{text} was taken")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # (listing even the first 4 million indices takes hundreds of MB)


def test_a_job_after_an_array_larger_than_one_query_starts_once_all_have_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop reads a dependency on more tasks than one statement holds (a database
    bounds the values of one statement: 500 ids a piece, made 100 here so that 250
    tasks are two and a half pieces), and starts the job only once every task has
    ended."""
    from sqlalchemy import update

    from corral.runtime.jobspec.config import GpuGroup
    from corral.runtime.loop import queueing
    from corral.runtime.loop.admission import Admission
    from corral.runtime.storage import store
    from tests.runtime.virtual_loop import virtual_loop

    monkeypatch.setattr(store, "IN_CHUNK", 100)
    monkeypatch.setattr(queueing, "IN_CHUNK", 100)
    loop = virtual_loop(tmp_path, "fifo", gpus=[GpuGroup(type="V100", count=8)])
    try:
        alice = next(u for u in loop.config.users if u.name == "alice")
        admission = Admission(loop.config, loop.store, loop.scheduler.cluster.gpus_by_type)
        with loop.store.session() as s:
            tasks = admission.admit(s, JobSpec(command=["sleep", "1"], array="0-249"), alice)
            array = tasks.ids
            after = admission.admit(
                s, JobSpec(command=["sleep", "1"], dependency=f"afterok:{array[0]}"), alice
            ).first.id
            s.execute(update(JobRow).values(submit_time=loop.clock()))  # (in virtual time)
        loop.run(120)
        assert len(array) == 250 and {loop.row(j).status for j in array} == {"SUCCEEDED"}
        last_end = max(loop.row(j).end_time or 0.0 for j in array)
        done = loop.row(after)
        assert done.status == "SUCCEEDED" and (done.first_start or 0.0) >= last_end
    finally:
        loop.close()


def test_a_batch_of_the_largest_arrays_is_refused_by_the_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thousand 10,001-task arrays in one request: refused (429), nothing queued,
    and the arrays are listed only until the quota is passed (not ten million indices)."""
    from corral.runtime.loop.admission import Admission

    listed: list[int] = []
    tasks = Admission.tasks

    def counted(self: Admission, spec: JobSpec) -> list[int | None]:
        listed.append(1)
        return tasks(self, spec)

    monkeypatch.setattr(Admission, "tasks", counted)
    made = make_config(tmp_path / "state")
    store = Store(made.store_url)
    api = TestClient(create_app(made, store))
    try:
        jobs = [{"command": ["true"], "gpus": 1, "array": "0-10000"}] * 1000
        answer = api.post("/v1/jobs/batch", json={"jobs": jobs}, headers=auth("alice"))
        assert answer.status_code == 429, answer.text
        assert "max_jobs_per_user" in answer.text
        with store.session() as s:
            assert s.query(JobRow).count() == 0
        assert len(listed) <= 2
    finally:
        store.dispose()


@given(
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(st.integers(), st.text(max_size=10), st.none(), st.lists(st.integers())),
        max_size=6,
    ),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=5),
)
def test_specs_encoded_once_are_the_specs_themselves(
    value: dict[str, Any], indices: list[int]
) -> None:
    """An array's task specs, made from one encoding of the first (see
    ``storage.store.encoded_with``), read back as the first with each task's index,
    whatever the spec holds (even text that looks like the index's key)."""
    value = {**value, "note": '"array_index": -7193311777'} if len(indices) % 2 else value
    made = encoded_with(value, "array_index", indices)
    assert [json.loads(to_json(spec)) for spec in made] == [
        {**value, "array_index": i} for i in indices
    ]
    assert made == [{**value, "array_index": i} for i in indices]
