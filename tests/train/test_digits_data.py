"""The example jobs' digits, read without scikit-learn, are scikit-learn's."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from corral.examples.digits_data import load_digits_arrays

pytest.importorskip("sklearn")


def test_the_digits_are_load_digits_own() -> None:
    from sklearn.datasets import load_digits

    images, target = load_digits_arrays()
    expected = load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == expected.images.dtype
    assert np.array_equal(images, expected.images)
    assert np.array_equal(target, expected.target)


def test_reading_them_imports_no_scikit_learn() -> None:
    code = (
        "import sys\n"
        "from corral.examples.digits_data import load_digits_arrays\n"
        "load_digits_arrays()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
