"""Locality, switching costs and the bundled measurements."""

from __future__ import annotations

import gzip
import json

import pytest

from corral.data import data_path
from corral.errors import CorralError
from corral.perf.communication import model_profile, spread_factor
from corral.perf.locality import LocalityModel
from corral.perf.pollux_models import step_time, steps_to_target
from corral.perf.switching import (
    SWITCH_MECHANISMS,
    default_profile_path,
    read_profile,
    switch_cost_seconds,
    write_profile,
)
from corral.perf.throughputs import gavel_throughputs
from tests.conftest import uniform


def test_locality_factor_by_span():
    cluster = uniform(4, 4, rack_size=2)  # racks {n0,n1}, {n2,n3}
    model = LocalityModel(cross_node=0.9, cross_rack=0.5)
    assert model.factor(cluster, [0]) == 1.0
    assert model.factor(cluster, [0, 1, 2, 3]) == 1.0
    assert model.factor(cluster, [3, 4]) == 0.9
    assert model.factor(cluster, [7, 8]) == 0.5
    with pytest.raises(CorralError):
        LocalityModel(cross_node=1.5)


def test_switch_costs_come_from_the_hare_table():
    assert SWITCH_MECHANISMS["kill-restart"] == pytest.approx(5.8747, abs=1e-4)
    assert SWITCH_MECHANISMS["pipeswitch"] == pytest.approx(0.006361, abs=1e-6)
    assert SWITCH_MECHANISMS["hare"] == pytest.approx(0.003144, abs=1e-6)
    assert switch_cost_seconds(None) == SWITCH_MECHANISMS["kill-restart"]
    assert switch_cost_seconds("0") == 0.0
    assert switch_cost_seconds("Gandiva") == 0.1
    for bad in ("-3", "fast"):
        with pytest.raises(CorralError):
            switch_cost_seconds(bad)


def test_gavel_table():
    table = gavel_throughputs()
    assert len(table.job_types) == 26
    with gzip.open(data_path("gavel", "throughputs.json.gz"), "rt") as fh:
        raw = json.load(fh)
    key = "('ResNet-50 (batch size 64)', 4)"
    assert (
        table.steps_per_second("ResNet-50 (batch size 64)", "V100", 4) == raw["v100"][key]["null"]
    )
    spread = table.steps_per_second("ResNet-50 (batch size 64)", "V100", 4, consolidated=False)
    assert spread == raw["v100_unconsolidated"][key]["null"]
    k80 = table.steps_per_second("ResNet-50 (batch size 64)", "k80", 1)
    assert k80 < table.steps_per_second("ResNet-50 (batch size 64)", "V100", 1)
    with pytest.raises(CorralError):
        table.steps_per_second("ResNet-50 (batch size 64)", "H100", 1)


def test_pollux_measurements():
    assert steps_to_target("cifar10", 2048) == 3178
    # one node holds 4 GPUs in Pollux's testbed: the single-node BERT step at
    # local batch 4 is the 0.533 s measured for placement "4"
    assert step_time("bert", 4, 16) == pytest.approx(0.5326, abs=1e-3)
    with pytest.raises(CorralError):
        steps_to_target("cifar10", 3)


