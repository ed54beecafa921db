"""``servectl bench compare``: runs and typed references side by side, with ratios to a baseline.

Parses options, calls :func:`servectl.bench.compare_inputs.compare_bench`, prints the table (or JSON) and
draws the plot. ``--plot`` without matplotlib refuses before anything is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def compare_command(
    runs: Annotated[
        list[Path],
        typer.Argument(help="`servectl bench --out` folders to compare.", show_default=False),
    ],
    reference: Annotated[
        list[Path] | None,
        typer.Option(
            "--reference",
            help="CSV typed from a published figure or an older log: prompt_tokens,decode_tok_s[,concurrency]"
            "[,ttft_s] and a '# name:' line. Repeatable.",
            show_default=False,
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline", help="Run or reference the ratios divide by (default: the first RUN).", show_default=False
        ),
    ] = None,
    tolerance: Annotated[
        float,
        typer.Option("--tolerance", help="Match prompt lengths whose actual tokens are within this many percent."),
    ] = 5.0,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write the overlaid taper plot (PNG) here.", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Compare bench runs (and references): decode tok/s and TTFT at matched prompt lengths."""
    import json

    from servectl.bench.plot import require_plotting

    if plot is not None:  # before reading anything: a missing extra must be said first
        require_plotting()
    from servectl.bench.compare import comparison_document, describe_differences
    from servectl.bench.compare_inputs import compare_bench

    comparison = compare_bench(runs=runs, references=reference or (), baseline=baseline, tolerance=tolerance / 100)
    if plot is not None:
        from servectl.bench.plot import plot_comparison

        try:
            plot_comparison(comparison, plot)
        except ValueError as err:  # nothing to draw
            from servectl.errors import UsageError

            raise UsageError(f"--plot {plot}: {err}") from err
    if as_json:
        document = comparison_document(comparison)
        document["plot"] = None if plot is None else str(plot)
        typer.echo(json.dumps(document, indent=2))
        return
    from rich.console import Console

    from servectl.cli.views.compare import compare_table

    console = Console()
    console.print(compare_table(comparison, width=console.width))
    if len(comparison.runs) > 1:
        what = describe_differences(comparison)
        line = f"runs differ in: {what}" if comparison.differences else what
        console.print(line, markup=False, highlight=False)
    for s in comparison.series:
        where = f"{s.path}" + (f" ({s.note})" if s.note else "")
        console.print(f"  {s.label}: {s.kind} {where}", markup=False, highlight=False)
    if plot is not None:
        console.print(f"plot: {plot}", markup=False, highlight=False)
