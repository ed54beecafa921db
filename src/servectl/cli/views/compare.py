"""The table of `servectl bench compare`: one row per (matched prompt length, run), fitted to the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.cli.views.columns import Col
from servectl.cli.views.table import fit_table

if TYPE_CHECKING:
    from rich.table import Table

    from servectl.bench.compare import CompareRow, Comparison
    from servectl.bench.model import Stat


def _ratio(value: float | None, row: CompareRow) -> str:
    if row.is_baseline and value is not None:
        return "base"
    return "-" if value is None else f"{value:.2f}x"


def _range(stat: Stat | None) -> str:
    if stat is None or stat.n < 2 or stat.min == stat.max:
        return "-"
    return f"{stat.min:.1f}-{stat.max:.1f}"


def compare_table(comparison: Comparison, *, width: int) -> Table:
    """Prompt tokens, run, decode tok/s and its ratio, TTFT and its ratio, and why a row is not comparable.

    At narrow widths the min-max range, then the concurrency, then the TTFT columns go first; the notes wrap.
    """
    from rich.text import Text

    columns = (
        Col("prompt\ntokens", justify="right"),
        Col("C", justify="right", priority=2),
        Col("run"),
        Col("decode\ntok/s", justify="right"),
        Col("min-max", justify="right", priority=4),
        Col("vs\nbase", justify="right"),
        Col("TTFT s", justify="right", priority=3),
        Col("TTFT\nvs base", justify="right", priority=1),
        Col("not comparable", prose=True),
    )
    rows: list[tuple[object, ...]] = []
    ends: list[int] = []
    for index, row in enumerate(comparison.rows):
        p = row.point
        decode, ttft = p.decode_tok_s, p.ttft_s
        rows.append(
            (
                f"{p.prompt_tokens:,.0f}",
                "-" if p.concurrency is None else str(p.concurrency),
                row.series,
                "-" if decode is None else f"{decode.p50:.1f}",
                _range(decode),
                _ratio(row.decode_ratio, row),
                "-" if ttft is None else f"{ttft.p50:.3f}",
                _ratio(row.ttft_ratio, row),
                Text("; ".join(row.notes), style="yellow" if row.notes else ""),  # Text: no markup in notes
            )
        )
        following = comparison.rows[index + 1] if index + 1 < len(comparison.rows) else None
        if following is not None and following.group != row.group:
            ends.append(index)
    title = (
        f"decode tok/s at matched prompt lengths (actual prompt tokens within {100 * comparison.tolerance:g} %, "
        f"never interpolated); baseline {comparison.baseline}"
    )
    table = fit_table(columns, rows, width=width, title=title)
    for index in ends:
        table.rows[index].end_section = True
    return table


def compare_document(comparison: Comparison, *, plot: Path | None) -> dict[str, Any]:
    """``bench compare --json``: the comparison's document and where the plot went (None: none drawn)."""
    from servectl.bench.compare import comparison_document

    document = comparison_document(comparison)
    document["plot"] = None if plot is None else str(plot)
    return document


def compare_lines(comparison: Comparison, *, plot: Path | None) -> list[str]:
    """The lines under the table: what the runs differ in, each series' source, the plot."""
    from servectl.bench.compare import describe_differences

    lines = []
    if len(comparison.runs) > 1:
        what = describe_differences(comparison)
        lines.append(f"runs differ in: {what}" if comparison.differences else what)
    for s in comparison.series:
        where = f"{s.path}" + (f" ({s.note})" if s.note else "")
        lines.append(f"  {s.label}: {s.kind} {where}")
    if plot is not None:
        lines.append(f"plot: {plot}")
    return lines
