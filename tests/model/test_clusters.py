"""Cluster presets, specs and scaling."""

from __future__ import annotations

import pytest

from corral.errors import CorralError, InputError
from corral.model.cluster_specs import load_cluster


def test_philly_preset_is_the_real_machine_list():
    c = load_cluster("philly")
    assert (c.num_nodes, c.total_gpus) == (552, 2490)
    assert c.gpus_by_type() == {"PHILLY-12GB": 642, "PHILLY-24GB": 1848}
    assert len(c.racks) == 21 + 15  # 321 / 16 and 231 / 16, rounded up


def test_philly_scaled_keeps_the_mix():
    c = load_cluster("philly", scale=0.17)
    # 321 * 0.17 = 54.6 -> 55 two-GPU nodes; 231 * 0.17 = 39.3 -> 39 eight-GPU nodes
    assert c.gpus_by_type() == {"PHILLY-12GB": 110, "PHILLY-24GB": 312}
    assert c.total_gpus == 422


def test_rack_size_is_configurable():
    assert len(load_cluster("philly", rack_size=8).racks) == 41 + 29


def test_alibaba_pai_preset():
    c = load_cluster("alibaba-pai")
    assert c.total_gpus == 6742 and c.num_nodes == 1814
    assert c.gpus_by_type() == {"MISC": 2240, "P100": 1596, "T4": 994, "V100": 832, "V100M32": 1080}


def test_gavel_and_uniform_presets():
    c = load_cluster("gavel:8:6:4")
    assert c.gpus_by_type() == {"K80": 4, "P100": 6, "V100": 8}
    assert sorted(n.gpus for n in c.nodes) == [2, 4, 4, 4, 4]
    u = load_cluster("uniform:16x4:v100")
    assert (u.num_nodes, u.total_gpus, u.gpu_type_names) == (16, 64, ("V100",))


def test_scaling_up_and_too_small():
    assert load_cluster("uniform:4x8:A100", scale=2.5).total_gpus == 80
    assert load_cluster("uniform:4x8:A100", scale=0.01).total_gpus == 8  # never empty
    with pytest.raises(CorralError, match="cluster-scale"):
        load_cluster("philly", scale=0)


@pytest.mark.parametrize("bad", ["gavel:1:2", "uniform:4x:V100", "uniform:0x4:V100", "nowhere"])
def test_bad_presets_are_explained(bad):
    with pytest.raises(CorralError):
        load_cluster(bad)


def test_tiresias_cluster_csv(tmp_path):
    path = tmp_path / "n32g4.csv"
    path.write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n2,16,4,40,256\n"
    )
    c = load_cluster(str(path))
    assert (c.num_nodes, c.total_gpus, len(c.racks)) == (32, 128, 2)
    path.write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n2,x,4,40,256\n"
    )
    with pytest.raises(InputError, match=r"n32g4.csv:2: field 'num_node_p_switch'"):
        load_cluster(str(path))


def test_yaml_cluster_spec(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text(
        "name: lab\nrack_size: 2\nnodes:\n"
        "  - {gpu_type: v100, gpus: 4, count: 3, cpus: 32, memory_gb: 256}\n"
        "  - {gpu_type: K80, gpus: 8, count: 2, rack: old}\n"
    )
    c = load_cluster(str(path))
    assert c.name == "lab" and c.gpus_by_type() == {"K80": 16, "V100": 12}
    assert c.racks == ("old", "rack1", "rack2")


def test_yaml_errors_name_the_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("nodes:\n  - gpu_type: V100\n    gpus: many\n")
    with pytest.raises(InputError, match=r"bad.yaml:3: field 'nodes\[0\].gpus'"):
        load_cluster(str(path))
    path.write_text("nodes:\n  - gpu_type: V100\n    gpus: 4\n    colour: red\n")
    with pytest.raises(InputError, match=r"bad.yaml:4: field 'nodes\[0\].colour'"):
        load_cluster(str(path))
    path.write_text("nodes: [\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_cluster(str(path))
