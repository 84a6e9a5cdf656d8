"""The LP layer over HiGHS: rows built from triplets, taken, stacked, solved."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from corral.errors import CorralError
from corral.optimize.highs import RowBoundSeries, Rows, solve, stack


def dense(rows: Rows) -> np.ndarray:
    out = np.zeros((len(rows), rows.n_cols))
    for r in range(len(rows)):
        at = slice(rows.start[r], rows.start[r + 1])
        out[r, rows.index[at]] = rows.value[at]
    return out


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rows_from_triplets_take_and_stack_keep_every_entry_in_its_place(data) -> None:
    n_rows = data.draw(st.integers(1, 6))
    n_cols = data.draw(st.integers(1, 6))
    mask = np.array(
        data.draw(st.lists(st.booleans(), min_size=n_rows * n_cols, max_size=n_rows * n_cols))
    ).reshape(n_rows, n_cols)
    want = np.where(mask, np.arange(1, n_rows * n_cols + 1).reshape(n_rows, n_cols), 0.0)
    r, c = np.nonzero(mask)
    shuffle = np.random.default_rng(0).permutation(len(r))
    rows = Rows.of(r[shuffle], c[shuffle], want[r, c][shuffle], n_rows, n_cols, upper=1.0)
    assert np.array_equal(dense(rows), want)
    which = np.array(data.draw(st.lists(st.integers(0, n_rows - 1), max_size=8)), dtype=int)
    assert np.array_equal(dense(rows.take(which)), want[which])
    both = stack(rows, rows.take(which).bounded(upper=2.0))
    assert np.array_equal(dense(both), np.vstack([want, want[which]]))
    assert list(both.upper) == [1.0] * n_rows + [2.0] * len(which)


def test_solve_matches_scipy_linprog_on_a_small_lp() -> None:
    # maximise x + 2y: x + y <= 4, x - y >= -2 (as -x + y <= 2), 0 <= x <= 3, y >= 0
    rows = Rows.of(
        np.array([0, 0, 1, 1]),
        np.array([0, 1, 0, 1]),
        np.array([1.0, 1.0, -1.0, 1.0]),
        2,
        2,
        upper=np.array([4.0, 2.0]),
    )
    found = solve(np.array([-1.0, -2.0]), rows, 0.0, np.array([3.0, np.inf]))
    assert found is not None
    ref = linprog(
        [-1, -2], A_ub=[[1, 1], [-1, 1]], b_ub=[4, 2], bounds=[(0, 3), (0, None)], method="highs"
    )
    assert np.allclose(found.x, ref.x) and found.objective == pytest.approx(ref.fun)
    assert np.allclose(found.x, [1.0, 3.0])


def test_equality_rows_and_the_interior_point_method() -> None:
    once = Rows.of(np.array([0, 0]), np.array([0, 1]), np.ones(2), 1, 2, upper=1.0, lower=1.0)
    found = solve(np.array([2.0, 1.0]), once, 0.0, 1.0, method="ipm")
    assert found is not None and np.allclose(found.x, [0.0, 1.0])


def test_an_infeasible_lp_is_none_and_an_unbounded_one_an_error() -> None:
    at_least_two = Rows.of(
        np.array([0]), np.array([0]), np.array([1.0]), 1, 1, upper=np.inf, lower=2.0
    )
    assert solve(np.array([1.0]), at_least_two, 0.0, 1.0) is None
    free = Rows.of(np.zeros(0, int), np.zeros(0, int), np.zeros(0), 0, 1, upper=0.0)
    with pytest.raises(CorralError, match="not solved"):
        solve(np.array([-1.0]), free, 0.0, np.inf)


def test_rows_over_other_variables_than_the_cost_are_refused() -> None:
    rows = Rows.of(np.array([0]), np.array([0]), np.array([1.0]), 1, 2, upper=1.0)
    with pytest.raises(ValueError, match="over 2 variables"):
        solve(np.array([1.0]), rows, 0.0, 1.0)


def test_threads_solving_at_once_each_get_their_own_optimum() -> None:
    from concurrent.futures import ThreadPoolExecutor

    def best(limit: float) -> float:
        # maximise x subject to x <= limit: the optimum is the limit
        rows = Rows.of(np.array([0]), np.array([0]), np.array([1.0]), 1, 1, upper=limit)
        found = solve(np.array([-1.0]), rows, 0.0, np.inf)
        assert found is not None
        return float(found.x[0])

    limits = [float(k) for k in range(1, 201)]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(best, limits)) == limits


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_a_series_of_row_bounds_judges_each_as_a_fresh_solve_does(seed: int) -> None:
    """Warm-started from the last solve's basis (finish-time fairness' bisection),
    each solve is feasible exactly where a solve from nothing is, at the same
    optimum, infeasible ones between feasible ones included."""
    rng = np.random.default_rng(seed)
    n_rows, n_cols = 6, 5
    values = rng.uniform(-1.0, 2.0, (n_rows, n_cols))
    r, c = np.nonzero(np.ones((n_rows, n_cols)))
    rows = Rows.of(r, c, values[r, c], n_rows, n_cols, upper=1.0)
    cost = rng.uniform(-1.0, 1.0, n_cols)
    series = RowBoundSeries(cost, rows, 0.0, 1.0)
    for _ in range(8):
        upper = rng.uniform(-1.5, 2.0, n_rows)
        warm, fresh = series.solve(upper), solve(cost, rows.bounded(upper), 0.0, 1.0)
        assert (warm is None) == (fresh is None)
        if warm is not None and fresh is not None:
            assert warm.objective == pytest.approx(fresh.objective, abs=1e-7)
            assert (dense(rows) @ warm.x <= upper + 1e-7).all()
