"""Heterogeneous speeds: measured types, fallbacks, mixed gangs, user profiles."""

from __future__ import annotations

import pytest

from corral.errors import InputError
from corral.model.cluster import Cluster, Node, assign_racks
from corral.perf.profiles import load_profiles
from corral.perf.speeds import SpeedModel
from corral.perf.throughputs import ThroughputTable, gavel_throughputs

from ..conftest import finish_times, run

R50 = "ResNet-50 (batch size 64)"


def mixed(types: list[str], per_node: int = 4) -> Cluster:
    nodes = [Node(f"n{k}", t, per_node) for k, t in enumerate(types)]
    return Cluster("mixed", assign_racks(nodes, 16), rack_size=16)


def test_measured_speeds_and_fallbacks() -> None:
    model = SpeedModel()
    table = gavel_throughputs().alone
    v100 = table[("V100", True)][(R50, 1)]
    assert model.throughput(R50, "V100", 1) == v100
    assert model.throughput(R50, "K80", 1) == table[("K80", True)][(R50, 1)] < v100
    # an unmeasured GPU type runs like the reference type; an unmeasured count scales linearly
    assert model.throughput(R50, "PHILLY-12GB", 1) == v100
    assert model.throughput(R50, "V100", 16) == pytest.approx(table[("V100", True)][(R50, 8)] * 2)
    assert model.throughput("generic", "V100", 1) is None


def test_mixed_gang_runs_at_its_slowest_type_times_sync() -> None:
    table = ThroughputTable(
        alone={
            ("V100", True): {("m", 1): 10.0, ("m", 2): 18.0},
            ("K80", True): {("m", 1): 3.0, ("m", 2): 5.0},
        }
    )
    model = SpeedModel(table)
    # one V100 and one K80 server: the K80 pace, sync x0.9, times the locality
    # factor (servers of different kinds sit in different racks: 0.7)
    cluster = mixed(["V100", "K80"], per_node=1)
    assert model.gang_speed(cluster, [0, 1], "m", "", 1.0) == pytest.approx(5.0 * 0.9 * 0.7)
    # two K80 servers in one rack: consolidated speed x 0.8
    assert model.gang_speed(mixed(["K80", "K80"], 1), [0, 1], "m", "", 1.0) == pytest.approx(4.0)
    # on one server of one type: the consolidated measurement
    assert model.gang_speed(mixed(["V100"], per_node=2), [0, 1], "m", "", 1.0) == 18.0


def test_type_speed_matrix_and_trace_durations() -> None:
    cluster = mixed(["K80", "P100", "V100"])
    rows = [(0.0, 1, 100.0), (0.0, 1, 100.0)]
    result = run(rows, cluster, "fifo")  # generic jobs: the same speed everywhere
    assert (result.state.type_speed == 1.0).all()
    from corral.model.jobs import JobTable

    jobs = JobTable.from_records(
        [{"submit_time": 0, "num_gpus": 1, "duration": 100.0, "job_type": R50}]
    )
    rate = SpeedModel().throughput(R50, "V100", 1)
    assert jobs.df["total_steps"].iloc[0] == pytest.approx(100.0 * rate)  # type: ignore[operator]


def test_a_typed_job_on_a_k80_runs_as_much_slower_as_measured(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from corral.model.jobs import JobTable
    from corral.policies import make_policy
    from corral.sim.engine import Simulator
    from corral.sim.result import SimConfig

    jobs = JobTable.from_records(
        [{"submit_time": 0, "num_gpus": 1, "duration": 100.0, "job_type": R50}]
    )
    k80 = Cluster("k80", [Node("n0", "K80", 1)])
    result = Simulator(jobs, k80, make_policy("fifo"), SimConfig(switch_cost=0.0)).run()
    table = gavel_throughputs().alone
    ratio = table[("V100", True)][(R50, 1)] / table[("K80", True)][(R50, 1)]
    assert finish_times(result)["0"] == pytest.approx(100.0 * ratio)


def test_user_profiles_extend_and_replace(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "profiles.csv"
    path.write_text(
        "job_type,gpu_type,num_gpus,steps_per_second\nmy-bert,A100,1,40\nmy-bert,V100,1,20\n"
        f"{R50},V100,1,999\n"
    )
    table = load_profiles(path)
    model = SpeedModel(table)
    assert model.throughput("my-bert", "a100", 1) == 40
    assert model.throughput("my-bert", "V100", 2) == 40  # linear from 1 GPU
    assert model.throughput(R50, "V100", 1) == 999
    assert model.throughput(R50, "K80", 1) == gavel_throughputs().alone[("K80", True)][(R50, 1)]


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("job_type,gpu_type,num_gpus,steps_per_second\nx,V100,0,1\n", 2, "num_gpus"),
        (
            "job_type,gpu_type,num_gpus,steps_per_second\nx,V100,1,1\nx,V100,1,fast\n",
            3,
            "steps_per_second",
        ),
        ("job_type,gpu_type,num_gpus\nx,V100,1\n", 1, "steps_per_second"),
        (
            "job_type,gpu_type,num_gpus,steps_per_second,consolidated\nx,V100,1,1,maybe\n",
            2,
            "consolidated",
        ),
    ],
)
def test_bad_profiles_name_file_line_and_field(tmp_path, text, line, field) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_profiles(path)
    assert err.value.line == line and err.value.field == field
    assert str(path) in str(err.value)
