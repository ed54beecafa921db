"""The ``servectl`` command: parse options, call one core function, render, map errors to exit codes.

Business rules live in the library modules; this layer must stay thin and import nothing heavy at start-up
(no Docker SDK, no NVML): ``servectl --help`` and ``up --dry-run`` must stay fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from servectl.cli.adopt import register as register_adopt
from servectl.cli.bench import register as register_bench
from servectl.cli.catalog import register as register_catalog
from servectl.cli.dev import register as register_dev
from servectl.cli.doctor import register as register_doctor
from servectl.cli.gateway import register as register_gateway
from servectl.cli.preflight import register as register_preflight
from servectl.cli.profiles import register as register_profiles
from servectl.cli.qualify import register as register_qualify
from servectl.cli.render import register as register_render
from servectl.cli.report import register as register_report
from servectl.cli.service import register as register_service
from servectl.cli.swap import register as register_swap
from servectl.errors import ServectlError


def _plain_values_skip_coercion() -> None:
    """Skip typer's coercion where it is the identity (typer 0.29 has no setting for it).

    typer coerces every parameter value through a pydantic TypeAdapter (``typer._adapters``: 50-150 ms to
    import, ``python -X importtime``), even a flag that was not given (``--help`` defaults to None), an option
    left out (None), a number option's default, or a word for a ``str`` parameter, which the command line
    already gives as a str, or words for a ``list[str]`` one (``validate A B``). For those, this does what
    typer's ``process_value`` does after coercing - None
    becomes ``()`` for a repeated option, a missing required value is an error, the callback runs - and
    everything typed in that needs converting (ints, floats, paths, choices, lists) keeps typer's coercion
    and its error messages.

    Other typer versions lack the internals this relies on (typer 0.27 has no ``type_descriptor``; older ones
    no ``typer._click``): there, typer's own path runs unchanged (slower, same results).
    """
    try:
        from typer._click.exceptions import MissingParameter
        from typer.core import TyperArgument, TyperOption
    except ImportError:
        return

    for cls in (TyperArgument, TyperOption):
        coerce_and_process = cls.process_value

        def process_value(self: Any, ctx: Any, value: Any, _typer: Any = coerce_and_process) -> Any:
            if value is None and getattr(self, "is_bool_flag", False):
                value = False  # an unset flag is off (typer skips coercion for a bool)
            descriptor = getattr(self, "type_descriptor", None)
            if descriptor is None:  # a typer without the descriptor: its own coercion
                return _typer(self, ctx, value)
            is_plain_str = isinstance(value, str) and descriptor.annotation in (str, str | None)
            is_typed_default = type(value) in (int, float) and descriptor.annotation is type(value)  # not typed in
            if _words(value) and descriptor.annotation in (list[str], list[str] | None) and not descriptor.is_choice:
                value = list(value)  # words for a list[str] (validate A B): typer makes the same list
                is_plain_str = True
            if (value is None or is_plain_str or is_typed_default) and not descriptor.is_choice:
                if value is None and (self.multiple or self.nargs == -1):
                    value = ()
                if self.required and self.value_is_missing(value):
                    raise MissingParameter(ctx=ctx, param=self)
                return self.callback(ctx, self, value) if self.callback is not None else value
            return _typer(self, ctx, value)

        cls.process_value = process_value  # type: ignore[method-assign]


def _words(value: Any) -> bool:
    """A non-empty tuple or list of strings, as the command line gives a repeated or variadic parameter."""
    return isinstance(value, tuple | list) and bool(value) and all(isinstance(v, str) for v in value)


_plain_values_skip_coercion()

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
    register_catalog,  # catalog (list), catalog show / extract / diff
    register_dev,  # dev build-standin
    register_doctor,  # doctor
    register_gateway,  # gateway run / keys / up / down / status / logs
    register_preflight,  # preflight
    register_profiles,  # profiles, show, validate, diff, schema, promote
    register_qualify,  # qualify
    register_render,  # render
    register_report,  # report, claims verify
    register_service,  # up, down, status, logs
    register_swap,  # swap, rollback, rollback-check
)


def installed_version() -> str:
    """The version of the installed servectl distribution; the package's own when none is installed
    (a source checkout run through ``PYTHONPATH``)."""
    from importlib.metadata import PackageNotFoundError, version

    from servectl.version import __version__

    try:
        return version("servectl")
    except PackageNotFoundError:
        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"servectl {installed_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="print servectl's version and exit"),
    ] = False,
) -> None:
    """Launch and manage SGLang serving profiles: validate, preflight, up, swap, bench, render."""


@app.command("version")
def version_command() -> None:
    """Print servectl's version (as --version does)."""
    _print_version(True)


_registered: list[bool] = []


def _register_commands() -> None:
    """Add every command to ``app`` once (tests call :func:`main` many times in one process)."""
    if _registered:
        return
    _registered.append(True)
    for register in _REGISTER:
        register(app)


def err_console_print(line: str) -> None:
    """Print one error line to stderr, without markup interpretation."""
    sys.stderr.write(line + "\n")


def entry() -> None:
    """The console script and ``python -m servectl``: :func:`main` in a process that ends after it.

    Only here, not in :func:`main` (which tests call in-process): once up/swap settled, a late Ctrl-C is noted
    instead of cutting the report of what happened, and ignored while Python finalizes.
    """
    from servectl.signals import ignore_late_signals_at_exit, note_late_signals

    note_late_signals()
    try:
        main()
    finally:
        ignore_late_signals_at_exit()


def main() -> None:
    """Run the CLI: the one place where :class:`ServectlError` is caught."""
    # servectl's models use no pydantic plugins; discovering them scans every installed distribution's
    # entry points (~40 ms on a full site-packages). An explicit user setting wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _register_commands()
    try:
        with _only_the_command_named(sys.argv[1:2]):
            app()  # standalone: typer/click handle --help, usage errors and Ctrl-C, then exit
    except ServectlError as err:
        for line in err.lines():
            err_console_print(f"error: {line}")
        sys.exit(err.exit_code)
    except Exception as err:
        # Ctrl-C while Python builds a class arrives wrapped (RuntimeError from __set_name__): still a Ctrl-C
        if not _caused_by_interrupt(err):
            raise
        err_console_print("error: interrupted (Ctrl-C)")
        sys.exit(130)


@contextmanager
def _only_the_command_named(first: list[str]) -> Iterator[None]:
    """While the CLI runs, ``app`` holds only the command (or group) its first argument names.

    typer turns every registered command into a click command before parsing (reading each function's
    signature and type hints: ~35 ms for servectl's 25, ``python -m cProfile``); one is all that runs. The
    root's own options (``--help``, ``--version``), an unknown command (its error suggests the others) and
    shell completion (which lists them) keep every command.
    """
    completing = any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ)
    word = first[0] if first else ""
    commands = [c for c in app.registered_commands if c.name == word]
    groups = [g for g in app.registered_groups if g.name == word]
    if completing or not (commands or groups):
        yield
        return
    every = app.registered_commands, app.registered_groups
    app.registered_commands, app.registered_groups = commands, groups
    try:
        yield
    finally:
        app.registered_commands, app.registered_groups = every


def _caused_by_interrupt(err: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
