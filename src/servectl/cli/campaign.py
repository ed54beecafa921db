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


def register(app: typer.Typer) -> None:
    """Add the ``campaign`` command group to ``app``."""
    app.add_typer(campaign_app, name="campaign")
