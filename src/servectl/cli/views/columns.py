"""Columns that fit the terminal, and the plain table of ``servectl status`` (no rich: it starts faster).

:class:`Col` and :func:`columns_that_fit` are the one home of the rule every table follows (rich's in
:mod:`servectl.cli.views.table`, and :func:`plain_table` here): when a table is wider than the console, the
column with the highest priority number goes first, until it fits or only priority-0 columns are left.

:func:`plain_table` prints what ``docker ps`` prints: a header and one line per row, the columns two spaces
apart, no cell ever wrapped or cut. It is for tables of short values (names, states, numbers); a table with
prose that must wrap is a rich table (:func:`servectl.cli.views.table.fit_table`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len  # rich's cell widths alone (1.7 ms): not its console or tables

#: Spaces between two columns of a plain table (a borderless rich table's: one cell of padding each side).
GAP = 2
#: The width tables fit on a pipe: no limit, so no column is dropped and no cell cut (as docker and kubectl).
UNLIMITED = 1_000_000


def output_width() -> int:
    """The width tables fit: the terminal's (or ``COLUMNS``), unlimited when stdout is a pipe or a file."""
    import shutil

    return shutil.get_terminal_size((0, 0)).columns or UNLIMITED


def hidden_note(columns: Sequence[Col], keep: Sequence[int], width: int) -> str | None:
    """The one line that says which columns a narrow terminal hid and how to see them (None: none hidden)."""
    hidden = [c.header for i, c in enumerate(columns) if i not in keep]
    if not hidden:
        return None
    return f"({', '.join(hidden)} hidden to fit {width} columns; a wider terminal or a pipe (| cat) shows all)"


@dataclass(frozen=True)
class Col:
    """One column: its header, how soon it is dropped, and whether its cells may wrap."""

    header: str
    priority: int = 0  # 0: always shown; higher numbers are dropped first when the console is narrow
    prose: bool = False  # free text that may wrap; otherwise the cells stay on one line, whole
    justify: Literal["left", "right"] = "left"
    style: str | None = None


def columns_that_fit(columns: Sequence[Col], width: int, needed: Callable[[list[int]], int]) -> list[int]:
    """The indexes of the columns to show: all, less the highest priority numbers while ``needed(kept)`` (the
    narrowest rendering of those columns, in cells) is over ``width``."""
    keep = list(range(len(columns)))
    while True:
        droppable = [i for i in keep if columns[i].priority > 0]
        if needed(keep) <= width or not droppable:
            return keep
        keep.remove(max(droppable, key=lambda i: (columns[i].priority, i)))


def plain_table(columns: Sequence[Col], rows: Sequence[Sequence[str]], *, width: int, bold_header: bool) -> str:
    """The rows under their headers, aligned, with the columns that fit ``width`` (trailing spaces stripped)."""
    widths = [max([cell_len(col.header), *(cell_len(row[i]) for row in rows)]) for i, col in enumerate(columns)]
    keep = columns_that_fit(columns, width, lambda kept: sum(widths[i] for i in kept) + GAP * (len(kept) - 1))

    def line(values: Sequence[str]) -> str:
        parts = []
        for i in keep:
            pad = " " * (widths[i] - cell_len(values[i]))
            parts.append(pad + values[i] if columns[i].justify == "right" else values[i] + pad)
        return (" " * GAP).join(parts).rstrip()

    header = line([col.header for col in columns])
    lines = [f"\x1b[1m{header}\x1b[0m" if bold_header else header, *(line(row) for row in rows)]
    note = hidden_note(columns, keep, width)
    if note:
        import textwrap

        lines += textwrap.wrap(note, width)
    return "\n".join(lines)
