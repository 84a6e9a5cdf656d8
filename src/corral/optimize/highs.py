"""Linear programs, solved with HiGHS through its own Python package.

``scipy.optimize.linprog`` runs the same solver, but a simulation of Gavel's
policies solves hundreds of small LPs, and there the wrapper costs more than
the solving: importing ``scipy.optimize`` takes about 0.35 s, and each call
checks its options and converts its arguments (through ``scipy.sparse``) for
longer than HiGHS takes to solve the LP. Here constraint rows are built
directly in compressed-row form with numpy and handed to HiGHS as they are.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from corral.errors import CorralError

if TYPE_CHECKING:
    pass

Method = Literal["choose", "simplex", "ipm"]

_solvers = threading.local()
"""One solver object per thread (made once: a few milliseconds): the service may
solve from more than one thread, and POP's parts are solved side by side (HiGHS
lets go of the interpreter while it runs)."""


@dataclass(frozen=True)
class Rows:
    """Constraint rows ``lower <= A x <= upper`` over ``n_cols`` variables,
    ``A`` in compressed-row form (``start``, ``index``, ``value``)."""

    start: np.ndarray
    index: np.ndarray
    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n_cols: int

    @classmethod
    def of(
        cls,
        rows: np.ndarray,
        cols: np.ndarray,
        values: np.ndarray,
        n_rows: int,
        n_cols: int,
        upper: np.ndarray | float,
        lower: np.ndarray | float = -np.inf,
    ) -> Rows:
        """Rows from (row, column, value) triplets, each pair at most once."""
        rows = np.asarray(rows, dtype=np.int64)
        order = np.lexsort((cols, rows))
        counts = np.bincount(rows, minlength=n_rows)
        start = np.zeros(n_rows + 1, dtype=np.int32)
        np.cumsum(counts, out=start[1:])
        return cls(
            start,
            np.asarray(cols, dtype=np.int32)[order],
            np.asarray(values, dtype=np.float64)[order],
            np.broadcast_to(np.asarray(lower, dtype=np.float64), (n_rows,)),
            np.broadcast_to(np.asarray(upper, dtype=np.float64), (n_rows,)),
            n_cols,
        )

    def __len__(self) -> int:
        return len(self.start) - 1

    def take(self, which: np.ndarray) -> Rows:
        """The rows ``which`` (indices, in that order)."""
        which = np.asarray(which, dtype=np.int64)
        lengths = self.start[which + 1] - self.start[which]
        start = np.zeros(len(which) + 1, dtype=np.int32)
        np.cumsum(lengths, out=start[1:])
        # each kept entry's position in the old arrays
        offsets = np.repeat(self.start[which] - start[:-1], lengths)
        at = np.arange(int(start[-1])) + offsets
        return Rows(
            start,
            self.index[at],
            self.value[at],
            self.lower[which],
            self.upper[which],
            self.n_cols,
        )

    def bounded(self, upper: np.ndarray | float, lower: np.ndarray | float = -np.inf) -> Rows:
        """The same rows with other bounds."""
        n = len(self)
        return Rows(
            self.start,
            self.index,
            self.value,
            np.broadcast_to(np.asarray(lower, dtype=np.float64), (n,)),
            np.broadcast_to(np.asarray(upper, dtype=np.float64), (n,)),
            self.n_cols,
        )


def stack(*parts: Rows) -> Rows:
    """The rows of each part in turn (all over the same variables)."""
    n_cols = parts[0].n_cols
    if any(p.n_cols != n_cols for p in parts):
        raise ValueError("stacked rows must be over the same variables")
    starts = [parts[0].start[:1]]
    offset = 0
    for p in parts:
        starts.append(p.start[1:] + offset)
        offset += int(p.start[-1])
    return Rows(
        np.concatenate(starts).astype(np.int32),
        np.concatenate([p.index for p in parts]),
        np.concatenate([p.value for p in parts]),
        np.concatenate([p.lower for p in parts]),
        np.concatenate([p.upper for p in parts]),
        n_cols,
    )


@dataclass(frozen=True)
class Solution:
    x: np.ndarray
    objective: float


def solve(
    cost: np.ndarray,
    rows: Rows,
    col_lower: np.ndarray | float,
    col_upper: np.ndarray | float,
    method: Method = "choose",
) -> Solution | None:
    """Minimise ``cost @ x`` subject to ``rows`` and the variables' bounds.

    Returns None if the LP is infeasible; any other failure (unbounded, a
    time or iteration limit) is an error, for an allocation that cannot be
    trusted must not be acted on. ``method`` is HiGHS' ``solver`` option
    (``ipm`` runs its interior point, then crossover to a vertex).
    """
    h = _passed(cost, rows, col_lower, col_upper)
    h.setOptionValue("solver", method)
    return _run(h)


class RowBoundSeries:
    """One LP solved again and again with other row bounds (a bisection's
    feasibility checks): the model is passed to this thread's solver once, and
    each solve starts from the last one's basis, a few dual simplex steps
    instead of a solve from nothing (finish-time fairness' 16 checks a part took
    1.2 ms each from nothing at 625 jobs). Used within one thread, with no other
    solve between its own."""

    def __init__(
        self,
        cost: np.ndarray,
        rows: Rows,
        col_lower: np.ndarray | float,
        col_upper: np.ndarray | float,
    ) -> None:
        self._h = _passed(cost, rows, col_lower, col_upper)
        self._h.setOptionValue("solver", "simplex")
        self._all = np.arange(len(rows), dtype=np.int32)
        self._lower = np.ascontiguousarray(rows.lower, dtype=np.float64)

    def solve(self, upper: np.ndarray) -> Solution | None:
        """The LP with its rows' upper bounds set to ``upper`` (see :func:`solve`)."""
        self._h.changeRowsBounds(
            len(self._all), self._all, self._lower, np.ascontiguousarray(upper, dtype=np.float64)
        )
        return _run(self._h)


