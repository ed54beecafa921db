"""Service commands: up (and --dry-run)."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("up")(up_command)


def up_command(
    name: Annotated[str, typer.Argument(help="profile to start")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the exact docker run and SGLang argv; touch nothing")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="with --dry-run: print the plan as JSON")] = False,
) -> None:
    """Validate, preflight and start a profile, then wait until it really serves."""
    from servectl.resolve import resolve

    resolved = resolve(name)
    if dry_run:
        if as_json:
            typer.echo(resolved.plan.to_json())
        else:
            from servectl.render_plan import dry_run_text

            typer.echo(dry_run_text(resolved.plan), nl=False)
        return
    from servectl.errors import UsageError

    raise UsageError("starting containers arrives with the runtime; use --dry-run for now")