def _placement_rows(model: str) -> list[dict[str, str]]:
    import csv

    with data_path("pollux", "models", model, "placements.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_locality_of_a_known_model_comes_from_the_communication_model():
    # BERT on 2 GPUs: placement "2" (one server) vs "11" (two servers), at the
    # median local batch size measured for 2 replicas, read straight from the CSV.
    rows = [r for r in _placement_rows("bert") if r["placement"] in ("2", "11")]
    sizes = sorted(int(r["local_bsz"]) for r in rows)
    bsz = sizes[len(sizes) // 2]

    def step(placement: str) -> float:
        times = [
            float(r["step_time"])
            for r in rows
            if r["placement"] == placement and int(r["local_bsz"]) == bsz
        ]
        return sum(times) / len(times)

    measured = step("2") / step("11")
    cluster = uniform(4, 4, rack_size=2)
    model = LocalityModel(cross_node=0.9, cross_rack=0.45)
    factor = model.factor(cluster, [3, 4], "bert")
    profile = model_profile("bert")
    assert profile is not None
    assert factor == pytest.approx(spread_factor(profile, cluster, [3, 4]))
    # the model's fit to the measurements (docs/validation/communication.md)
    assert factor == pytest.approx(measured, abs=0.2)
    assert factor < 0.9  # BERT is far more sensitive than the generic default
    # across racks the slower uplinks slow it further
    assert model.factor(cluster, [7, 8], "bert") < factor
    # unknown models and switching the model off use the configured factor
    assert model.factor(cluster, [3, 4], "vgg16") == 0.9
    assert model.factor(cluster, [7, 8], "vgg16") == 0.45
    assert LocalityModel(0.9, 0.5, measured=False).factor(cluster, [3, 4], "bert") == 0.9
    # aliases: ResNet-50 is Pollux's ImageNet workload
    assert model.factor(cluster, [3, 4], "resnet50") == model.factor(cluster, [3, 4], "imagenet")


def test_measured_switch_costs_come_from_the_profile_the_benchmark_writes(tmp_path, monkeypatch):
    models = {
        "digits": {"parameters": 10, "cold_median_s": 1.5, "warm_median_s": 0.0001},
        "resnet50": {"parameters": 25_000_000, "cold_median_s": 4.0, "warm_median_s": 0.02},
    }
    path = tmp_path / "profile.json"
    assert write_profile(path, "CPU", 20, models) == "resnet50"  # the largest model's figures
    assert switch_cost_seconds("measured", path) == 0.02
    assert switch_cost_seconds("Measured-Cold", path) == 4.0
    monkeypatch.setenv("CORRAL_SWITCH_PROFILE", str(path))
    assert default_profile_path() == path and switch_cost_seconds("measured") == 0.02
    monkeypatch.setenv("CORRAL_SWITCH_PROFILE", str(tmp_path / "none.json"))
    with pytest.raises(CorralError, match=r"no switching profile at .*benchmarks/switching\.py"):
        switch_cost_seconds("measured")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{\n  nope", "profile.json:2: not valid JSON"),
        ('{"format": "other"}', "field 'format'"),
        ('{"format": "corral switching profile 1", "mechanisms": []}', "field 'mechanisms'"),
        (
            '{"format": "corral switching profile 1", "mechanisms": {"measured": -1,'
            ' "measured-cold": 2}}',
            "field 'mechanisms.measured': expected seconds >= 0, got -1",
        ),
        (
            '{"format": "corral switching profile 1", "mechanisms": {"measured": 0.1}}',
            "field 'mechanisms.measured-cold'",
        ),
    ],
)
def test_a_bad_switching_profile_is_named_with_its_field(tmp_path, text, where):
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(CorralError, match=where):
        read_profile(path)


def test_memory_left_beside_a_job_keeps_a_margin_and_a_floor() -> None:
    from corral.perf.memory import MEMORY_MARGIN, MIN_MEMORY_SHARE, memory_left

    assert memory_left(8e9, 16e9) == round(0.5 - MEMORY_MARGIN, 3)
    assert memory_left(0.0, 16e9) == 1 - MEMORY_MARGIN  # never all of it
    assert memory_left(20e9, 16e9) == MIN_MEMORY_SHARE  # an over-full GPU: the floor
    caps = [memory_left(used * 1e9, 16e9) for used in range(17)]
    assert caps == sorted(caps, reverse=True)  # more used, never more left


def test_a_local_batch_beyond_one_gpu_accumulates_gradients():
    """BERT's largest measured local batch is 12: a 384 batch on 6 GPUs (64
    each) runs as 6 micro-batches of about 11, so a step costs the measured
    step at 11 plus 5 more compute passes; a batch that fits is the measured
    step as it is."""
    from corral.perf.pollux_models import largest_local_batch, step_samples

    assert largest_local_batch("bert") == 12
    assert largest_local_batch("yolov3") == 8  # capped as Pollux's simulator caps it
    fits = step_time("bert", 6, 72)  # 12 per GPU
    big = step_time("bert", 6, 384)
    samples = [s for s in step_samples("bert") if s.replicas == 6]
    fewest = min(s.nodes for s in samples)
    one = min(
        (s for s in samples if s.nodes == fewest),
        key=lambda s: (abs(s.local_bsz - 64 / 6), s.local_bsz),
    )
    assert big == pytest.approx(one.step_time + 5 * (one.step_time - one.sync_time))
    assert big > 2.5 * fits


def test_a_noise_scale_is_the_same_quantity_whichever_batch_curve_it_is_read_from():
    """The bundled curves record gradient variance over the model's initial
    batch (AdaptDL's convention, Pollux's gain formula), so the noise scale
    read at the same point of training from runs at 8 and at 512 agrees to
    within a small factor; read per run's batch it would differ 64x. Early in
    training a large batch is then inefficient (YOLOv3 at 512 starts below 5%
    of the initial batch's progress per example)."""
    from corral.perf.goodput import efficiency, noise_at
    from corral.perf.pollux_models import noise_curve

    small, large = noise_curve("yolov3", 8), noise_curve("yolov3", 512)
    for share in (0.3, 0.6, 0.9):
        a = small[1][int(share * (len(small[1]) - 1))]
        b = large[1][int(share * (len(large[1]) - 1))]
        assert 0.33 < a / b < 3.0, (share, a, b)
    assert efficiency(noise_at("yolov3", 512, 0), 8, 512) < 0.05
