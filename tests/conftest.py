"""Shared helpers: small hand-made workloads and clusters."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from corral.model.cluster import Cluster, Node, assign_racks
from corral.model.jobs import JobTable
from corral.policies import make_policy
from corral.ray_support import SINGLE_MACHINE_SETTING
from corral.sim.engine import Simulator
from corral.sim.result import SimConfig, SimResult
from tests import postgres

# Every Ray instance the tests start listens on 127.0.0.1: keep Ray from
# turning loopback addresses into the machine's outward IP (set before any
# test imports Ray; see corral.ray_support).
os.environ.setdefault(SINGLE_MACHINE_SETTING, "0")

# A status change outside the job life cycle is an error in every test, in this
# process and in the services the tests start (live, it is refused and logged).
os.environ["CORRAL_STRICT_TRANSITIONS"] = "1"

# pytest-xdist's workers are given COLUMNS=80 and LINES=24; the CLI's tests read
# its output as a program piped into another would see it (no terminal width).
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

Row = tuple[float, int, float] | tuple[float, int, float, str]
"""(submit, gpus, duration) or (submit, gpus, duration, model)."""


def jobs_table(rows: list[Row]) -> JobTable:
    """Jobs from row tuples, ids j0, j1, ..."""
    frame = {
        "job_id": [f"j{k}" for k in range(len(rows))],
        "submit_time": [r[0] for r in rows],
        "num_gpus": [r[1] for r in rows],
        "duration": [r[2] for r in rows],
    }
    if any(len(r) > 3 for r in rows):
        frame["model"] = [r[3] if len(r) > 3 else "" for r in rows]  # type: ignore[misc]
    return JobTable(pd.DataFrame(frame))


def uniform(nodes: int, per_node: int, rack_size: int = 16, gpu_type: str = "V100") -> Cluster:
    made = [Node(f"n{k}", gpu_type, per_node) for k in range(nodes)]
    return Cluster("test", assign_racks(made, rack_size), rack_size=rack_size)


def run(
    rows: list[Row],
    cluster: Cluster,
    policy: str,
    switch_cost: float = 0.0,
    **options: object,
) -> SimResult:
    config = SimConfig(switch_cost=switch_cost, check_invariants=True)
    return Simulator(jobs_table(rows), cluster, make_policy(policy, **options), config).run()


def finish_times(result: SimResult) -> dict[str, float]:
    s = result.state
    return {jid: float(s.finish_time[k]) for k, jid in enumerate(s.job_ids)}


@pytest.fixture
def small_cluster() -> Cluster:
    return uniform(2, 4)


@pytest.fixture
def enterable_dir() -> Iterator[Path]:
    """A folder every user may enter (mode 711), outside pytest's private tmp
    (which other users cannot pass through): where an admin would put the jobs
    of a service whose jobs run as other Unix users. Removed after the test."""
    folder = Path(tempfile.mkdtemp(prefix="corral-jobs-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str | None]:
    with postgres.server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The service's store: None (SQLite in the state folder) or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield None
        return
    server = request.getfixturevalue("postgres_server")
    if server is None:
        pytest.skip(postgres.WHY_SKIPPED)
    with postgres.fresh_database(server) as url:
        yield url
