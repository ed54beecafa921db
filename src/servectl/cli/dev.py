"""``servectl dev ...``: developer commands (the stand-in SGLang image for tests and demos)."""

from __future__ import annotations

import typer

dev_app = typer.Typer(
    name="dev",
    help="Developer tools: the stand-in SGLang engine image for tests and demos without a GPU.",
    no_args_is_help=True,
)


@dev_app.command("build-standin")
def build_standin_command(
    force: bool = typer.Option(False, "--force", help="Rebuild even if the image for these sources exists."),
) -> None:
    """Build the stand-in SGLang image (servectl-standin:<hash>, also tagged latest); print its reference."""
    from servectl.host import from_env

    with from_env() as host:
        typer.echo(host.build_standin_image(rebuild=force))


def register(app: typer.Typer) -> None:
    """Add the ``dev`` command group to ``app``."""
    app.add_typer(dev_app, name="dev")
