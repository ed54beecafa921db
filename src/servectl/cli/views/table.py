"""Tables that fit the terminal the way ``docker ps`` and ``kubectl get`` do: drop columns, never wrap a name.

Each column has a priority; when the table's narrowest rendering (every no-wrap cell whole, prose columns at
their minimum width) is wider than the console, columns go by the rule of
:func:`servectl.cli.views.columns.columns_that_fit`. Names and short values never wrap; prose (a check's
finding, its fix, an error) wraps at word boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from servectl.cli.views.columns import Col, columns_that_fit

#: A prose column is never squeezed below this many cells (narrower, a sentence becomes a column of words).
PROSE_MIN_WIDTH = 18


def fit_table(
    columns: Sequence[Col],
    rows: Sequence[Sequence[Any]],
    *,
    width: int,
    **table_options: Any,
) -> Table:
    """A rich Table with the columns that fit ``width``; ``rows`` hold one cell per column of ``columns``."""
    keep = columns_that_fit(columns, width, lambda kept: _minimum_width(_build(columns, rows, kept, table_options)))
    return _build(columns, rows, keep, table_options)


def _build(columns: Sequence[Col], rows: Sequence[Sequence[Any]], keep: list[int], options: dict[str, Any]) -> Table:
    table = Table(**options)
    for i in keep:
        col = columns[i]
        # rich measures a cell's minimum as its longest word, even with no_wrap, and then squeezes the
        # column to nothing; a min_width of the widest cell makes "never wrap, never cut" what it measures
        widest = max((_cell_width(row[i]) for row in rows), default=0)
        widest = max(widest, _cell_width(col.header))
        if col.prose:
            table.add_column(col.header, justify=col.justify, style=col.style, min_width=min(widest, PROSE_MIN_WIDTH))
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
