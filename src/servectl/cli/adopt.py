"""``servectl adopt``: write the profile of a container, a compose service or a registry recipe."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("adopt")(adopt_command)


OUT_HELP = (
    "file to write (default: ./profiles/NAME.yaml when ./profiles exists, else NAME.yaml in your profile folder: "
    "~/.config/servectl/profiles, or $SERVECTL_HOME/profiles)"
)
RECIPE_HELP = (
    "adopt the docker launch of a local-ai-registry/v1 recipe (a JSON file, or the name of one servectl ships, "
    "e.g. glm53-flash-exl3-q4-rtxpro6000-sglang-tp4)"
)


def adopt_command(
    target: Annotated[
        str | None, typer.Argument(help="container name or id; with --compose, the service; none with --recipe")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="profile name (default: from the container name)")] = None,
    out: Annotated[Path | None, typer.Option("--out", help=OUT_HELP)] = None,
    compose: Annotated[Path | None, typer.Option("--compose", help="adopt service TARGET of this compose file")] = None,
    recipe: Annotated[Path | None, typer.Option("--recipe", help=RECIPE_HELP)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the profile, write nothing")] = False,
    force: Annotated[bool, typer.Option("--force", help="replace a profile of that name (keeps a .bak)")] = False,
) -> None:
    """Write a profile that reproduces a running container (docker inspect), a compose service, or a registry recipe.

    Engine flags become typed fields where the profile has them and `args` otherwise; flags the catalog does
    not know are kept and declared; secrets are written as ${NAME} references. The profile is validated and
    its plan compared with the container on every field servectl controls. A recipe's argv is also checked
    against the flag catalog and, when its image is on this host, the image's own SGLang parser; each problem
    of the recipe (unknown flag, rejected value, image without a digest pin, model without a revision, a
    serving fact its argv contradicts) is printed on one line.
    """
    from servectl.errors import UsageError
    from servectl.host import from_env

    if recipe is not None and (target is not None or compose is not None):
        raise UsageError("--recipe FILE adopts the recipe alone: give no container and no --compose with it")
    if recipe is None and target is None:
        raise UsageError(
            "name the container to adopt (servectl adopt CONTAINER), --compose FILE SERVICE or --recipe FILE"
        )
    with from_env() as host:
        result = host.adopt(
            container=None if compose or recipe else target,
            compose_file=compose,
            service=target if compose else None,
            recipe=recipe,
            name=name,
            out=out,
            dry_run=dry_run,
            overwrite=force,
        )
    adoption = result.adoption
    source = f"container {adoption.container_name}" if adoption.container_name else adoption.origin
    if dry_run:
        typer.echo(result.text.rstrip())
        typer.echo(f"# (dry run: {result.path} not written)")
    else:
        typer.echo(f"wrote {result.path} (profile {adoption.name})")
        if result.backup is not None:
            typer.echo(f"kept the old file as {result.backup}")
    for note in adoption.notes:
        typer.echo(f"note: {note}")
    if adoption.exports:
        typer.echo(f"before servectl starts it: export {' '.join(adoption.exports)}")
    for problem in result.problems:
        typer.echo(f"warning: the profile does not validate yet: {problem}")
    for problem in adoption.problems:
        typer.echo(f"problem: {problem}")
    if result.diff:
        typer.echo(f"differs from {source} on:")
        for line in result.diff:
            typer.echo(f"  {line}")
    elif not result.problems and adoption.container_name:
        typer.echo(
            f"matches container {adoption.container_name} on every field servectl controls "
            f"(servectl diff {adoption.name} --container {adoption.container_name})"
        )
    elif not result.problems:
        typer.echo(f"its plan matches the {source} launch on every field servectl controls")
