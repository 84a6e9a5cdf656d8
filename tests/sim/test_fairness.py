"""Finish-time fairness (Themis' rho) follows its definition on runs worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from corral.sim.fairness import finish_time_fairness, jain_index
from corral.sim.metrics import summarise
from tests.conftest import run, uniform


def test_a_job_alone_has_rho_one() -> None:
    result = run([(0.0, 2, 100.0)], uniform(1, 4), "fifo")
    assert finish_time_fairness(result).tolist() == pytest.approx([1.0])


def test_two_full_cluster_jobs_under_fifo() -> None:
    """Both need all 4 GPUs and arrive together. A runs 0-100 with B present (N = 2):
    alone on half the cluster it would take 200 s, so rho = 100 / 200. B ends at 200;
    N averages 1.5 over its life, so alone on 1/1.5 of the cluster it takes 150 s."""
    result = run([(0.0, 4, 100.0), (0.0, 4, 100.0)], uniform(1, 4), "fifo")
    rho = finish_time_fairness(result)
    assert sorted(rho.tolist()) == pytest.approx([0.5, 200 / 150])
    s = summarise(result)
    assert s["max_ftf_rho"] == pytest.approx(200 / 150)
    assert s["jain_ftf"] == pytest.approx(jain_index(rho))


def test_a_small_job_beside_another_keeps_rho_one_when_its_share_holds_it() -> None:
    """Two 1-GPU jobs on 4 GPUs: each one's share (2 GPUs) holds its gang, so sharing
    costs nothing and rho is 1 for both."""
    result = run([(0.0, 1, 50.0), (10.0, 1, 50.0)], uniform(1, 4), "fifo")
    assert finish_time_fairness(result).tolist() == pytest.approx([1.0, 1.0])


def test_jain_index_bounds() -> None:
    assert jain_index(np.array([2.0, 2.0, 2.0])) == pytest.approx(1.0)
    assert jain_index(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert jain_index(np.array([np.nan, 3.0])) == pytest.approx(1.0)
