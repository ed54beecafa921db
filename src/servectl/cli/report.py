"""``servectl report`` (write a finding) and ``servectl claims verify`` (recount one).

Parses options, calls :func:`servectl.bench.finding.report.write_report` or
:func:`servectl.bench.finding.verify.verify_finding`, prints the result; a claim that no longer holds is one
error line and exit 1 (:class:`~servectl.errors.ClaimsFailed`).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from servectl.cli.complete import profile_names

claims_app = typer.Typer(
    name="claims", help="Claim ledgers of findings: recount them before posting.", no_args_is_help=True
)


class Format(StrEnum):
    text = "text"
    short = "short"


def report_command(
    name: Annotated[str, typer.Argument(help="profile the evidence was measured on", autocompletion=profile_names)],
    evidence: Annotated[Path, typer.Option("--evidence", help="the --out folder of `servectl bench NAME`")],
    qualification: Annotated[
        Path | None,
        typer.Option(
            "--qualification",
            help="the --out folder of `servectl qualify NAME` (default: the --evidence folder, if it has qualify.json)",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="finding folder (default: STATE/findings/NAME); an existing finding gets a correction",
            show_default=False,
        ),
    ] = None,
    max_file_mib: Annotated[float, typer.Option("--max-file-mib", help="per-file size limit")] = 16.0,
    max_bundle_mib: Annotated[float, typer.Option("--max-bundle-mib", help="whole-finding size limit")] = 64.0,
    fmt: Annotated[
        Format, typer.Option("--format", help="text: where it went; short: the one-line post")
    ] = Format.text,
) -> None:
    """Write a finding: README.md generated from claims.json, every number computed from the artifacts it carries."""
    from servectl.bench.finding.publish import MIB, Limits
    from servectl.bench.finding.render import render_short
    from servectl.bench.finding.report import write_report

    limits = Limits(max_file_bytes=int(max_file_mib * MIB), max_bundle_bytes=int(max_bundle_mib * MIB))
    result = write_report(name=name, evidence_dir=evidence, qualification_dir=qualification, out_dir=out, limits=limits)
    if fmt is Format.short:
        typer.echo(render_short(result.ledger).rstrip())
        return
    claims = [c for c in result.ledger["claims"] if c.get("status") == "current"]
    typer.echo(f"finding: {result.folder} (edition {result.edition}, {len(claims)} claims)")
    for superseded in result.superseded:
        typer.echo(f"  superseded: {superseded}")


@claims_app.command("verify")
def verify_command(
    folder: Annotated[Path, typer.Argument(help="a finding folder (the --out of `servectl report`)")],
    fmt: Annotated[
        Format, typer.Option("--format", help="text: what was recounted; short: the one-line post, if it recounts")
    ] = Format.text,
) -> None:
    """Recount every claim from the raw artifacts and check every hash; one line per claim that no longer holds."""
    from servectl.bench.finding.render import render_short
    from servectl.bench.finding.verify import read_ledger, verify_finding
    from servectl.errors import ClaimsFailed

    result = verify_finding(folder)
    if not result.ok:
        raise ClaimsFailed("\n".join(result.problems))
    if fmt is Format.short:
        typer.echo(render_short(read_ledger(folder)).rstrip())
        return
    typer.echo(
        f"ok: {result.recounted} claims recounted from the artifacts, {result.imported} imported (not recounted)"
    )


def register(app: typer.Typer) -> None:
    """Add ``report`` and the ``claims`` group to ``app``."""
    app.command("report")(report_command)
    app.add_typer(claims_app, name="claims")
