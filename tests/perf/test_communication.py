"""The communication model: its limits, its architectures, and its fit to Pollux's measurements."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import CorralError, InputError
from corral.model.cluster import LINK_PRESETS, Links
from corral.model.cluster_yaml import cluster_from_yaml
from corral.perf.communication import (
    GRADIENT_BYTES,
    ModelProfile,
    Span,
    Sync,
    calibrate,
    spread_factor,
    sync_time,
)
from corral.perf.pollux_models import POLLUX_MODELS
from tests.conftest import uniform

G = 100e6  # a 25M-parameter model's fp32 gradients
NO_LATENCY = Links(intra_node=10.0, cross_node=1.0, cross_rack=0.5, intra_latency=0, net_latency=0)
PROFILE = ModelProfile("m", G, 0.05, 0.001, 2.0, 64)

spans = st.builds(
    Span,
    st.lists(st.integers(1, 8), min_size=1, max_size=6).map(tuple),
    st.integers(1, 3),
)
syncs = st.one_of(
    st.just(Sync()),
    st.builds(Sync, st.just("ps"), st.integers(1, 8)),
    st.builds(Sync, st.just("byteps"), st.just(1), st.integers(0, 8)),
)
links = st.builds(
    Links,
    st.floats(0.1, 100),
    st.floats(0.05, 50),
    st.floats(0.01, 20),
    st.floats(0, 1e-3),
    st.floats(0, 1e-3),
)


def _fix_racks(span: Span) -> Span:
    return Span(span.per_node, min(span.racks, span.nodes))


@pytest.mark.parametrize("sync", [Sync(), Sync("ps", 2), Sync("byteps", 1, 4)])
def test_one_gpu_has_no_communication(sync):
    assert sync_time(G, Span((1,)), Links(), sync) == 0.0
    assert PROFILE.step_time(Span((1,)), Links(), sync) == PROFILE.compute_time(64)


@settings(max_examples=200, deadline=None)
@given(spans, syncs, links, st.sampled_from(["intra_node", "cross_node", "cross_rack"]))
def test_doubling_a_bandwidth_never_slows_a_job(span, sync, base, which):
    span = _fix_racks(span)
    faster = Links(**{**base.__dict__, which: getattr(base, which) * 2})
    assert sync_time(G, span, faster, sync) <= sync_time(G, span, base, sync) + 1e-12
    assert PROFILE.step_time(span, faster, sync) <= PROFILE.step_time(span, base, sync) + 1e-12


@settings(max_examples=200, deadline=None)
@given(spans, syncs, links)
def test_a_step_is_never_shorter_than_its_compute_or_its_sync(span, sync, base):
    span = _fix_racks(span)
    step = PROFILE.step_time(span, base, sync)
    assert step >= PROFILE.compute_time(64) - 1e-12
    assert step >= sync_time(G, span, base, sync) - 1e-12


def test_ring_allreduce_moves_two_n_minus_one_over_n_gradients():
    # 4 GPUs on one node: 2 * 3/4 * 0.1 GB over 10 GB/s
    assert sync_time(G, Span((4,)), NO_LATENCY) == pytest.approx(1.5 * 0.1 / 10)
    # across two nodes the network is the bottleneck
    assert sync_time(G, Span((2, 2)), NO_LATENCY) == pytest.approx(1.5 * 0.1 / 1.0)
    # across racks the uplink
    assert sync_time(G, Span((2, 2), racks=2), NO_LATENCY) == pytest.approx(1.5 * 0.1 / 0.5)


def test_parameter_servers_bottleneck_when_few():
    eight = Span((1,) * 8)
    one_server = sync_time(G, eight, NO_LATENCY, Sync("ps", 1))
    eight_servers = sync_time(G, eight, NO_LATENCY, Sync("ps", 8))
    assert one_server == pytest.approx(8 * 0.1 / 1.0)
    assert eight_servers == pytest.approx(0.1 / 1.0)


def test_byteps_interpolates_between_allreduce_and_half_of_it():
    eight = Span((1,) * 8)
    ring = sync_time(G, eight, NO_LATENCY)
    # no spare CPU machines: the same traffic as the ring
    assert sync_time(G, eight, NO_LATENCY, Sync("byteps", 1, 0)) == pytest.approx(ring)
    # as many CPU machines as GPU machines: G each way, the 2(n-1)/n of the ring halved-ish
    best = sync_time(G, eight, NO_LATENCY, Sync("byteps", 1, 8))
    assert best == pytest.approx(0.1 / 1.0)
    assert best == pytest.approx(ring * 8 / 14)
    some = sync_time(G, eight, NO_LATENCY, Sync("byteps", 1, 2))
    assert best < some < ring
    # more CPU machines than needed buy nothing more
    assert sync_time(G, eight, NO_LATENCY, Sync("byteps", 1, 16)) == pytest.approx(best)


def test_bad_sync_settings_are_refused():
    with pytest.raises(CorralError, match="unknown sync architecture"):
        Sync("gossip")  # type: ignore[arg-type]
    with pytest.raises(CorralError):
        Sync("ps", 0)
    with pytest.raises(CorralError, match="cross_node"):
        Links(cross_node=0)


def test_spans_of_gpus_and_the_fewest_nodes():
    cluster = uniform(4, 4, rack_size=2)
    assert Span.of(cluster, [0, 1, 4]) == Span((2, 1), racks=1)
    assert Span.of(cluster, [0, 12]) == Span((1, 1), racks=2)
    assert Span.packed(10, 4) == Span((4, 4, 2))
    # a gang on the fewest nodes runs at its trace speed; spread, slower
    assert spread_factor(PROFILE, cluster, [0, 1, 2, 3]) == 1.0
    assert spread_factor(PROFILE, cluster, list(range(8))) == 1.0
    assert spread_factor(PROFILE, cluster, [0, 1, 4, 5]) < 1.0


def test_calibration_fits_pollux_measurements_and_keeps_the_default_links_honest():
    fit = calibrate()
    # the default links are what the fit says (rounded)
    defaults = Links()
    for name in ("intra_node", "cross_node"):
        assert getattr(fit.links, name) == pytest.approx(getattr(defaults, name), rel=0.05)
    assert LINK_PRESETS["pcie"] == defaults.intra_node
    for model in POLLUX_MODELS:
        errors = np.abs(fit.errors[model])
        assert len(errors) > 300
        assert np.median(errors) < 0.10, model
        assert np.percentile(errors, 90) < 0.25, model
        assert fit.profiles[model].overlap >= 1.0
    # published sizes are kept; the others are fitted, and plausible (1 MB - 1 GB)
    assert fit.profiles["bert"].gradient_bytes == GRADIENT_BYTES["bert"]
    for model in ("deepspeech2", "ncf"):
        assert 1e6 < fit.profiles[model].gradient_bytes < 1e9


def test_cluster_specs_name_their_links(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text(
        "nodes:\n  - {gpu_type: V100, gpus: 8, count: 2}\n"
        "links:\n  intra_node: nvlink\n  cross_node: 3.0\n"
    )
    cluster = cluster_from_yaml(path)
    assert cluster.links.intra_node == LINK_PRESETS["nvlink"]
    assert cluster.links.cross_node == 3.0
    assert cluster.links.cross_rack == Links().cross_rack
    assert cluster.scaled(2).links == cluster.links
    path.write_text("nodes:\n  - {gpu_type: V100, gpus: 8}\nlinks:\n  cross_node: -1\n")
    with pytest.raises(InputError, match=r"lab.yaml:4: field 'links.cross_node'"):
        cluster_from_yaml(path)
    path.write_text("nodes:\n  - {gpu_type: V100, gpus: 8}\nlinks:\n  intra_node: infiniband\n")
    with pytest.raises(InputError, match=r"field 'links.intra_node'"):
        cluster_from_yaml(path)


def test_held_out_samples_are_kept_out_of_the_fit_and_scored_apart() -> None:
    """Leaving samples out changes the fit (they no longer pull on it) and scores them
    apart; the errors on placements the fit never saw stay close to in-sample ones."""
    from corral.perf.pollux_models import step_samples

    out = lambda s: s.replicas > 1 and s.per_node == (1, 1)  # noqa: E731
    split = calibrate(["cifar10", "bert"], held_out=out)
    whole = calibrate(["cifar10", "bert"])
    held = sum(1 for s in step_samples("cifar10") if out(s))
    assert held and len(split.held_out_errors["cifar10"]) == held
    assert len(split.errors["cifar10"]) + held == len(whole.errors["cifar10"])
    assert split.links != whole.links
    assert np.median(np.abs(split.held_out_errors["cifar10"])) < 0.25
