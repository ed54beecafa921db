"""Flag catalog commands: list, show, extract (from an engine image), diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from servectl.cli.complete import catalog_flags, catalog_or_profile_names

catalog_app = typer.Typer(
    help="Flag catalogs: what an engine build's parser accepts (shipped, or extracted from an image).",
    no_args_is_help=False,
    invoke_without_command=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")


@catalog_app.callback()
def catalog_list(ctx: typer.Context) -> None:
    """List the shipped catalogs and those extracted from images (with no subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    from servectl.host import from_env

    with from_env() as host:
        for c in host.catalogs():
            typer.echo(f"{c.name}  ({c.engine} {c.version}, {c.options} options, {c.source})")


@catalog_app.command("show")
def show_command(
    name: Annotated[
        str,
        typer.Argument(
            help="catalog (shipped name, sha256:..., file.json) or a profile name",
            autocompletion=catalog_or_profile_names,
        ),
    ],
    grep: Annotated[
        str, typer.Option("--grep", "-g", help="only flags containing this text", autocompletion=catalog_flags)
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List the flags a catalog holds (a profile's catalog includes its catalog_extend)."""
    from servectl.host import from_env

    with from_env() as host:
        catalog = host.flag_catalog(name=name)
    options = [o for o in catalog.options if not grep or any(grep in f for f in o.flags)]
    if as_json:
        typer.echo(json.dumps([o.__dict__ for o in options], indent=2, default=list))
        return
    for o in options:
        detail = o.kind if o.kind != "value" else (o.type or "str") + (f" nargs={o.nargs}" if o.nargs else "")
        choices = f"  choices: {', '.join(o.choices)}" if o.choices else ""
        typer.echo(f"{', '.join(o.flags)}  [{detail}]{choices}")


@catalog_app.command("extract")
def extract_command(
    image: Annotated[str, typer.Argument(help="image reference (repository:tag) or a profile name")],
    out: Annotated[Path | None, typer.Option("--out", help="also write the catalog to this .json file")] = None,
    python: Annotated[
        str | None, typer.Option("--python", help="the image's Python (default: the profile's, or probed)")
    ] = None,
    logs: Annotated[bool, typer.Option("--logs", help="also dump the image's log format strings")] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="seconds before the container is killed (default: 2 minutes)"),
    ] = None,
) -> None:
    """Dump an image's own SGLang parser into a flag catalog (throwaway container: no network, no GPU)."""
    from servectl.host import from_env

    with from_env() as host:
        result = host.extract_catalog(image=image, out=out, logs=logs, python=python, timeout_s=timeout)
    typer.echo(
        f"extracted {result.option_count} options of SGLang {result.version or '?'} from {result.image.refs[0]} "
        f"({result.image.id[:19]}) in {result.seconds:.1f} s with {result.python}"
    )
    typer.echo(f"version  read from {result.version_source}")
    typer.echo(f"stored   {result.stored_at}")
    if result.written_to is not None:
        typer.echo(f"wrote    {result.written_to}  (use it with engine.catalog: {result.written_to.name})")
    for path in result.routes_written:
        typer.echo(f"routes   {path}  (the gateway serves only these paths to its profiles)")
    if result.routes_error is not None:
        typer.echo(f"routes   not read ({result.routes_error}); the gateway uses the shipped route table")
    for path in result.logs_written:
        typer.echo(f"logs     {path}")
    typer.echo(f"profiles of image {result.image.refs[0]} can use it with engine.catalog: image")


@catalog_app.command("diff")
def diff_command(
    a: Annotated[str, typer.Argument(help="old catalog: shipped name, sha256:..., file.json, profile or image")],
    b: Annotated[str, typer.Argument(help="new catalog, the same kinds")],
    profile: Annotated[
        str | None, typer.Option("--profile", help="only the changes that touch this profile's flags")
    ] = None,
) -> None:
    """Flags added, removed, or changed in kind, type, choices or default from A to B."""
    from servectl.host import from_env

    with from_env() as host:
        label_a, label_b, changes = host.diff_catalogs(a=a, b=b, name=profile)
    typer.echo(f"{label_a} -> {label_b}: {len(changes)} change(s)")
    for change in changes:
        typer.echo(change.line())
