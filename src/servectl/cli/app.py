"""The ``servectl`` command: parse options, call one core function, render, map errors to exit codes.

Business rules live in the library modules; this layer must stay thin and import nothing heavy at start-up
(no Docker SDK, no NVML): ``servectl --help`` and ``up --dry-run`` must stay fast.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from servectl.errors import ServectlError

app = typer.Typer(
    name="servectl",
    help="Launch and manage SGLang serving profiles: validate, preflight, up, swap, bench, render.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module registers its commands on ``app`` through ``register(app)``; keep the list sorted.
_COMMAND_MODULES: tuple[str, ...] = (
    "servectl.cli.bench",
    "servectl.cli.dev",
    "servectl.cli.preflight",
    "servectl.cli.profiles",
    "servectl.cli.qualify",
    "servectl.cli.render",
    "servectl.cli.service",
    "servectl.cli.swap",
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
    for module_name in _COMMAND_MODULES:
        importlib.import_module(module_name).register(app)


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
