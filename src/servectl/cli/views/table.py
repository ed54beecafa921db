"""Tables that fit the terminal the way ``docker ps`` and ``kubectl get`` do: drop columns, never wrap a name.

Each column has a priority; when the table's narrowest rendering (every no-wrap cell whole, prose columns at
their minimum width) is wider than the console, columns go by the rule of
:func:`servectl.cli.views.columns.columns_that_fit`. Names and short values never wrap; prose (a check's
finding, its fix, an error) wraps at word boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from servectl.cli.views.columns import UNLIMITED, Col, columns_that_fit, hidden_note, output_width

if TYPE_CHECKING:
    from rich.console import Console

#: A prose column is never squeezed below this many cells (narrower, a sentence becomes a column of words).
PROSE_MIN_WIDTH = 18


def fit_table(
    columns: Sequence[Col],
    rows: Sequence[Sequence[Any]],
    *,
    width: int,
    **table_options: Any,
) -> Table:
    """A rich Table with the columns that fit ``width``; ``rows`` hold one cell per column of ``columns``.

    Columns a narrow terminal hides are named in the table's caption, with how to see them. At
    :data:`~servectl.cli.views.columns.UNLIMITED` width (a pipe) every column stays, no cell wraps and the table
    has no borders: values apart by spaces, as ``docker`` and ``kubectl`` print them.
    """
    if width >= UNLIMITED:
        table_options = {**table_options, "box": None}
    keep = columns_that_fit(columns, width, lambda kept: _minimum_width(_build(columns, rows, kept, table_options)))
    note = hidden_note(columns, keep, width)
    if note is not None:
        table_options = {**table_options, "caption": note, "caption_justify": "left"}
    return _build(columns, rows, keep, table_options)


def table_console() -> Console:
    """The console to print tables on: the terminal's width, unlimited on a pipe (see :func:`fit_table`)."""
    from rich.console import Console

    return Console(width=output_width())


def _build(columns: Sequence[Col], rows: Sequence[Sequence[Any]], keep: list[int], options: dict[str, Any]) -> Table:
    table = Table(**options)
    for i in keep:
        col = columns[i]
        # rich measures a cell's minimum as its longest word, even with no_wrap, and then squeezes the
        # column to nothing; a min_width of the widest cell makes "never wrap, never cut" what it measures
        widest = max((_cell_width(row[i]) for row in rows), default=0)
        widest = max(widest, _cell_width(col.header))
        if col.prose:  # folded, never cut with an ellipsis: a digest or command in a fix must stay whole
            table.add_column(
                col.header,
                justify=col.justify,
                style=col.style,
                min_width=min(widest, PROSE_MIN_WIDTH),
                overflow="fold",
            )
        else:
            table.add_column(col.header, justify=col.justify, style=col.style, no_wrap=True, min_width=widest)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _minimum_width(table: Table) -> int:
    """Cells needed at the narrowest: column minimums, their padding, the borders.

    rich's own measurement clamps to the console width, so it cannot tell that a table does not fit; this
    adds up the same parts (``_extra_width``, ``_get_padding_width``: rich's, stable since rich 10).
    """
    padding = sum(table._get_padding_width(i) for i in range(len(table.columns)))
    return table._extra_width + padding + sum(column.min_width or 0 for column in table.columns)


def _cell_width(cell: Any) -> int:
    text = cell if isinstance(cell, Text) else Text.from_markup(str(cell))
    return max((Text(line).cell_len for line in text.plain.splitlines()), default=0)
