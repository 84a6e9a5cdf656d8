"""Figures for papers: each file written at its size, a policy drawn alike in every
figure, lines told apart without colour, error bars inside the axes, every load a
labelled tick, and the same bytes for the same result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from corral import Experiment
from corral.cli.app import app
from corral.sim.figures import (
    HEIGHT_RATIO,
    PNG_DPI,
    WIDTHS,
    Drawing,
    figure_styles,
    interval,
    plot_result,
    sweep_figures,
)
from corral.sim.report_charts import series_styles

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.image import imread  # noqa: E402

WORKLOAD = {"trace": "synthetic:jobs=80,load=1.0", "cluster": "uniform:3x4:V100"}


def _quiet(kind: str, text: str) -> None:
    pass


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("figures") / "cmp"
    Experiment(**WORKLOAD, policies="fifo,srtf,las", runner="serial").run(out, say=_quiet)
    return out


@pytest.fixture(scope="module")
def plotted(comparison: Path) -> list[Path]:
    """The comparison's figures, drawn once for the tests that read them."""
    return plot_result(comparison)


def _pixels_near(image: np.ndarray, colour: str, tolerance: float = 0.04) -> int:
    rgb = np.array(to_rgb(colour))
    return int((np.abs(image[..., :3] - rgb).max(axis=-1) < tolerance).sum())


def test_a_comparison_gives_each_figure_in_each_format_at_its_size(
    comparison: Path, plotted: list[Path]
) -> None:
    names = {p.name for p in plotted}
    for figure in ("jct-cdf", "queueing-cdf", "avg-jct"):
        assert {f"{figure}.pdf", f"{figure}.svg", f"{figure}.png"} <= names
    png = imread(comparison / "figures" / "jct-cdf.png")
    height, width = png.shape[:2]
    assert width == round(WIDTHS["single"] * PNG_DPI)
    assert abs(height - WIDTHS["single"] * HEIGHT_RATIO["single"] * PNG_DPI) < 1
    assert (comparison / "figures" / "jct-cdf.pdf").read_bytes().startswith(b"%PDF")
    # drawn again, the same bytes (no dates in the files)
    again = plot_result(comparison, comparison / "again")
    for path in again:
        assert path.read_bytes() == (comparison / "figures" / path.name).read_bytes(), path.name


def test_a_policy_has_its_colour_in_every_figure_and_the_reports(
    comparison: Path, plotted: list[Path]
) -> None:
    styles = figure_styles(["fifo", "srtf (oracle)", "las"])
    for policy, style in styles.items():
        assert style["color"] == series_styles(["fifo", "srtf (oracle)", "las"])[policy][0]
    for figure in ("jct-cdf", "queueing-cdf", "avg-jct"):
        image = imread(comparison / "figures" / f"{figure}.png")
        for policy, style in styles.items():
            assert _pixels_near(image, style["color"]) > 50, (figure, policy)
    # a policy alone in a figure keeps the colour its name gives it
    assert figure_styles(["las"])["las"]["color"] == series_styles(["las"])["las"][0]


def test_lines_differ_without_colour() -> None:
    names = [f"policy-{k}" for k in range(8)]
    styles = figure_styles(names)
    looks = {(str(s["linestyle"]), s["marker"]) for s in styles.values()}
    assert len(looks) == 8
    assert len({s["marker"] for s in styles.values()}) == 8


def test_the_95_percent_interval_over_seeds() -> None:
    # three seeds, sample deviation 1: t(0.975, 2) = 4.303, over sqrt(3)
    assert interval(np.array([1.0]), np.array([3]))[0] == pytest.approx(4.303 / 3**0.5, rel=1e-3)
    assert interval(np.array([5.0]), np.array([1]))[0] == 0.0


