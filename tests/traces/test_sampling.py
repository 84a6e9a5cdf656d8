"""Workloads drawn from a real trace by the seed (``--workload-sample``): a window
is the trace's own stretch at a seed's offset; a bootstrap keeps the trace's mix
and arrival gaps; both are the same for a seed and differ between seeds, and an
experiment over seeds then has a spread where replaying the trace has none."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral import Experiment
from corral.errors import CorralError
from corral.model.jobs import JobTable
from corral.traces.loading import TraceOptions, load_trace
from corral.traces.sampling import sample_workload


def trace(jobs: int = 50) -> JobTable:
    rng = np.random.default_rng(7)
    return JobTable.from_records(
        [
            {"job_id": f"j{k}", "submit_time": float(t), "num_gpus": int(g), "duration": float(d)}
            for k, (t, g, d) in enumerate(
                zip(
                    np.cumsum(rng.exponential(60.0, jobs)),
                    rng.choice([1, 2, 4, 8], jobs),
                    rng.exponential(3600.0, jobs) + 1,
                    strict=True,
                )
            )
        ]
    )


@given(st.integers(0, 10**6), st.integers(1, 50))
@settings(max_examples=60)
def test_a_window_is_a_stretch_of_the_trace_at_the_seeds_offset(seed: int, count: int) -> None:
    whole = trace()
    window = sample_workload(whole, "window", count, seed)
    ids = whole.df["job_id"].tolist()
    start = ids.index(window.df["job_id"].iloc[0])
    assert window.df["job_id"].tolist() == ids[start : start + count]
    times = whole.df["submit_time"].iloc[start : start + count].to_numpy()
    assert np.allclose(window.df["submit_time"].to_numpy(), times - times[0])  # (from 0)
    assert sample_workload(whole, "window", count, seed).df.equals(window.df)


@given(st.integers(0, 10**6), st.integers(2, 80))
@settings(max_examples=60)
def test_a_bootstrap_keeps_the_traces_jobs_and_gaps(seed: int, count: int) -> None:
    whole = trace()
    drawn = sample_workload(whole, "bootstrap", count, seed)
    assert len(drawn) == count and drawn.df["job_id"].is_unique
    originals = whole.df.set_index("job_id")
    for _, job in drawn.df.iterrows():
        source = originals.loc[job["job_id"].rsplit("~", 1)[0]]
        assert (job["num_gpus"], job["duration"]) == (source["num_gpus"], source["duration"])
    gaps = set(np.round(np.diff(whole.df["submit_time"].to_numpy()), 6))
    assert set(np.round(np.diff(drawn.df["submit_time"].to_numpy()), 6)) <= gaps
    assert drawn.df["submit_time"].iloc[0] == 0.0  # (a table's time starts at its first)


def test_seeds_draw_different_workloads_and_a_window_needs_its_length() -> None:
    whole = trace(200)
    windows = {tuple(sample_workload(whole, "window", 20, s).df["job_id"]) for s in range(5)}
    boots = {tuple(sample_workload(whole, "bootstrap", 20, s).df["job_id"]) for s in range(5)}
    assert len(windows) == 5 and len(boots) == 5
    with pytest.raises(CorralError, match="give --max-jobs"):
        sample_workload(whole, "window", None, 0)
    with pytest.raises(CorralError, match="not one of window, bootstrap"):
        sample_workload(whole, "shuffle", 10, 0)


def test_a_real_trace_is_drawn_whole_then_sampled() -> None:
    """Philly's first 300 jobs are not a window at a random offset: the trace is read
    whole (its filters kept), then the seed's window taken from it."""
    first = load_trace("philly", 100, TraceOptions(max_jobs=300))
    window = load_trace("philly", 100, TraceOptions(max_jobs=300, sample="window", seed=3))
    assert len(window) == 300 and not window.df["job_id"].equals(first.df["job_id"])
    again = load_trace("philly", 100, TraceOptions(max_jobs=300, sample="window", seed=3))
    assert window.df.equals(again.df)


def test_an_experiment_over_seeds_has_a_spread_only_when_the_workload_is_drawn() -> None:
    said: list[str] = []
    common = {
        "trace": "philly",
        "max_jobs": 150,
        "cluster": "uniform:4x8:V100",
        "policies": "fifo",
        "seeds": [0, 1, 2],
        "runner": "serial",
    }
    replayed = Experiment(**common).run(say=lambda kind, text: said.append(text)).by_point
    drawn = Experiment(**common, workload_sample="window").run(say=lambda k, t: None).by_point
    assert float(replayed["avg_jct_s_std"].iloc[0]) == 0.0
    assert any("seeds give the same runs" in line for line in said)
    assert float(drawn["avg_jct_s_std"].iloc[0]) > 0.0
    command = Experiment(**common, workload_sample="bootstrap").command("out")
    assert "--workload-sample bootstrap" in command
    assert isinstance(drawn, pd.DataFrame)
