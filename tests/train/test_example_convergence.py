"""Optimus' estimate on corral's own example jobs: each example trains on the
CPU until its loss (averaged over 50 steps) reaches a target; its per-step
losses up to half of the steps it took, one in eight as heartbeats sample
them, are fitted, and the steps predicted must be within 25% of the truth.

The live test (``tests/e2e/test_optimus_live.py``) checks the transformer
through the service; this one covers both examples with the same fit.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from corral.estimate.convergence import fit_loss_curve, predicted_total_steps

pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("example", "target"),
    [
        pytest.param("digits_cnn", 0.08, marks=pytest.mark.long),
        ("digits_cnn", 0.1),
        ("tiny_transformer", 0.45),
    ],
)
def test_the_half_way_estimate_is_within_a_quarter(
    tmp_path: Path, example: str, target: float
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            f"corral.examples.{example}",
            "--steps",
            "3000",
            "--log-every",
            "1",
            "--target-loss",
            str(target),
            "--result",
            str(tmp_path / "result.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    points = [
        (int(m[1]), float(m[2])) for m in re.finditer(r"step (\d+) loss ([\d.]+)", done.stdout)
    ]
    assert f"reached the target loss {target}" in done.stdout
    final = points[-1][0]
    half = [(k, v) for k, v in points if k <= final / 2][::8]
    fit = fit_loss_curve([k for k, _ in half], [v for _, v in half])
    predicted = predicted_total_steps(fit, target, half[-1][0])
    assert predicted is not None
    assert predicted == pytest.approx(final, rel=0.25)
