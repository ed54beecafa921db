"""``servectl report`` (write a finding, or export the registry's speed-sweep record) and ``servectl claims
verify`` (recount a finding).

Parses options, calls one :class:`servectl.host.Host` method (``write_report``, ``export_registry`` or
``verify_finding``), prints the result; a claim that no longer holds is one error line and exit 1
(:class:`~servectl.errors.ClaimsFailed`).
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


class ReportFormat(StrEnum):
    text = "text"
    short = "short"
    local_ai_registry = "local-ai-registry"


def report_command(
    name: Annotated[str, typer.Argument(help="profile the evidence was measured on", autocompletion=profile_names)],
    evidence: Annotated[
        Path | None,
        typer.Option(
            "--evidence",
            help="the --out folder of `servectl bench NAME` (local-ai-registry: default, the run NAME was promoted on)",
            show_default=False,
        ),
    ] = None,
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
            help="finding folder (default: STATE/findings/NAME; an existing finding gets a correction); "
            "local-ai-registry: the JSON file (default: stdout)",
            show_default=False,
        ),
    ] = None,
    max_file_mib: Annotated[float, typer.Option("--max-file-mib", help="per-file size limit")] = 16.0,
    max_bundle_mib: Annotated[float, typer.Option("--max-bundle-mib", help="whole-finding size limit")] = 64.0,
    fmt: Annotated[
        ReportFormat,
        typer.Option(
            "--format",
            help="text: write the finding, say where; short: write it, print the one-line post; "
            "local-ai-registry: the promoted profile's speed-sweep record (local-ai-registry/v1), schema-checked",
        ),
    ] = ReportFormat.text,
    recipe_id: Annotated[
        str | None,
        typer.Option("--recipe-id", help="local-ai-registry: the recipe the sweep belongs to (default: NAME)"),
    ] = None,
    omit_failed: Annotated[
        bool,
        typer.Option("--omit-failed", help="local-ai-registry: leave out points with failed requests (else refused)"),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="local-ai-registry: replace an existing --out file")] = False,
) -> None:
    """Write a finding: README.md generated from claims.json, every number computed from the artifacts it carries.

    With --format local-ai-registry: export a promoted profile's measured sweep as a local-ai-registry speed-sweep
    record instead, validated against the schema servectl ships before anything is written.
    """
    from servectl.host import from_env

    if fmt is ReportFormat.local_ai_registry:
        _export(
            name,
            evidence=evidence,
            qualification=qualification,
            out=out,
            recipe_id=recipe_id,
            omit_failed=omit_failed,
            force=force,
        )
        return
    from servectl.cli.views.finding import finding_limits, finding_lines, short_post

    evidence = _finding_evidence(name, fmt, evidence, registry_only=(recipe_id is not None, omit_failed, force))
    limits = finding_limits(max_file_mib=max_file_mib, max_bundle_mib=max_bundle_mib)
    with from_env() as host:
        result = host.write_report(
            name=name, evidence_dir=evidence, qualification_dir=qualification, out_dir=out, limits=limits
        )
    if fmt is ReportFormat.short:
        typer.echo(short_post(result.ledger))
        return
    for line in finding_lines(result):
        typer.echo(line)


def _finding_evidence(name: str, fmt: ReportFormat, evidence: Path | None, *, registry_only: tuple[bool, ...]) -> Path:
    """A finding needs ``--evidence``; the registry export's own options are refused with it, one line each."""
    from servectl.errors import UsageError

    if evidence is None:
        raise UsageError(f"report {name}: --evidence DIR is required for --format {fmt.value} (the --out of bench)")
    for option, given in zip(("--recipe-id", "--omit-failed", "--force"), registry_only, strict=True):
        if given:
            raise UsageError(f"report {name}: {option} applies to --format local-ai-registry only")
    return evidence


def _export(
    name: str,
    *,
    evidence: Path | None,
    qualification: Path | None,
    out: Path | None,
    recipe_id: str | None,
    omit_failed: bool,
    force: bool,
) -> None:
    """``report --format local-ai-registry``: the record to ``--out`` (or stdout), notes to stderr."""
    from servectl.cli.views.finding import registry_line
    from servectl.errors import UsageError
    from servectl.host import from_env

    if qualification is not None:
        raise UsageError(f"report {name}: --qualification does not apply to --format local-ai-registry")
    with from_env() as host:
        result = host.export_registry(
            name=name, evidence_dir=evidence, out=out, overwrite=force, recipe_id=recipe_id, omit_failed=omit_failed
        )
    for line in (*result.omitted, *result.notes):
        typer.echo(f"note: {line}", err=True)
    if result.path is None:
        typer.echo(result.text, nl=False)
        return
    typer.echo(registry_line(result))


@claims_app.command("verify")
def verify_command(
    folder: Annotated[
        Path, typer.Argument(help="a finding folder (the --out of `servectl report`) or a campaign folder")
    ],
    fmt: Annotated[
        Format, typer.Option("--format", help="text: what was recounted; short: the one-line post, if it recounts")
    ] = Format.text,
) -> None:
    """Recount every claim from the raw artifacts and check every hash; one line per claim that no longer holds.

    A campaign folder (`campaign run --out`) has its table recounted: every repeat from its bench artifact, the
    decision replayed round by round, the README rendered again."""
    from servectl.cli.views.finding import short_post_of
    from servectl.errors import ClaimsFailed
    from servectl.host import from_env

    with from_env() as host:
        result = host.verify_finding(folder=folder)
    if not result.ok:
        raise ClaimsFailed("\n".join(result.problems))
    if result.what == "campaign":
        typer.echo(
            f"ok: {result.recounted} claims of the campaign table recounted from the bench artifacts, "
            f"{result.imported} statuses decided before any measurement (not recounted)"
        )
        return
    if fmt is Format.short:
        typer.echo(short_post_of(folder))
        return
    typer.echo(
        f"ok: {result.recounted} claims recounted from the artifacts, {result.imported} imported (not recounted)"
    )


def register(app: typer.Typer) -> None:
    """Add ``report`` and the ``claims`` group to ``app``."""
    app.command("report")(report_command)
    app.add_typer(claims_app, name="claims")
