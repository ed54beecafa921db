"""Service commands: up (and --dry-run), down, status, logs."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from servectl.cli.complete import profile_names
from servectl.cli.options import ForcedChecks

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.status import Status

    from servectl.preflight.model import PreflightReport
    from servectl.service.health import Progress


def register(app: typer.Typer) -> None:
    app.command("up")(up_command)
    app.command("down")(down_command)
    app.command("status")(status_command)
    app.command("logs")(logs_command)


class _ProgressDisplay:
    """Startup phases on stderr: a live spinner line on a terminal, one line per phase otherwise."""

    def __init__(self, profile: str) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.profile = profile
        self._status: Status | None = None
        self._last_phase = ""

    def __enter__(self) -> _ProgressDisplay:
        if self.console.is_terminal:
            self._status = self.console.status(f"{self.profile}: starting")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)

    def __call__(self, progress: Progress) -> None:
        from rich.markup import escape

        from servectl.cli.views.runtime import progress_text

        text = f"{self.profile}: {progress_text(progress)}"
        if self._status is not None:
            if progress.phase != self._last_phase and self._last_phase:
                self.console.print(f"[dim]{escape(self.profile)}: {escape(self._last_phase)} done[/dim]")
            self._status.update(escape(text))
        elif progress.phase != self._last_phase:
            self.console.print(escape(text))
        self._last_phase = progress.phase


def up_command(
    name: Annotated[str, typer.Argument(help="profile to start", autocompletion=profile_names)],
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="print the exact docker run and SGLang argv; starts and changes nothing but the plan cache "
            "(cache/plans in the state folder; SERVECTL_NO_PLAN_CACHE=1: not even that)",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="with --dry-run: print the plan as JSON")] = False,
    force: ForcedChecks = None,
) -> None:
    """Validate, preflight and start a profile, then wait until it really serves."""
    from servectl.host import from_env

    if dry_run:  # a plan compiled from the same inputs before is not compiled again (the host's plan cache)
        with from_env() as host:
            shown = host.dry_run(name=name)
        if shown.unset:
            names = ", ".join("${" + var + "}" for var in shown.unset)
            exports = " ".join(f"{var}=..." for var in shown.unset)
            sys.stderr.write(f"warning: {names} not set; shown unresolved (`up` needs them: export {exports})\n")
        typer.echo(shown.to_json() if as_json else shown.script, nl=as_json)
        return

    from servectl.cli.views.runtime import up_text
    from servectl.errors import StartupFailed

    warnings: list[str] = []
    display = _ProgressDisplay(name)

    def keep_warnings(report: PreflightReport) -> None:
        display.profile = report.profile_name  # the profile's own name (NAME may be a path)
        warnings.extend(f"preflight {c.id} {c.result}: {c.message}" for c in report.checks if c.result == "warn")
        warnings.extend(f"preflight {c.id} skipped with --force" for c in report.checks if c.forced)

    try:
        with display, from_env() as host:
            result = host.up(name=name, force=force or (), on_phase=display, on_report=keep_warnings)
    except StartupFailed as err:
        _print_last_lines(display.profile, err.last_log_lines)
        raise
    typer.echo(up_text(result))
    for note in (*warnings, *result.notes):
        typer.echo(f"note: {note}", err=True)


def _print_last_lines(profile: str, lines: tuple[str, ...]) -> None:
    from servectl.cli.views.runtime import last_lines_text

    for line in last_lines_text(profile, lines):
        sys.stderr.write(line + "\n")


def down_command(
    name: Annotated[
        str | None,
        typer.Argument(help="profile to stop (default: the only running service)", autocompletion=profile_names),
    ] = None,
) -> None:
    """Stop a service (SIGTERM, grace period, SIGKILL), remove its container and confirm it is gone."""
    from servectl.cli.views.runtime import stop_text
    from servectl.host import from_env

    with from_env() as host:
        result = host.down(name=name)
    if not result.stopped:
        typer.echo(f"{name} is not running; nothing to stop" if name else "no servectl service runs; nothing to stop")
        return
    for stopped in result.stopped:
        typer.echo(stop_text(stopped))
    if result.restored is not None and result.restored.summary():  # conflicts a swap stopped
        typer.echo(result.restored.summary())
    if result.warning is not None:
        typer.echo(f"warning: {result.warning}", err=True)


def status_command(
    as_json: Annotated[bool, typer.Option("--json", help="print the services as JSON")] = False,
    watch: Annotated[
        bool,
        typer.Option("--watch", "-w", help="refresh until Ctrl-C: the phase of a starting service, each card's use"),
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="seconds between refreshes with --watch", min=0.2)
    ] = 2.0,
) -> None:
    """Each servectl service: profile, state, port, GPUs, uptime, plan hash and drift from its profile."""
    if watch:
        _watch_status(interval)
        return
    from servectl.cli.views.runtime import status_text
    from servectl.host import from_env

    with from_env() as host:
        current = host.status()
    found, notes = current.services, current.notes
    if as_json:
        typer.echo(json.dumps(current.to_dict(), indent=2))
        for note in notes:
            sys.stderr.write(f"note: {note}\n")
        return
    for note in notes:
        typer.echo(f"note: {note}")
    if not found:
        typer.echo("no servectl services")
    else:
        from servectl.cli.views.columns import output_width

        bold = sys.stdout.isatty() and os.environ.get("TERM") != "dumb"  # as rich decides for its tables
        typer.echo(status_text(found, width=output_width(), bold_header=bold))
    if current.gateway is not None:
        from servectl.cli.views.gateway import gateway_lines

        for line in gateway_lines(current.gateway):
            typer.echo(line)


def _watch_status(interval_s: float) -> None:
    from rich.console import Console
    from rich.live import Live

    from servectl.cli.views.columns import output_width
    from servectl.cli.views.runtime import watch_renderable
    from servectl.host import from_env

    console = Console(highlight=False, width=output_width())
    with from_env() as host:
        views = host.watch(interval_s=interval_s)  # paused between refreshes on the host's clock

        def view() -> RenderableType:
            return watch_renderable(next(views), width=console.width)

        try:
            if not console.is_terminal:  # a pipe or a file: Live would print nothing; print each refresh
                while True:  # each refresh is headed by its time (the view's first line)
                    console.print(view())
                    console.print()
                    console.file.flush()
            with Live(view(), console=console, auto_refresh=False) as live:
                while True:
                    live.update(view(), refresh=True)
        except KeyboardInterrupt:
            return


def logs_command(
    name: Annotated[
        str, typer.Argument(help="profile (or container name) of the service", autocompletion=profile_names)
    ],
    follow: Annotated[bool, typer.Option("-f", "--follow", help="keep printing new lines")] = False,
    tail: Annotated[int | None, typer.Option("--tail", help="only the last N lines", min=0)] = None,
) -> None:
    """Print a service's log (stdout and stderr of its container)."""
    from servectl.cli.views.runtime import lines_with_phase_notes
    from servectl.host import from_env

    try:
        with from_env() as host:
            for line, note in lines_with_phase_notes(name, host.logs(name=name, follow=follow, tail=tail)):
                sys.stdout.write(line + "\n")
                if follow:
                    if note is not None:  # while a model loads: where startup is, on stderr beside the log
                        sys.stderr.write(note + "\n")
                    sys.stdout.flush()
    except KeyboardInterrupt:
        return
