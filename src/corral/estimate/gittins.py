"""The Gittins index of a job from a distribution of job sizes (GPU-seconds).

Tiresias ranks jobs whose durations are unknown by the Gittins index of their
attained service ``a``: with ``S`` a job's total GPU-time drawn from the
distribution and a service quantum ``delta``,

    G(a) = P(S - a <= delta | S > a) / E[min(S - a, delta) | S > a]

the chance of finishing within the next quantum per GPU-second spent trying.
Higher runs first. Past the largest sample the index is 0 (lowest priority),
as in Tiresias' simulator.

Sizes come from a file (Tiresias ships ``yarn-gput{1000,5000,10000}.csv``, one
``duration`` column of GPU-seconds) or are learned online from the jobs that
have finished so far (:class:`OnlineGittins`).
"""

from __future__ import annotations

import csv
import math
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np

from corral.data import data_path
from corral.errors import CorralError, InputError

DEFAULT_DELTA = 3250.0
"""Tiresias' simulator default service quantum for the index (GPU-seconds)."""

BUNDLED_DISTRIBUTIONS = {
    f"yarn-gput{n}": ("tiresias", f"yarn-gput{n}.csv") for n in (1000, 5000, 10000)
}


def sorted_sizes(samples: np.ndarray | list[float], delta: float) -> np.ndarray:
    """The samples of a distribution, sorted, once they and ``delta`` are checked."""
    values = np.sort(np.asarray(samples, dtype=np.float64))
    if not len(values):
        raise CorralError("a Gittins distribution needs at least one job size")
    if not delta > 0:
        raise CorralError(f"Gittins delta must be positive, got {delta}")
    return values


class GittinsTable:
    """Gittins indices over a sorted sample of job sizes; vectorised lookups."""

    def __init__(self, samples: np.ndarray | list[float], delta: float = DEFAULT_DELTA) -> None:
        values = sorted_sizes(samples, delta)
        self.sizes = values
        self.delta = float(delta)
        self._prefix = np.concatenate(([0.0], np.cumsum(values)))

    def __len__(self) -> int:
        return len(self.sizes)

    def index(self, attained: np.ndarray) -> np.ndarray:
        """G(a) for each attained service in ``attained`` (GPU-seconds)."""
        a = np.asarray(attained, dtype=np.float64)
        sizes, prefix, n = self.sizes, self._prefix, len(self.sizes)
        k = sizes.searchsorted(a, side="right")  # sizes <= a: already done
        j = sizes.searchsorted(a + self.delta, side="right")  # done within delta
        finishing = j - k
        expected = (prefix[j] - prefix[k]) - finishing * a + (n - j) * self.delta
        out = np.zeros(len(a))
        # expected is 0 exactly where no sample is left (k = n): index 0 there
        np.divide(finishing, expected, out=out, where=expected > 0)
        return out


def round_half_away(x: float, digits: int) -> float:
    """``x`` rounded to ``digits`` decimals, halves away from zero, from its exact
    binary value: Python 2's ``round``, which Tiresias' simulator runs under
    (Python 3 rounds halves to even, which changes a few of its table's entries)."""
    step = Decimal(1).scaleb(-digits)
    return float(Decimal(x).quantize(step, rounding=ROUND_HALF_UP))


def round_half_away_array(x: np.ndarray, digits: int) -> np.ndarray:
    """:func:`round_half_away` of every element: numpy's rounding where the
    value is not near a half (where both agree), the exact rule where it is."""
    scale = 10.0**digits
    scaled = x * scale
    out = np.rint(scaled) / scale
    # wider than the error of ``x * scale`` (under an ulp of it): outside, rint is right
    slack = np.maximum(1e-6, np.abs(scaled) * 1e-12)
    near = np.flatnonzero(np.abs(scaled - np.floor(scaled) - 0.5) < slack)
    for k in near.tolist():
        out[k] = round_half_away(float(x[k]), digits)
    return out


