"""Render a :class:`~servectl.preflight.checks.PreflightReport` for people: one rich table, then a summary line.

The CLI calls :func:`render_report` (or prints ``report.to_json()`` for ``--json``); nothing here decides
anything.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servectl.cli.views.columns import Col
from servectl.cli.views.table import fit_table
from servectl.preflight.model import PreflightReport

RESULT_STYLES: dict[str, str] = {
    "pass": "green",
    "warn": "yellow",
    "fail": "bold red",
    "unknown": "magenta",
    "skipped": "dim",
}


def report_table(report: PreflightReport, *, width: int) -> Table:
    """The report as a table: check id, result, what was found, how to fix it; ids and results never wrap."""
    where = f" ({report.source_file})" if report.source_file else ""
    rows = []
    for check in report.checks:
        style = RESULT_STYLES.get(check.result, "")
        result = f"[{style}]{check.result}[/]" if style else check.result
        if check.forced:
            result += " [dim](--force)[/]"
        rows.append((escape(check.id), result, escape(check.message), escape(check.fix)))
    columns = (Col("check"), Col("result"), Col("found", prose=True), Col("fix", prose=True))
    return fit_table(columns, rows, width=width, title=f"preflight {report.profile_name}{where}", title_justify="left")


def summary_line(report: PreflightReport) -> str:
    """``3 fail, 1 warn, 14 pass in 0.12 s: nothing may start`` (plain text)."""
    counts = report.counts()
    parts = [f"{counts[name]} {name}" for name in ("fail", "warn", "unknown", "skipped", "pass") if counts[name]]
    verdict = "nothing may start" if report.failed else "ready"
    return f"{', '.join(parts)} in {report.duration_seconds:.2f} s: {verdict}"


def render_report(report: PreflightReport, console: Console) -> None:
    """Print the table and the summary line."""
    console.print(report_table(report, width=console.width))
    style = "bold red" if report.failed else "green"
    console.print(f"[{style}]{escape(summary_line(report))}[/]")
