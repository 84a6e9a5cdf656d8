"""The benchmark scripts of the scale work still run, at a size a test affords:
each prints the table its docstring describes (the figures themselves are the
benchmarks' business, on a machine set aside for them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_policy_pass_prints_a_first_and_a_steady_pass_per_policy() -> None:
    out = run("policy_pass.py", "--jobs", "300", "--repeat", "1", "--horizon", "400",
              "--policies", "fifo,gavel-max-min-fairness")  # fmt: skip
    assert "300 first" in out and "300 steady" in out
    assert out.count("ms") >= 4 and "gavel-max-min-fairness" in out


def test_pop_quality_compares_the_parts_with_the_whole_lp() -> None:
    out = run("pop_quality.py", "--jobs", "300", "--parts", "2", "--gpus", "60",
              "--policies", "gavel-max-min-fairness,gavel-min-makespan")  # fmt: skip
    assert "max-min level" in out and "makespan (s)" in out
    whole = [line for line in out.splitlines() if " 1  " in line and "level" in line]
    assert whole and whole[0].split()[-2] == "1.000"


@pytest.mark.long
def test_loop_scale_reports_passes_listing_memory_and_the_store() -> None:
    out = run("loop_scale.py", "--policy", "fifo", "--nodes", "4", "--jobs", "20000",
              "--hours", "0.1", "--sample", "60")  # fmt: skip
    for what in ("pass", "listing", "submission", "memory", "store MB"):
        assert what in out, out