def _passed(
    cost: np.ndarray, rows: Rows, col_lower: np.ndarray | float, col_upper: np.ndarray | float
) -> Any:
    """This thread's solver with the LP passed to it."""
    import highspy

    n = len(cost)
    if rows.n_cols != n:
        raise ValueError(f"the rows are over {rows.n_cols} variables, the cost over {n}")
    lower = np.broadcast_to(np.asarray(col_lower, dtype=np.float64), (n,))
    upper = np.broadcast_to(np.asarray(col_upper, dtype=np.float64), (n,))
    h = _the_solver()
    status = h.passModel(
        n,
        len(rows),
        len(rows.value),
        int(highspy.MatrixFormat.kRowwise),
        int(highspy.ObjSense.kMinimize),
        0.0,
        np.ascontiguousarray(cost, dtype=np.float64),
        np.ascontiguousarray(lower),
        np.ascontiguousarray(upper),
        np.ascontiguousarray(rows.lower),
        np.ascontiguousarray(rows.upper),
        rows.start,
        rows.index,
        rows.value,
        np.zeros(n, dtype=np.int32),  # every variable continuous
    )
    if status == highspy.HighsStatus.kError:
        raise CorralError("the LP was refused by the solver (its data are inconsistent)")
    return h


def _run(h: Any) -> Solution | None:
    """Solve the LP passed to ``h``: its solution, None if infeasible (see :func:`solve`)."""
    import highspy

    h.run()
    model_status = h.getModelStatus()
    if model_status == highspy.HighsModelStatus.kUnboundedOrInfeasible:
        # presolve could not tell which: the solver itself can
        h.setOptionValue("presolve", "off")
        h.run()
        model_status = h.getModelStatus()
        h.setOptionValue("presolve", "choose")
    if model_status == highspy.HighsModelStatus.kInfeasible:
        return None
    if model_status != highspy.HighsModelStatus.kOptimal:
        raise CorralError(f"the LP was not solved: {h.modelStatusToString(model_status)}")
    x = np.array(h.getSolution().col_value)
    return Solution(x, float(h.getInfo().objective_function_value))


def _the_solver() -> Any:
    """This thread's solver, made on first use."""
    import highspy

    solver = getattr(_solvers, "highs", None)
    if solver is None:
        # the plain solver: highspy.Highs adds Python callbacks and prints a
        # banner to the process's stdout when made
        solver = _solvers.highs = highspy._Highs()  # type: ignore[attr-defined]
        solver.setOptionValue("output_flag", False)
    return solver