class SteppedGittinsTable:
    """The Gittins table exactly as Tiresias' simulator computes and reads it.

    Its simulator computes one index per sample ``v`` (sorted, whole
    GPU-seconds), at attained service ``v - 1``, and a job's index is the entry
    of the first sample greater than its attained service in whole GPU-seconds
    (0 past the largest). Each entry follows the simulator's own arithmetic,
    which differs from :class:`GittinsTable`'s definition in four places, kept
    here because they change which job runs first:

    * the expected service sums the surviving jobs' whole sizes ``S``, not
      their remaining ``S - a``;
    * when ``a + delta`` reaches the largest sample, one job (the largest) is
      counted as not finishing within the quantum;
    * the mean expected service is an integer division (its Python 2 ``/`` on
      whole numbers), and P and E are rounded to 5 decimals and P/E x 10^6 to 4;
    * rounding is Python 2's (halves away from zero).

    Only the order of the entries matters to a scheduler; the values are on
    the simulator's scale (P/E x 10^6).
    """

    def __init__(self, samples: np.ndarray | list[float], delta: float = DEFAULT_DELTA) -> None:
        sizes = np.floor(sorted_sizes(samples, delta))
        self.sizes = sizes
        self.delta = float(delta)
        whole = self.delta == math.floor(self.delta)
        n = len(sizes)
        a = sizes - 1  # each entry is computed one GPU-second below its size
        idx = sizes.searchsorted(a, side="right")
        reach = a + self.delta
        # once the quantum reaches the largest, one job is left counted as not finishing
        hit = np.where(reach > sizes[-1] - 1, n - 1, sizes.searchsorted(reach, side="right"))
        left = n - idx
        prefix = np.concatenate(([0], np.cumsum(sizes.astype(np.int64))))
        done = prefix[hit] - prefix[idx]
        p = round_half_away_array((hit - idx) / left, 5)
        if whole:  # whole numbers: Python 2's / divides in integers
            e = ((done + int(self.delta) * (n - hit)) // left).astype(np.float64)
        else:
            e = round_half_away_array((done + self.delta * (n - hit)) / left, 5)
        entries = np.zeros(n + 1)  # the last: past the largest sample
        ok = np.flatnonzero(e > 0)
        entries[ok] = round_half_away_array(p[ok] * 1_000_000 / e[ok], 4)
        self.entries = entries

    def __len__(self) -> int:
        return len(self.sizes)

    def index(self, attained: np.ndarray) -> np.ndarray:
        """The simulator's index for each attained service (GPU-seconds, truncated)."""
        whole = np.floor(np.asarray(attained, dtype=np.float64))
        return self.entries[self.sizes.searchsorted(whole, side="right")]


def load_distribution(
    spec: str, delta: float = DEFAULT_DELTA, stepped: bool = False
) -> GittinsTable | SteppedGittinsTable:
    """A bundled distribution by name (``yarn-gput1000``) or a CSV with a ``duration`` column."""
    name = spec.strip()
    path = data_path(*BUNDLED_DISTRIBUTIONS[name]) if name in BUNDLED_DISTRIBUTIONS else Path(name)
    if not path.is_file():
        raise CorralError(
            f"Gittins distribution '{spec}': no such file "
            f"(bundled: {', '.join(BUNDLED_DISTRIBUTIONS)})"
        )
    sizes: list[float] = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        field = "duration"
        if reader.fieldnames is None or field not in [f.strip() for f in reader.fieldnames]:
            raise InputError(str(path), 1, field, "missing column (one GPU-time per row)")
        for row in reader:
            text = (row.get(field) or "").strip()
            try:
                value = float(text)
            except ValueError:
                raise InputError(
                    str(path), reader.line_num, field, f"'{text}' is not a number"
                ) from None
            if not value > 0:
                raise InputError(str(path), reader.line_num, field, f"{text} must be > 0")
            sizes.append(value)
    if not sizes:
        raise InputError(str(path), 2, "duration", "no job sizes in the file")
    return SteppedGittinsTable(sizes, delta) if stepped else GittinsTable(sizes, delta)


class OnlineGittins:
    """A distribution learned from the jobs that have finished so far.

    The table is rebuilt when the number of samples has grown by ``regrow``
    (a fraction) since the last build, so a long trace costs O(n log n) a few
    dozen times rather than at every event. Until ``min_samples`` jobs have
    finished there is no table and :meth:`index` returns None (callers fall
    back to attained-service order).
    """

    def __init__(
        self,
        delta: float = DEFAULT_DELTA,
        min_samples: int = 10,
        regrow: float = 0.05,
        stepped: bool = False,
    ):
        self.delta = delta
        self.stepped = stepped
        self.min_samples = min_samples
        self.regrow = regrow
        self.samples: list[float] = []
        self._table: GittinsTable | SteppedGittinsTable | None = None
        self._built_at = 0

    def add(self, sizes: np.ndarray) -> None:
        self.samples.extend(float(x) for x in sizes if x > 0)

    def table(self) -> GittinsTable | SteppedGittinsTable | None:
        n = len(self.samples)
        if n < self.min_samples:
            return None
        if self._table is None or n >= self._built_at * (1 + self.regrow):
            kind = SteppedGittinsTable if self.stepped else GittinsTable
            self._table = kind(self.samples, self.delta)
            self._built_at = n
        return self._table
