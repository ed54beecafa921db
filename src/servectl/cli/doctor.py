"""`servectl doctor`: check this machine's set-up for servectl, one line per part with its fix."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)


def doctor_command(
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Check Docker, the GPU runtime, the NVIDIA driver, compose, the state folder and extras; exit 3 on a
    required failure."""
    from servectl.host import from_env

    with from_env() as host:
        report = host.doctor()
    if as_json:
        typer.echo(json.dumps({"ok": not report.failed, "lines": [x.to_dict() for x in report.lines]}, indent=2))
    else:
        from servectl.cli.views.doctor import doctor_text

        typer.echo(doctor_text(report), nl=False)
    raise typer.Exit(report.exit_code)