def test_a_sweep_keeps_its_error_bars_inside_the_axes_and_labels_every_load() -> None:
    loads = [0.5, 0.7, 0.9, 1.1]
    rows = []
    for k, policy in enumerate(["fifo", "las"]):
        for load in loads:
            rows.append(
                {
                    "cluster_scale": 1.0,
                    "load": load,
                    "policy": policy,
                    "avg_jct_s_mean": 3600.0 * (1 + k + 10 * load),
                    "avg_jct_s_std": 3600.0 * 4 * load,
                    "gpu_utilization_mean": 0.5 + 0.4 * load - 0.1 * k,
                    "gpu_utilization_std": 0.08,
                    "seeds": 5,
                }
            )
    figures = sweep_figures(pd.DataFrame(rows))
    assert set(figures) == {"avg_jct", "gpu_utilization"}
    for figure in figures.values():
        (axes,) = figure.axes
        low, high = axes.get_ylim()
        for container in axes.containers:
            for segment in container.lines[2][0].get_segments():
                assert low <= segment[:, 1].min() and segment[:, 1].max() <= high
        assert [float(t) for t in axes.get_xticks()] == loads
        assert [t.get_text() for t in axes.get_xticklabels()] == ["0.5", "0.7", "0.9", "1.1"]


def test_corral_plot_draws_a_sweep_and_refuses_what_is_not_a_result(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    Experiment(
        **WORKLOAD, policies="fifo,las", loads=[0.6, 1.0], seeds=[0, 1], runner="serial"
    ).run(out, say=_quiet)
    result = CliRunner().invoke(app, ["plot", str(out), "--format", "png", "--width", "double"])
    assert result.exit_code == 0, result.output
    png = imread(out / "figures" / "avg_jct.png")
    assert png.shape[1] == round(WIDTHS["double"] * PNG_DPI)
    for args, words in (
        ([str(tmp_path / "nowhere")], "no such result folder"),
        ([str(tmp_path)], "not a result"),
        ([str(out), "--format", "gif"], "gif"),
        ([str(out), "--width", "wide"], "--width"),
    ):
        refused = CliRunner().invoke(app, ["plot", *args])
        assert refused.exit_code != 0
        assert words in str(refused.exception), refused.exception


def test_without_matplotlib_the_command_says_what_to_install(
    comparison: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    result = CliRunner().invoke(app, ["plot", str(comparison)])
    assert result.exit_code != 0
    assert "pip install 'corral[plot]'" in str(result.exception)


def test_a_log_axis_labels_at_least_three_ticks() -> None:
    """Average JCTs from 50 to 700 s drawn on a log axis: labels at 1, 2 and 5 of each
    decade (powers of ten alone labelled one tick, 100)."""
    rows = [
        {"cluster_scale": 1.0, "load": load, "policy": policy, "seeds": 1,
         "avg_jct_s_mean": jct, "avg_jct_s_std": 0.0, "gpu_utilization_mean": 0.5,
         "gpu_utilization_std": 0.0}
        for policy, scale in (("fifo", 1.0), ("las", 2.0))
        for load, jct in ((0.5, 50.0 * scale), (0.9, 350.0 * scale))
    ]  # fmt: skip
    figure = sweep_figures(pd.DataFrame(rows))["avg_jct"]
    (axes,) = figure.axes
    assert axes.get_yscale() == "log"
    figure.canvas.draw()
    low, high = axes.get_ylim()
    shown = [t for t in axes.get_yticks() if low <= t <= high]
    labels = [t.get_text() for t in axes.get_yticklabels() if t.get_text()]
    assert len(shown) >= 3 and len(labels) >= 3, (shown, labels)


def test_corral_plot_draws_the_policies_asked_in_their_order(comparison: Path) -> None:
    from corral.sim.figures import result_figures

    figures = result_figures(comparison, drawing=Drawing(policies=["las", "srtf", "fifo"]))
    bars = figures["avg-jct"].axes[0]
    assert [t.get_text() for t in bars.get_xticklabels()] == ["las", "srtf (oracle)", "fifo"]
    refused = CliRunner().invoke(app, ["plot", str(comparison), "--policies", "fifo,gavel"])
    assert refused.exit_code != 0
    assert "gavel not in this result (it has fifo, srtf (oracle), las)" in str(refused.exception)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("figures") / "sweep"
    Experiment(
        **WORKLOAD, policies="fifo,las", loads=[0.6, 1.0], seeds=[0, 1, 2], runner="serial"
    ).run(out, say=_quiet)
    return out


def test_a_sweep_normalised_by_a_baseline_is_the_mean_of_its_seeds_ratios(sweep: Path) -> None:
    from corral.sim.figures import result_figures

    figures = result_figures(sweep, drawing=Drawing(metrics=["avg_jct"], normalise="fifo"))
    assert set(figures) == {"avg_jct"}
    (axes,) = figures["avg_jct"].axes
    assert axes.get_ylabel().startswith("avg JCT / fifo's")
    lines = {c.get_label(): c.lines[0].get_ydata() for c in axes.containers}
    runs = pd.read_csv(sweep / "results.csv")
    wide = runs.pivot_table(index=["load", "seed"], columns="policy", values="avg_jct_s")
    expected = (wide["las"] / wide["fifo"]).groupby(level="load").mean().to_numpy()
    assert np.allclose(lines["fifo"], 1.0) and np.allclose(lines["las"], expected)
    assert not np.allclose(expected, 1.0)  # (the ratio is not trivially 1)


def test_the_value_axis_is_as_asked_and_refused_where_it_cannot_be(sweep: Path) -> None:
    from corral.errors import CorralError
    from corral.sim.figures import result_figures

    for scale in ("linear", "log"):
        figures = result_figures(sweep, drawing=Drawing(metrics=["avg_jct"], scale=scale))
        assert figures["avg_jct"].axes[0].get_yscale() == scale
    with pytest.raises(CorralError, match="--metric: jct not drawn for this result"):
        result_figures(sweep, drawing=Drawing(metrics=["jct"]))
    with pytest.raises(CorralError, match="--normalise: gavel not in this result"):
        result_figures(sweep, drawing=Drawing(normalise="gavel"))
    refused = CliRunner().invoke(app, ["plot", str(sweep), "--scale", "sideways"])
    assert refused.exit_code != 0 and "--scale" in str(refused.exception)


def test_lines_that_coincide_are_set_apart_and_say_so() -> None:
    rows = [
        {"cluster_scale": 1.0, "load": load, "policy": policy, "seeds": 3,
         "avg_jct_s_mean": 3600.0 * (1 + load) * (2 if policy == "fifo" else 1),
         "avg_jct_s_std": 360.0}
        for policy in ("fifo", "las", "tiresias-las")
        for load in (0.5, 0.9)
    ]  # fmt: skip
    (axes,) = sweep_figures(pd.DataFrame(rows))["avg_jct"].axes
    lines = {c.get_label(): c.lines[0] for c in axes.containers}
    assert set(lines) == {"fifo", "las", "tiresias-las (= las)"}
    moved = lines["tiresias-las (= las)"].get_xdata() - lines["las"].get_xdata()
    assert np.all(moved > 0) and np.all(moved < 0.05)  # (beside it, not on it)
    assert np.allclose(lines["tiresias-las (= las)"].get_ydata(), lines["las"].get_ydata())


def test_corral_plot_takes_metrics_a_scale_and_a_baseline(comparison: Path, tmp_path: Path) -> None:
    out = tmp_path / "figs"
    done = CliRunner().invoke(app, ["plot", str(comparison), "--metric", "avg_jct", "--normalise",
                                    "fifo", "--scale", "linear", "--format", "svg", "--out",
                                    str(out)])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in out.iterdir()) == ["avg-jct.svg"]
    from corral.sim.figures import result_figures

    bars = result_figures(comparison, drawing=Drawing(normalise="fifo"))["avg-jct"].axes[0]
    heights = [b.get_height() for b in bars.patches]
    jobs = {p: pd.read_csv(next(comparison.glob(f"*{p}*/jobs.csv"))) for p in ("fifo", "las")}
    assert heights[0] == pytest.approx(1.0)
    assert heights[2] == pytest.approx(jobs["las"]["jct"].mean() / jobs["fifo"]["jct"].mean())
    assert bars.get_ylabel() == "average JCT / fifo's"
