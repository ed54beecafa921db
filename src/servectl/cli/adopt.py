"""``servectl adopt``: write the profile of a container (or compose service) servectl did not start."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("adopt")(adopt_command)


def adopt_command(
    target: Annotated[str, typer.Argument(help="container name or id; with --compose, the service")],
    name: Annotated[str | None, typer.Option("--name", help="profile name (default: from the container name)")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="file to write (default: profiles/NAME.yaml)")] = None,
    compose: Annotated[Path | None, typer.Option("--compose", help="adopt service TARGET of this compose file")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the profile, write nothing")] = False,
    force: Annotated[bool, typer.Option("--force", help="replace a profile of that name (keeps a .bak)")] = False,
) -> None:
    """Write a profile that reproduces a running container (docker inspect) or a compose service.

    Engine flags become typed fields where the profile has them and `args` otherwise; flags the catalog does
    not know are kept and declared; secrets are written as ${NAME} references. The profile is validated and
    its plan compared with the container on every field servectl controls.
    """
    from servectl.host import from_env

    with from_env() as host:
        result = host.adopt(
            container=None if compose else target,
            compose_file=compose,
            service=target if compose else None,
            name=name,
            out=out,
            dry_run=dry_run,
            overwrite=force,
        )
    if dry_run:
        typer.echo(result.text.rstrip())
        typer.echo(f"# (dry run: {result.path} not written)")
    else:
        typer.echo(f"wrote {result.path} (profile {result.adoption.name})")
        if result.backup is not None:
            typer.echo(f"kept the old file as {result.backup}")
    for note in result.adoption.notes:
        typer.echo(f"note: {note}")
    if result.adoption.exports:
        typer.echo(f"before servectl starts it: export {' '.join(result.adoption.exports)}")
    for problem in result.problems:
        typer.echo(f"warning: the profile does not validate yet: {problem}")
    if result.diff:
        typer.echo(f"differs from container {result.adoption.container_name} on:")
        for line in result.diff:
            typer.echo(f"  {line}")
    elif not result.problems:
        typer.echo(
            f"matches container {result.adoption.container_name} on every field servectl controls "
            f"(servectl diff {result.adoption.name} --container {result.adoption.container_name})"
        )
