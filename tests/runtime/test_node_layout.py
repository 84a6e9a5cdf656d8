"""sbatch's ``--nodes`` with ``--gpus-per-node``: a gang on exactly that many nodes,
the same GPUs on each, whatever the policy's placement would have chosen (virtual
time for the loop); directives read as sbatch reads them; layouts that could not
be kept (a policy that resizes or shares jobs, more nodes than the cluster has)
refused at submission with the field named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.api.app import create_app
from corral.errors import InputError
from corral.model.cluster import Cluster, Node
from corral.model.free_gpus import FreeGPUs
from corral.runtime.jobspec.config import GpuGroup
from corral.runtime.jobspec.directives import script_fields
from corral.runtime.storage.store import Store
from corral.testing.virtual import VirtualClock, VirtualExecutor, virtual_scheduler
from tests.runtime.harness import auth, make_config
from tests.runtime.virtual_loop import VirtualLoop

TWO_NODES = [
    GpuGroup(type="V100", count=4, node="a"),
    GpuGroup(type="V100", count=4, node="b"),
]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    kinds=st.lists(st.sampled_from(["V100", "K80"]), min_size=6, max_size=6),
    taken=st.lists(st.booleans(), min_size=48, max_size=48),
    nodes=st.integers(1, 6),
    per_node=st.integers(1, 8),
)
def test_a_layout_is_exactly_so_many_nodes_with_so_many_free_gpus_each(
    sizes: list[int], kinds: list[str], taken: list[bool], nodes: int, per_node: int
) -> None:
    """Exactly the layout, on free GPUs, whenever the free GPUs allow one; on nodes of
    one GPU type whenever one type alone allows it."""
    cluster = Cluster("c", [Node(f"n{k}", kinds[k], g) for k, g in enumerate(sizes)])
    mask = np.array(taken[: cluster.total_gpus]) == False  # noqa: E712 (True: free)
    free = FreeGPUs(cluster, mask)
    chosen = free.in_layout(nodes, per_node)
    could = int((free.node_free >= per_node).sum()) >= nodes
    assert (chosen is not None) == could
    if chosen is not None:
        assert len(set(chosen)) == len(chosen) == nodes * per_node
        assert all(mask[g] for g in chosen)
        by_node = np.bincount(cluster.gpu_node[chosen], minlength=len(sizes))
        assert sorted(by_node[by_node > 0].tolist()) == [per_node] * nodes
        assert cluster.in_layout(chosen, nodes)  # what the loop checks before a start
        assert not cluster.in_layout(chosen, nodes + 1)
        fitting = [k for k in range(len(sizes)) if free.node_free[k] >= per_node]
        one_type = any(sum(kinds[k] == kind for k in fitting) >= nodes for kind in ("V100", "K80"))
        if one_type:
            assert len({cluster.node_types[int(cluster.gpu_node[g])] for g in chosen}) == 1


def test_the_start_check_reads_a_layout_as_slurm_does() -> None:
    cluster = Cluster("c", [Node("a", "V100", 4), Node("b", "V100", 4), Node("c", "K80", 2)])
    assert cluster.in_layout([0, 1, 4, 5], 2)  # two on each of a and b
    assert cluster.in_layout([0, 1, 2, 3], 1)
    assert not cluster.in_layout([0, 1, 2, 4], 2)  # three and one: uneven
    assert not cluster.in_layout([0, 4, 8], 2)  # three nodes
    assert cluster.in_layout([0, 4, 8], 3)
    assert not cluster.in_layout([], 1)


def loop_on_two_nodes(tmp_path: Path, policy: str, **options: Any) -> VirtualLoop:
    config = make_config(tmp_path / "state", policy=policy, policy_options=options, gpus=TWO_NODES)
    store = Store(config.store_url)
    clock = VirtualClock()
    executor = VirtualExecutor(config, clock, store)
    return VirtualLoop(
        config, store, clock, executor, virtual_scheduler(config, store, clock, executor)
    )


@pytest.mark.parametrize(
    ("policy", "options"),
    [
        ("fifo", {}),
        ("tiresias-las", {}),
        ("themis", {}),
        ("allox", {}),
        ("gavel-max-min-fairness", {"round": 5.0}),
        ("philly", {}),
    ],
)
def test_a_gang_spans_exactly_the_nodes_it_asked_for(
    tmp_path: Path, policy: str, options: dict[str, Any]
) -> None:
    """Two nodes of 4 V100s. ``spread`` (4 GPUs, 2 nodes) gets 2 on each, though the
    policy's placement would put 4 GPUs on one node; ``whole`` (4 GPUs, 1 node)
    then waits for a node with 4 free, though 4 GPUs are free in all; ``pair``
    (2 GPUs, 2 nodes) gets one on each."""
    loop = loop_on_two_nodes(tmp_path, policy, **options)
    try:
        spread = loop.queue(command=["sleep", "20"], gpus=4, nodes=2)
        loop.run(2)
        whole = loop.queue(command=["sleep", "5"], gpus=4, nodes=1)
        loop.run(5)
        assert loop.row(whole).status == "PENDING"
        loop.run(60)
        pair = loop.queue(command=["sleep", "5"], gpus=2, nodes=2)
        loop.run(60)
        node = {slot.id: slot.node for slot in loop.scheduler.slots}
        for job, layout in ((spread, [2, 2]), (whole, [4]), (pair, [1, 1])):
            row = loop.row(job)
            assert row.status == "SUCCEEDED", (job, row.status, row.reason)
            for attempt in loop.attempts(job):
                placed = [node[g] for g in attempt.gpus]
                counts = sorted(placed.count(n) for n in set(placed))
                assert counts == layout, (job, attempt.gpus)
        first_end = loop.attempts(spread)[-1].end_time
        assert loop.attempts(whole)[0].start_time >= first_end - 1e-6
    finally:
        loop.close()


def script(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n" + "\n".join(lines) + "\npython train.py\n")
    return path


def test_sbatch_layout_directives(tmp_path: Path) -> None:
    fields = script_fields(script(tmp_path, "#SBATCH -N 2", "#SBATCH --gpus-per-node=4"))
    assert (fields["gpus"], fields["nodes"]) == (8, 2)
    fields = script_fields(script(tmp_path, "#SBATCH --gpus-per-node=v100:2"))
    assert (fields["gpus"], fields["gpu_type"]) == (2, "v100")
    assert "nodes" not in fields  # no -N: anywhere the policy places it, as before
    fields = script_fields(script(tmp_path, "#SBATCH --nodes=2", "#SBATCH --gres=gpu:4"))
    assert (fields["gpus"], fields["nodes"]) == (8, 2)  # Slurm's --gres counts per node
    fields = script_fields(script(tmp_path, "#SBATCH --gres=gpu:k80:3"))
    assert (fields["gpus"], fields["gpu_type"]) == (3, "k80") and "nodes" not in fields
    fields = script_fields(script(tmp_path, "#SBATCH --ntasks-per-node=1", "#SBATCH -G 2"))
    assert fields["gpus"] == 2 and fields["tasks_per_node"] == 1
    fields = script_fields(script(tmp_path, "#SBATCH -N 2", "#SBATCH --ntasks=8", "#SBATCH -G 8"))
    assert fields["tasks_per_node"] == 4 and "ntasks" not in fields  # (8 tasks over 2 nodes)
    for lines, line, words in (
        (("#SBATCH -N 2", "#SBATCH --gpus=6", "#SBATCH --gpus-per-node=4"), 4, "is 8, but"),
        (("#SBATCH -N 1-2",), 2, "exact node count, not a range"),
        (("#SBATCH -N 2", "#SBATCH --ntasks=3"), 3, "do not split evenly over 2 nodes"),
        (("#SBATCH --ntasks-per-node=2", "#SBATCH --ntasks=3"), 3, "give one or the other"),
        (("#SBATCH --ntasks-per-node=0",), 2, "give 1 to 1024 tasks"),
        (("#SBATCH --gpus-per-node=k80:1", "#SBATCH --gpu-type=v100"), 2, "GPU type k80"),
    ):
        with pytest.raises(InputError) as err:
            script_fields(script(tmp_path, *lines))
        assert f"job.sh:{line}:" in str(err.value) and words in str(err.value), str(err.value)


def post(api: TestClient, **spec: Any) -> Any:
    return api.post(
        "/v1/jobs", json={"command": ["true"], "gpus": 4, **spec}, headers=auth("alice")
    )


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ("gandiva", "may change a job's number of GPUs"),
        ("pollux", "may change a job's number of GPUs"),
        ("antman", "may run a job on GPUs another job holds"),
        ("hived", "places jobs in its own cells"),
        ("hare", "rounds of tasks"),
    ],
)
def test_a_layout_a_policy_could_not_keep_is_refused(
    tmp_path: Path, policy: str, words: str
) -> None:
    loop = loop_on_two_nodes(tmp_path, policy)
    api = TestClient(create_app(loop.config, loop.store, loop.scheduler))
    try:
        refused = post(api, nodes=2)
        assert refused.status_code == 422, refused.text
        said = str(refused.json())
        assert "nodes" in said and words in said, said
        if policy != "hare":  # (hare takes jobs given as tasks only)
            assert post(api).status_code == 201  # without a layout: queued as ever
    finally:
        loop.close()


def test_a_layout_the_cluster_cannot_offer_or_uneven_is_refused(tmp_path: Path) -> None:
    loop = loop_on_two_nodes(tmp_path, "fifo")
    api = TestClient(create_app(loop.config, loop.store, loop.scheduler))
    try:
        for spec, words in (
            ({"gpus": 6, "nodes": 3}, "3 nodes with 2 GPUs each; the cluster has 2 such"),
            ({"gpus": 8, "nodes": 1}, "1 nodes with 8 GPUs each; the cluster has 0 such"),
            ({"gpus": 3, "nodes": 3, "gpu_type": "V100"}, "1 V100 GPUs each; the cluster has 2"),
            ({"gpus": 5, "nodes": 2}, "5 GPUs do not split evenly over 2 nodes"),
        ):
            refused = post(api, **spec)
            assert refused.status_code == 422, refused.text
            assert words in str(refused.json()), refused.json()
        assert post(api, gpus=8, nodes=2).status_code == 201
    finally:
        loop.close()


def test_a_start_that_breaks_the_layout_is_never_carried_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy that places a job its own way, ignoring its layout (a plugin calling
    its strategy directly): the loop skips the start, and the job waits."""

    from corral.placement.strategies import PlacementStrategy

    monkeypatch.setattr(PlacementStrategy, "choose_for", PlacementStrategy.choose_job)
    loop = loop_on_two_nodes(tmp_path, "fifo")
    try:
        job = loop.queue(command=["sleep", "5"], gpus=4, nodes=2)
        loop.run(5)
        assert loop.row(job).status == "PENDING" and loop.attempts(job) == []
        why = loop.event_detail(job, "start_skipped")
        assert why is not None and "needs 2 nodes" in str(why)
    finally:
        loop.close()
