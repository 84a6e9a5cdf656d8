"""Row validation shared by the trace loaders.

Loaders read a file as text columns (line numbers kept: row ``k`` of the frame
is line ``k + first_line`` of the file), then ask for typed columns here. The
first bad value raises :class:`~corral.errors.InputError` naming file, line
and field; with ``skip_bad`` bad rows are dropped and counted instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from corral.errors import InputError


@dataclass
class LoadReport:
    """What a loader kept and dropped."""

    source: str
    rows: int = 0
    kept: int = 0
    skipped: int = 0
    first_problem: str | None = None
    notes: list[str] = field(default_factory=list)


class RowChecker:
    """Typed access to a text frame's columns, collecting bad rows."""

    def __init__(self, path: str, raw: pd.DataFrame, first_line: int, skip_bad: bool) -> None:
        self.path = path
        self.raw = raw
        self.first_line = first_line
        self.skip_bad = skip_bad
        self.bad = np.zeros(len(raw), dtype=bool)
        self.first_problem: tuple[int, str, str] | None = None

    def flag(self, mask: np.ndarray, column: str, problem: str) -> None:
        mask = mask & ~self.bad
        if not mask.any():
            return
        row = int(np.flatnonzero(mask)[0])
        line = int(self.raw["__row"].iloc[row]) + self.first_line
        if not self.skip_bad:
            value = self.raw[column].iloc[row]
            raise InputError(self.path, line, column, problem.format(value=value))
        if self.first_problem is None or line < self.first_problem[0]:
            self.first_problem = (line, column, problem.format(value=self.raw[column].iloc[row]))
        self.bad |= mask

    def text(self, column: str, required: bool = True) -> pd.Series:
        values = self.raw[column].fillna("").astype(str).str.strip()
        if required:
            self.flag((values == "").to_numpy(), column, "is empty")
        return values

    def unique(self, values: pd.Series, column: str) -> None:
        """Flag rows whose (non-empty) value repeats an earlier row's."""
        dup = (values.duplicated() & (values != "")).to_numpy()
        self.flag(dup, column, "repeats an earlier job id '{value}'")

    def number(
        self,
        column: str,
        *,
        integer: bool = False,
        minimum: float | None = None,
        positive: bool = False,
        required: bool = True,
    ) -> pd.Series:
        text = self.raw[column].fillna("").astype(str).str.strip()
        values = pd.to_numeric(text, errors="coerce")
        empty = (text == "").to_numpy()
        if required:
            self.flag(empty, column, "is empty")
        bad = values.isna().to_numpy() & ~empty
        self.flag(bad, column, "expected a number, got '{value}'")
        finite = np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))
        self.flag(~finite & ~values.isna().to_numpy(), column, "must be finite, got '{value}'")
        if integer:
            frac = (values % 1 != 0).fillna(False).to_numpy()
            self.flag(frac, column, "expected a whole number, got '{value}'")
        if minimum is not None:
            self.flag(
                (values < minimum).fillna(False).to_numpy(),
                column,
                f"must be >= {minimum:g}, got '{{value}}'",
            )
        if positive:
            self.flag(
                (values <= 0).fillna(False).to_numpy(), column, "must be positive, got '{value}'"
            )
        return values

    def timestamp(self, column: str, fmt: str = "mixed") -> pd.Series:
        """Dates and times; a fixed ``fmt`` (strptime codes) parses millions of rows
        many times faster than guessing each row's."""
        text = self.raw[column].fillna("").astype(str).str.strip()
        values = pd.to_datetime(text, errors="coerce", format=fmt)
        self.flag(values.isna().to_numpy(), column, "expected a date and time, got '{value}'")
        return values

    def keep(self, df: pd.DataFrame, report: LoadReport) -> pd.DataFrame:
        """The good rows of ``df`` (aligned with the raw frame); fills the report."""
        report.rows = len(self.raw)
        report.skipped = int(self.bad.sum())
        report.kept = report.rows - report.skipped
        if self.first_problem is not None:
            line, column, problem = self.first_problem
            report.first_problem = f"{self.path}:{line}: field '{column}': {problem}"
        return df.loc[~self.bad].reset_index(drop=True)


def _csv_settings(sep: str, header: bool, names: list[str] | None) -> dict[str, Any]:
    """How every trace file is read: all fields as text, blank lines kept (for the
    line numbers), tab-separated files unquoted."""
    return {
        "sep": sep,
        "header": 0 if header else None,
        "names": names,
        "dtype": str,
        "keep_default_na": False,
        "skip_blank_lines": False,
        "quoting": 3 if sep == "\t" else 0,
        "engine": "c",
    }


