"""The ``servectl profiles`` table (pure: rows in, a rich Table out; the CLI prints it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from servectl.cli.views.columns import Col
from servectl.cli.views.table import fit_table

if TYPE_CHECKING:
    from servectl.plan.inventory import ProfileRow

# Dropped right to left by priority at narrow widths: the model's served name and the source file are long
# and secondary (`servectl show NAME` has both); name, status and port are what a user picks a profile by.
PROFILE_COLUMNS = (
    Col("name"),
    Col("status"),
    Col("TP", priority=3, justify="right"),
    Col("context", priority=4, justify="right"),
    Col("port", priority=2, justify="right"),
    Col("role", priority=5),
    Col("model", priority=7),
    Col("headline", priority=1, prose=True),
    Col("source", priority=6),
)


def profiles_table(rows: Sequence[ProfileRow], *, width: int) -> Table:
    """The profiles as a table that fits ``width`` without wrapping a name."""
    cells = []
    for r in rows:
        if r.error:
            cells.append([r.name, "[red]invalid[/]", "", "", "", "", "", escape(r.error), short_path(r.source)])
        elif r.status == "template":
            fill = f"a template: servectl show {r.name} says how to fill it in"
            cells.append([r.name, "[yellow]template[/]", "", "", "", "", "", fill, short_path(r.source)])
        else:
            cells.append(
                [
                    r.name,
                    r.status,
                    str(r.tp),
                    human_tokens(r.context),
                    str(r.port),
                    r.role,
                    escape(r.served_name),
                    escape(r.headline or ""),
                    short_path(r.source),
                ]
            )
    columns: tuple[Col, ...] = PROFILE_COLUMNS
    if not any(r.headline or r.error or r.status == "template" for r in rows):
        columns = tuple(c for c in PROFILE_COLUMNS if c.header != "headline")
        cells = [row[:7] + row[8:] for row in cells]
    return fit_table(columns, cells, width=width, title="servectl profiles", title_justify="left")


def short_path(path: str) -> str:
    """A path relative to the working folder, or with ~ for the home folder, for narrow tables."""
    p = Path(path)
    for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            return prefix + str(p.relative_to(base))
        except ValueError:
            continue
    return path


def human_tokens(tokens: int | None) -> str:
    """``393,216``; empty for None."""
    return "" if tokens is None else f"{tokens:,}"
