"""The ``servectl`` command: parse options, call one core function, render, map errors to exit codes.

Business rules live in the library modules; this layer must stay thin and import nothing heavy at start-up
(no Docker SDK, no NVML): ``servectl --help`` and ``up --dry-run`` must stay fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import typer

from servectl.cli.adopt import register as register_adopt
from servectl.cli.bench import register as register_bench
from servectl.cli.dev import register as register_dev
from servectl.cli.preflight import register as register_preflight
from servectl.cli.profiles import register as register_profiles
from servectl.cli.render import register as register_render
from servectl.cli.service import register as register_service
from servectl.cli.swap import register as register_swap
from servectl.errors import ServectlError

app = typer.Typer(
    name="servectl",
    help="Launch and manage SGLang serving profiles: validate, preflight, up, swap, bench, render.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each command module adds its commands to ``app``; `--help` lists them in this order. The modules import
# only typer and light servectl modules at the top; each command imports what it runs when it runs.
_REGISTER: tuple[Callable[[typer.Typer], None], ...] = (
    register_adopt,  # adopt
    register_bench,  # bench
    register_dev,  # dev build-standin
    register_preflight,  # preflight
    register_profiles,  # profiles, show, validate, diff, schema, catalog, promote
    register_render,  # render
    register_service,  # up, down, status, logs
    register_swap,  # swap, rollback, rollback-check
)


@app.callback()
def _root() -> None:
    """Launch and manage SGLang serving profiles: validate, preflight, up, swap, bench, render."""


@app.command("version")
def version_command() -> None:
    """Print servectl's version."""
    from servectl import __version__

    typer.echo(__version__)


def _register_commands() -> None:
    for register in _REGISTER:
        register(app)


def err_console_print(line: str) -> None:
    """Print one error line to stderr, without markup interpretation."""
    sys.stderr.write(line + "\n")


def main() -> None:
    """Entry point of the console script: the one place where :class:`ServectlError` is caught."""
    # servectl's models use no pydantic plugins; discovering them scans every installed distribution's
    # entry points (~40 ms on a full site-packages). An explicit user setting wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _register_commands()
    try:
        app()  # standalone: typer/click handle --help, usage errors and Ctrl-C, then exit
    except ServectlError as err:
        for line in err.lines():
            err_console_print(f"error: {line}")
        sys.exit(err.exit_code)
