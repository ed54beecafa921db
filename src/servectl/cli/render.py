"""Render command: profiles to docker compose files and Kubernetes manifests."""

from __future__ import annotations

from typing import Annotated

import typer

from servectl.cli.complete import profile_names
from servectl.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("render")(render_command)


def render_command(
    name: Annotated[str | None, typer.Argument(help="profile to render", autocompletion=profile_names)] = None,
    to: Annotated[
        str | None,
        typer.Option("--to", help="compose or k8s (with --all: only that target)", metavar="TARGET"),
    ] = None,
    out: Annotated[
        str | None,
        typer.Option("--out", "-o", help="file to write; '-' for stdout; default compose/NAME.yaml or k8s/NAME.yaml"),
    ] = None,
    gateway: Annotated[
        bool,
        typer.Option("--gateway", help="render the servectl gateway beside it, configured from your gateway file"),
    ] = False,
    render_all_: Annotated[
        bool,
        typer.Option("--all", help="re-render the shipped profiles into the repository's compose/ and k8s/"),
    ] = False,
) -> None:
    """Render a profile to a docker compose file or Kubernetes manifests, from the plan `up` would run."""
    from servectl.host import from_env

    if render_all_:
        if name is not None or out is not None or gateway:
            raise UsageError("--all renders every shipped profile; drop the profile name, --out and --gateway")
        with from_env() as host:
            result = host.render_all(to=to)
        for file in result.files:
            typer.echo(f"wrote   {file.path}")
        for path in result.removed:
            typer.echo(f"removed {path} (its profile is gone)")
        for skip in result.skipped:
            where = f" for {skip.target}" if skip.target else ""
            typer.echo(f"skipped {skip.profile}{where}: {skip.reason}")
        return
    if name is None:
        raise UsageError("name a profile to render (or use --all)")
    if to is None:
        raise UsageError("--to is required: compose or k8s")

    with from_env() as host:
        rendered = host.render(name=name, to=to, out=out, gateway=gateway)
    if rendered.path is None:
        typer.echo(rendered.text, nl=False)
        return
    rendered.write()
    typer.echo(f"wrote {rendered.path}")
