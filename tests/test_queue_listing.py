"""Tables drawn without Rich (:func:`corral.queue_listing.box_text`) are Rich's
own, character for character, wherever they are drawn so; everything else is
left to Rich."""

from __future__ import annotations

import contextlib
import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table
from rich.text import Text

from corral.queue_listing import box_table, box_text, plain_table

cells = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12)
headers = st.text(alphabet="abcdefgh _-", min_size=1, max_size=8)
tables = st.integers(1, 5).flatmap(
    lambda n: st.tuples(
        st.lists(headers, min_size=n, max_size=n),
        st.lists(st.lists(cells, min_size=n, max_size=n), max_size=5),
    )
)


def by_rich(
    title: str, columns: list[str], rows: list[list[str]], width: int, right: list[str] = ()
) -> str:
    out = io.StringIO()
    table = Table(title=Text(title))
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    Console(file=out, width=width).print(table)
    return out.getvalue()


@settings(max_examples=400)
@given(tables, cells, st.integers(10, 120), st.lists(headers, max_size=2))
def test_a_table_drawn_without_rich_is_drawn_as_rich_draws_it(
    table: tuple[list[str], list[list[str]]], title: str, width: int, right: list[str]
) -> None:
    columns, rows = table
    right = [*right, *columns[:1]] if rows and len(rows) % 2 else right  # (some right-justified)
    drawn = box_text(title, columns, rows, width, right)
    if drawn is not None:
        assert drawn == by_rich(title, columns, rows, width, right)


def test_what_rich_would_lay_out_is_left_to_rich() -> None:
    columns, row = ["id", "name"], ["1", "a name"]
    assert box_text("3 jobs", columns, [row], 80) is not None
    assert box_text("3 jobs", columns, [row], 15) is not None  # (as wide as the terminal)
    assert box_text("3 jobs", columns, [row], 14) is None  # (wider than the terminal)
    assert box_text("a title wider than the table", columns, [row], 80) is None
    # (a line break in a cell is shown escaped, on one line: it forges no row)
    drawn = box_text("3 jobs", columns, [["1", "two\nlines"]], 80)
    assert drawn is not None and "two\\nlines" in drawn and len(drawn.splitlines()) == 6
    assert box_text("3 jobs", columns, [["1", "日本語"]], 80) is None  # (two cells a character)
    # and then Rich draws it, wrapped to the console's width
    out = io.StringIO()
    box_table(
        "3 jobs", columns, [["1", "a name much too long for the box"]], Console(file=out, width=24)
    )
    assert out.getvalue() == by_rich(
        "3 jobs", columns, [["1", "a name much too long for the box"]], 24
    )
    assert max(map(len, out.getvalue().splitlines())) <= 24


def test_control_characters_in_cells_are_shown_escaped() -> None:
    drawn = box_text("1 job", ["name"], [["evil\x1b[2J"]], 80)
    assert drawn is not None and "\x1b" not in drawn and "evil\\x1b[2J" in drawn


@given(
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(
            st.lists(headers, min_size=n, max_size=n),
            st.lists(st.lists(cells, min_size=n, max_size=n), max_size=6),
        )
    )
)
def test_plain_columns_are_each_as_wide_as_their_widest_cell(
    table: tuple[list[str], list[list[str]]],
) -> None:
    columns, rows = table
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        plain_table("title", columns, rows)
    widths = [max(len(x) for x in column) for column in zip(columns, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    expected = ["title", *(line.format(*r).rstrip() for r in [columns, *rows])]
    assert out.getvalue() == "\n".join(expected) + "\n"
