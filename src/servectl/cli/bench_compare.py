"""``servectl bench compare``: runs and typed references side by side, with ratios to a baseline.

Parses options, calls :meth:`servectl.host.Host.compare_bench` (which draws the plot; ``--plot`` without
matplotlib refuses before anything is read), prints the table (or JSON).
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

    from servectl.host import from_env

    with from_env() as host:
        comparison = host.compare_bench(
            runs=runs, references=reference or (), baseline=baseline, tolerance=tolerance / 100, plot=plot
        )
    if as_json:
        from servectl.cli.views.compare import compare_document

        typer.echo(json.dumps(compare_document(comparison, plot=plot), indent=2))
        return

    from servectl.cli.views.compare import compare_lines, compare_table
    from servectl.cli.views.table import table_console

    console = table_console()
    console.print(compare_table(comparison, width=console.width))
    for line in compare_lines(comparison, plot=plot):
        console.print(line, markup=False, highlight=False)