@contextmanager
def _read_errors(path: str) -> Iterator[None]:
    """pandas' reading errors as input errors naming the file (and line, if known)."""
    try:
        yield
    except pd.errors.ParserError as exc:
        raise InputError(path, _parser_line(str(exc)), None, f"malformed row: {exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, None, None, f"not a text file ({exc.reason})") from None
    except pd.errors.EmptyDataError:
        raise InputError(path, 1, None, "the file is empty") from None


def _numbered(raw: pd.DataFrame, offset: int) -> pd.DataFrame:
    """``raw`` with stripped column names, fully blank rows dropped, and ``__row``:
    each row's index among the file's data rows (``offset`` for the first here)."""
    raw.columns = [str(c).strip() for c in raw.columns]
    blank = (raw.apply(lambda col: col.astype(str).str.strip() == "")).all(axis=1).to_numpy()
    rows = offset + np.arange(len(raw))
    raw = raw.loc[~blank].reset_index(drop=True)
    raw.insert(0, "__row", rows[~blank])
    return raw


def read_text_frame(
    path: str, *, sep: str = ",", header: bool = True, names: list[str] | None = None
) -> tuple[pd.DataFrame, int]:
    """Read a delimited file as strings, keeping blank lines' numbering.

    Returns the frame (fully blank rows dropped) and the file line of row 0.
    Rows with too many fields raise an error naming the line.
    """
    with _read_errors(path):
        raw = pd.read_csv(path, **_csv_settings(sep, header, names))
    return _numbered(raw, 0), 2 if header else 1


ROWS_PER_CHUNK = 200_000
"""Rows read at a time by :func:`read_text_chunks`: memory stays bounded by the
chunk (as text) plus the typed columns kept, whatever the file's length."""


def read_text_chunks(
    path: str,
    *,
    sep: str = ",",
    header: bool = True,
    names: list[str] | None = None,
    usecols: list[str] | None = None,
    require: list[str] | None = None,
    rows_per_chunk: int | None = None,
) -> Iterator[tuple[pd.DataFrame, int]]:
    """:func:`read_text_frame` a chunk at a time, for traces of millions of rows.

    Each chunk's ``__row`` counts from the first data row of the file, so a
    :class:`RowChecker` on a chunk names the file's own line numbers. Only
    ``usecols`` are read (those of them the header has); ``require`` names
    the columns the header must have.
    """
    wanted = set(usecols) if usecols is not None else None
    with _read_errors(path):
        reader = pd.read_csv(
            path,
            **_csv_settings(sep, header, names),
            usecols=(lambda c: str(c).strip() in wanted) if wanted is not None else None,
            chunksize=rows_per_chunk or ROWS_PER_CHUNK,
        )
        offset = 0
        with reader:
            for raw in reader:
                if offset == 0 and require:
                    raw.columns = [str(c).strip() for c in raw.columns]
                    require_columns(path, raw, require)
                size = len(raw)
                yield _numbered(raw, offset), 2 if header else 1
                offset += size


def load_chunked(
    chunks: Iterator[tuple[pd.DataFrame, int]],
    path: str,
    convert: Callable[[RowChecker], pd.DataFrame],
    skip_bad: bool,
    report: LoadReport,
) -> pd.DataFrame:
    """Convert each chunk with ``convert`` (typed columns from a :class:`RowChecker`)
    and keep the good rows of all of them; ``report`` counts over the whole file."""
    kept: list[pd.DataFrame] = []
    for raw, first in chunks:
        check = RowChecker(path, raw, first, skip_bad)
        part = LoadReport(path)
        kept.append(check.keep(convert(check), part))
        report.rows += part.rows
        report.skipped += part.skipped
        if report.first_problem is None:
            report.first_problem = part.first_problem
    report.kept = report.rows - report.skipped
    if not kept:
        raise InputError(path, 1, None, "the file has no rows")
    return pd.concat(kept, ignore_index=True)


def refuse_repeats(path: str, df: pd.DataFrame, column: str) -> None:
    """A value of ``column`` may appear once; ``df['line']`` holds each row's file line
    (rows of different chunks cannot be checked by one :class:`RowChecker`)."""
    repeated = df[column].duplicated()
    if repeated.any():
        row = df.loc[repeated].iloc[0]
        raise InputError(
            path, int(row["line"]), column, f"repeats an earlier job id '{row[column]}'"
        )


def require_columns(path: str, raw: pd.DataFrame, columns: list[str]) -> None:
    """The header must name every one of ``columns``."""
    missing = [c for c in columns if c not in raw.columns]
    if missing:
        raise InputError(path, 1, missing[0], "column missing from the header")


def _parser_line(message: str) -> int | None:
    match = re.search(r"line (\d+)", message)
    return int(match.group(1)) if match else None


def misshapen_rows(
    path: str, fields: list[str], sep: str = ",", header: bool | None = None
) -> np.ndarray:
    """The data rows (numbered as the reader numbers them: from 0, blank lines and the
    header left out) that have another number of fields than the table's. A CSV
    reader pads a short row with empty fields, so a row that lost a field in its
    middle would be read with the others shifted into the wrong columns, silently:
    a user's name read as a status, an end read as a start, and the error (if any)
    named on the wrong field. ``header``: whether the file has a header line (None:
    a first line whose first field is the table's first field's name is one)."""
    expected = len(fields) - 1
    rows: list[int] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
        k = 0
        named = first.strip().split(sep)[0] == fields[0] if header is None else header
        if first.strip() and not named:
            if first.count(sep) != expected:
                rows.append(k)
            k += 1
        for line in fh:
            if not line.strip():
                continue
            if line.count(sep) != expected:
                rows.append(k)
            k += 1
    return np.asarray(rows, dtype=np.int64)


def flag_misshapen(
    check: RowChecker, bad_rows: np.ndarray, fields: list[str], sep: str = ","
) -> None:
    """Refuse (or, skipping bad rows, drop) the rows :func:`misshapen_rows` found."""
    if len(bad_rows):
        kind = {",": "comma", "\t": "tab"}.get(sep, repr(sep))
        check.flag(
            np.isin(check.raw["__row"].to_numpy(), bad_rows),
            fields[0],
            f"the row does not have the table's {len(fields)} {kind}-separated fields "
            f"({', '.join(fields)}): a field is missing or extra",
        )
