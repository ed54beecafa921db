"""The ``servectl`` command: parse options, call one core function, render, map errors to exit codes.

Business rules live in the library modules; this layer must stay thin and import nothing heavy at start-up
(no Docker SDK, no NVML): ``servectl --help`` and ``up --dry-run`` must stay fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import typer

from servectl.cli.adopt import register as register_adopt
from servectl.cli.bench import register as register_bench
from servectl.cli.dev import register as register_dev
from servectl.cli.doctor import register as register_doctor
from servectl.cli.preflight import register as register_preflight
from servectl.cli.profiles import register as register_profiles
from servectl.cli.qualify import register as register_qualify
from servectl.cli.render import register as register_render
from servectl.cli.service import register as register_service
from servectl.cli.swap import register as register_swap
from servectl.errors import ServectlError


def _flags_show_no_type() -> None:
    """Print no type after a flag: typer 0.29's rich help shows ``--help <bool>``, but a flag takes no value.

    typer has no setting for it; every option (``--help`` included) is a ``TyperOption``, so one override
    of its type label covers them all. Options that take a value keep their ``<int>``, ``<path>``...
    """
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_show_no_type()

app = typer.Typer(
    name="servectl",
    help="Launch and manage SGLang serving profiles: validate, preflight, up, swap, bench, render.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

# Each command module adds its commands to ``app``; `--help` lists them in this order. The modules import
# only typer and light servectl modules at the top; each command imports what it runs when it runs.
_REGISTER: tuple[Callable[[typer.Typer], None], ...] = (
    register_adopt,  # adopt
    register_bench,  # bench
    register_dev,  # dev build-standin
    register_doctor,  # doctor
    register_preflight,  # preflight
    register_profiles,  # profiles, show, validate, diff, schema, catalog, promote
    register_qualify,  # qualify
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
