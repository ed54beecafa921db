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


def _flags_skip_coercion() -> None:
    """A flag that was not given is False, without typer's coercion (typer 0.29 has no setting for it).

    typer coerces every value that is not already a bool through a pydantic TypeAdapter, and ``--help`` and
    ``--install-completion`` default to None, so every command paid for importing ``typer._adapters``
    (50-150 ms, ``python -X importtime``). Options that take a value keep typer's coercion.
    """
    from typer.core import TyperOption

    process = TyperOption.process_value

    def process_value(self: TyperOption, ctx: Any, value: Any) -> Any:
        if value is None and self.is_bool_flag:
            value = False
        return process(self, ctx, value)

    TyperOption.process_value = process_value  # type: ignore[method-assign, assignment]


_flags_skip_coercion()

app = typer.Typer(
    name="servectl",
    help="Launch and manage SGLang serving profiles: validate, preflight, up, swap, bench, render.",
    no_args_is_help=True,
    # plain help, like docker and kubectl: typer's rich help imports rich.markdown, markdown_it and pygments
    # (~100 ms) and printed `--help <bool>`; the plain one prints no type after a flag
    rich_markup_mode=None,
    add_completion=True,
    context_settings={"max_content_width": 120},  # use a wide terminal; click stops at 80 by default
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
