"""``servectl campaign ...``: a bring-up sweep over variants of one profile, decided against an incumbent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

campaign_app = typer.Typer(
    name="campaign",
    help="A bring-up sweep over variants of one profile, decided by measurement against an incumbent.",
    no_args_is_help=True,
)


@campaign_app.command("validate")
def validate_command(
    file: Annotated[Path, typer.Argument(help="the campaign file (YAML)")],
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="keep invalid variants as rejected-invalid rows instead of refusing")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the checked campaign as JSON")] = False,
) -> None:
    """Check a campaign file and load, validate and compile every variant; starts nothing."""
    from servectl.cli.views.campaign import check_lines
    from servectl.host import from_env

    with from_env() as host:
        check = host.check_campaign(file=file, skip_invalid=skip_invalid)
    if as_json:
        typer.echo(json.dumps(check.to_dict(), indent=2))
        return
    for line in check_lines(check):
        typer.echo(line)


@campaign_app.command("run")
def run_command(
    file: Annotated[Path, typer.Argument(help="the campaign file (YAML)")],
    out: Annotated[Path, typer.Option("--out", help="the campaign folder (its database, artifacts, table)")],
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="keep invalid variants as rejected-invalid rows instead of refusing")
    ] = False,
) -> None:
    """Run a campaign: every variant checked, then started on the bench port and measured against the incumbent in
    interleaved rounds; what ran before is put back at the end. Run it again (or `campaign resume`) to continue."""
    from servectl.cli.views.campaign import outcome_lines
    from servectl.host import from_env

    with from_env() as host:
        outcome = host.run_campaign(file=file, out_dir=out, skip_invalid=skip_invalid)
    for line in outcome_lines(outcome):
        typer.echo(line)


@campaign_app.command("resume")
def resume_command(
    folder: Annotated[Path, typer.Argument(help="the campaign folder of `campaign run --out`")],
) -> None:
    """Continue the campaign in FOLDER (after kill -9, a reboot or SIGINT): nothing measured is measured again."""
    from servectl.cli.views.campaign import outcome_lines
    from servectl.host import from_env

    with from_env() as host:
        outcome = host.resume_campaign(folder=folder)
    for line in outcome_lines(outcome):
        typer.echo(line)


@campaign_app.command("status")
def status_command(
    folder: Annotated[Path, typer.Argument(help="the campaign folder of `campaign run --out`")],
    as_json: Annotated[bool, typer.Option("--json", help="print the progress as JSON")] = False,
) -> None:
    """Where the campaign in FOLDER stands (also while another process runs it): variants settled, ETA."""
    from servectl.cli.views.campaign import progress_lines
    from servectl.host import from_env

    with from_env() as host:
        progress = host.campaign_status(folder=folder)
    if as_json:
        typer.echo(json.dumps(progress.to_dict(), indent=2))
        return
    for line in progress_lines(progress):
        typer.echo(line)


@campaign_app.command("export")
def export_command(
    folder: Annotated[Path, typer.Argument(help="the campaign folder of `campaign run --out`")],
    out: Annotated[
        Path | None, typer.Option("--out", help="the JSON file to write (default: stdout)", show_default=False)
    ] = None,
    recipe_id: Annotated[
        str | None,
        typer.Option("--recipe-id", help="the registry recipe the sweep belongs to (default: the incumbent's name)"),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing --out file")] = False,
) -> None:
    """Export the campaign in FOLDER as a local-ai-registry/v1 speed sweep: one row per variant and point with its
    status (accepted-..., rejected-...-regression, inconclusive), checked against the schema servectl ships."""
    from servectl.host import from_env

    with from_env() as host:
        result = host.export_campaign(folder=folder, out=out, overwrite=force, recipe_id=recipe_id)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    if out is None:
        typer.echo(result.text, nl=False)
        return
    typer.echo(f"wrote {out}: {len(result.document['rows'])} rows (local-ai-registry/v1 speed sweep, schema-checked)")


def register(app: typer.Typer) -> None:
    """Add the ``campaign`` command group to ``app``."""
    app.add_typer(campaign_app, name="campaign")
