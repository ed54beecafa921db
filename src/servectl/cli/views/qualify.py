"""The summary table of `servectl qualify`: one row per gate, fitted to the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servectl.cli.views.columns import Col
from servectl.cli.views.table import fit_table

if TYPE_CHECKING:
    from rich.table import Table

    from servectl.bench.qualify import QualifyReport

_COLOUR = {"pass": "green", "fail": "red", "skipped": "yellow"}


def summary_table(report: QualifyReport, *, width: int) -> Table:
    """Gate, verdict, count, p50 latency and the note or first failure (the latency goes first when narrow)."""
    from rich.text import Text

    columns = [
        Col("gate"),
        Col("verdict"),
        Col("count", justify="right"),
        Col("p50 s", priority=1, justify="right"),
        Col("note", prose=True),
    ]
    rows = []
    for gate in report.gates:
        latencies = sorted(c.latency_s for c in gate.cases if c.latency_s is not None)
        rows.append(
            [
                gate.gate,
                Text(gate.verdict, style=_COLOUR[gate.verdict]),
                gate.count if gate.verdict != "skipped" else "-",
                f"{latencies[len(latencies) // 2]:.3f}" if latencies else "-",
                Text(gate.failures[0].message if gate.failures else gate.note),  # Text: no markup in messages
            ]
        )
    title = f"qualify {report.model} @ {report.settings.url} (suite {report.settings.loaded_suite.suite.name})"
    return fit_table(columns, rows, width=width, title=title)


def evidence_json(report: QualifyReport) -> dict[str, Any]:
    """``qualify --json``: the whole evidence of the run, as ``qualify.json`` holds it."""
    from servectl.bench.qualify.evidence import evidence_document

    return evidence_document(report)
