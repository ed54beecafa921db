"""`servectl preflight NAME`: prove the box is ready for a profile, without starting anything."""

from __future__ import annotations

from typing import Annotated

import typer

from servectl.cli.complete import profile_names
from servectl.cli.options import ForcedChecks


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight_command)


def preflight_command(
    name: Annotated[str, typer.Argument(help="profile to check", autocompletion=profile_names)],
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    force: ForcedChecks = None,
) -> None:
    """Run every preflight check for a profile: exit 0 when none fails, 3 when one does."""
    from servectl.host import from_env

    with from_env() as host:
        report = host.preflight(name=name, force=force or ())
    if as_json:
        typer.echo(report.to_json())
    else:
        from servectl.cli.views.preflight import render_report
        from servectl.cli.views.table import table_console

        render_report(report, table_console())
    raise typer.Exit(report.exit_code)
