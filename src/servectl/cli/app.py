"""The ``servectl`` command: parse options, call one Host method, render, map errors to exit codes.

Business rules live in the library modules; this layer must stay thin and import nothing heavy at start-up
(no Docker SDK, no NVML): ``servectl --help`` and ``up --dry-run`` must stay fast.
"""

from __future__ import annotations

import os
import sys
from difflib import get_close_matches
from functools import cache
from importlib import import_module
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup

from servectl.errors import ServectlError

#: Every command and group after ``version``, in the order ``servectl --help`` lists them (typer's: commands,
#: then groups), and the module under ``servectl.cli`` whose ``register(app)`` defines it.
#: tests/unit/test_cli_lazy_imports.py checks this table against what each module registers.
COMMANDS: dict[str, str] = {
    "adopt": "adopt",
    "doctor": "doctor",
    "preflight": "preflight",
    "profiles": "profiles",
    "show": "profiles",
    "validate": "profiles",
    "diff": "profiles",
    "schema": "profiles",
    "promote": "profiles",
    "qualify": "qualify",
    "render": "render",
    "report": "report",
    "up": "service",
    "down": "service",
    "status": "service",
    "logs": "service",
    "swap": "swap",
    "rollback": "swap",
    "rollback-check": "swap",
    "recover": "swap",
    "bench": "bench",
    "catalog": "catalog",
    "dev": "dev",
    "gateway": "gateway",
    "claims": "report",
    "campaign": "campaign",
}


@cache
def _module_commands(module: str) -> TyperGroup:
    """The commands module ``servectl.cli.<module>`` registers, as click commands (built once per process)."""
    commands = typer.Typer(rich_markup_mode=None, add_completion=False)
    import_module(f"servectl.cli.{module}").register(commands)
    return typer.main.get_group(commands)


class LazyCommands(TyperGroup):
    """The root group: each command's module is imported, and the command built, when it is asked for.

    click's documented lazy-loading pattern (``list_commands`` names every command, ``get_command`` loads one),
    given to typer through ``cls=``: a run imports and builds the one command it runs (typer turns a function
    into a click command by reading its signature: ~1.4 ms each); ``--help`` and shell completion, which list
    them all, load them all.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *(name for name in COMMANDS if name not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in COMMANDS:
            found = _module_commands(COMMANDS[cmd_name]).commands.get(cmd_name)
        return found

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        # typer suggests close names from the commands built so far; here they are the ones listed
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            matches = get_close_matches(args[0], self.list_commands(ctx))
            hint = f" Did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""
            ctx.fail(f"No such command {args[0]!r}.{hint}")
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="servectl",
    cls=LazyCommands,
    help="Launch and manage SGLang serving profiles: validate, preflight, up, swap, bench, render.",
    no_args_is_help=True,
    # plain help, like docker and kubectl: typer's rich help imports rich.markdown, markdown_it and pygments
    # (~100 ms) and printed `--help <bool>`; the plain one prints no type after a flag
    rich_markup_mode=None,
    add_completion=True,
    context_settings={"max_content_width": 120},  # use a wide terminal; click stops at 80 by default
    pretty_exceptions_enable=False,
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
    try:
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


def _caused_by_interrupt(err: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
