"""Integrals of step functions sampled at irregular times (a run's timeline:
busy GPUs, jobs waiting), for averages over bins or over each job's life."""

from __future__ import annotations

import numpy as np


def step_integral(t: np.ndarray, v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Integral up to each ``x`` of the step function that takes value v[k] from t[k]
    (0 before t[0], v[-1] after the last knot)."""
    knots = np.append(t, max(float(np.max(x)), float(t[-1])))
    cumulative = np.concatenate(([0.0], np.cumsum(v * np.diff(knots))))
    out: np.ndarray = np.interp(x, knots, cumulative)
    return out
