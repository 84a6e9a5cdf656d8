"""The handwritten digits (1,797 8x8 images, UCI's optdigits test set as
scikit-learn ships it) for the example jobs, read from scikit-learn's own copy
without importing scikit-learn: every task process of an example job reads them,
and importing scikit-learn costs each about 1.5 s of CPU (as much as torch)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images as float64 of shape (1797, 8, 8) in 0-16, labels as int64): the
    arrays ``sklearn.datasets.load_digits()`` gives as ``images`` and ``target``."""
    spec = importlib.util.find_spec("sklearn")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    found = [Path(p) / "datasets" / "data" / "digits.csv.gz" for p in locations]
    if found and found[0].is_file():
        table = np.loadtxt(found[0], delimiter=",")
        return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits  # (a layout this module does not know)

    data = load_digits()
    return data.images, data.target
