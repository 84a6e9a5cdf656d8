"""A placement strategy of one's own (``examples/policies/worst_fit.py``): chosen
by ``file.py:Class`` wherever a placement is named, run in ``compare`` with the
simulator's invariants and in the service's own loop (virtual time)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from corral import Experiment
from corral.errors import CorralError
from corral.model.cluster_specs import load_cluster
from corral.model.free_gpus import FreeGPUs
from corral.placement.registry import make_placement
from corral.runtime.jobspec.config import GpuGroup
from tests.runtime.virtual_loop import virtual_loop

EXAMPLE = Path(__file__).parents[2] / "examples" / "policies" / "worst_fit.py"
WORST_FIT = f"{EXAMPLE}:WorstFit"


def test_worst_fit_puts_a_job_on_the_emptiest_node_and_a_gang_where_it_fits() -> None:
    cluster = load_cluster("uniform:3x4:V100")
    free = FreeGPUs(cluster)
    free.take([0, 1, 2])  # node 0: one GPU free; node 1: four; node 2: four
    free.take([8])  # node 2: three
    strategy = make_placement(WORST_FIT)
    assert strategy.name == "worst-fit"
    chosen = strategy.choose(free, 1)
    assert chosen is not None and {g // 4 for g in chosen} == {1}
    consolidated = make_placement("consolidate").choose(free, 1)
    assert consolidated is not None and {g // 4 for g in consolidated} == {0}
    assert strategy.choose(free, 8) is not None and strategy.choose(free, 9) is None


def test_worst_fit_runs_in_compare_with_the_invariants_checked(tmp_path: Path) -> None:
    quiet = lambda kind, text: None  # noqa: E731
    results = Experiment(
        trace="synthetic:jobs=150,load=1.0",
        cluster="uniform:4x8:V100",
        policies="fifo,las",
        placement=WORST_FIT,
        check=True,
        runner="serial",
    ).run(tmp_path / "out", say=quiet)
    assert results.ok, results.failures
    assert all(s["jobs_finished"] == 150 for s in results.summaries)
    assert results.provenance["placement_source"]["file"] == "worst_fit.py"


def test_worst_fit_live_spreads_one_gpu_jobs_over_nodes(tmp_path: Path) -> None:
    gpus = [GpuGroup(type="V100", count=2, node="a"), GpuGroup(type="V100", count=2, node="b")]
    nodes = {}
    for placement in (WORST_FIT, "consolidate"):
        loop = virtual_loop(tmp_path / placement[-11:], gpus=gpus, placement=placement)
        jobs = [loop.queue(command=["sleep", "10"], gpus=1) for _ in range(2)]
        loop.run(2)
        slots = loop.scheduler.slots
        nodes[placement] = {slots[g].node for job in jobs for g in loop.row(job).gpus}
        loop.run(30)
        assert all(loop.row(job).status == "SUCCEEDED" for job in jobs)
        loop.close()
    assert len(nodes[WORST_FIT]) == 2
    assert len(nodes["consolidate"]) == 1


def test_a_placement_that_cannot_be_made_is_refused_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(CorralError, match="no file"):
        make_placement(f"{tmp_path}/none.py:Mine")
    with pytest.raises(ValidationError, match="placement"):
        virtual_loop(tmp_path, placement="nowhere")
