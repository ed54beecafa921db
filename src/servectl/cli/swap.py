"""``swap``, ``rollback`` and ``rollback-check``: parse options, call :class:`servectl.host.Host`, render."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from servectl.cli.complete import profile_names
from servectl.cli.options import ForcedChecks

if TYPE_CHECKING:
    from servectl.preflight.model import PreflightReport
    from servectl.service.rollback import RollbackCheck
    from servectl.service.swap import PhaseEvent, SwapResult

_WAIT_HELP = "seconds to wait for another servectl that is changing services (default 10)"
_NO_STAGE_HELP = (
    "do not stage the target before the stop (image pin check, argv parsed in the image, weights read ahead)"
)


def register(app: typer.Typer) -> None:
    app.command("swap")(swap_command)
    app.command("rollback")(rollback_command)
    app.command("rollback-check")(rollback_check_command)
    app.command("recover")(recover_command)


def recover_command(
    wait_s: Annotated[float | None, typer.Option("--wait", metavar="SECONDS", help=_WAIT_HELP)] = None,
) -> None:
    """Settle a swap, rollback or up that was killed: remove its unproven target, bring back what ran before.

    Uses the journal the transaction left (what ran before, as it ran), not today's profile files.
    Exit codes: 0 settled (or nothing to settle); 5 the previous service did not come back.
    """
    from servectl.host import from_env

    with from_env(lock_timeout_s=wait_s) as host:
        result = host.recover()
    typer.echo(result.message)


def swap_command(
    target: Annotated[
        str | None,
        typer.Argument(
            help="profile to run instead; default: the running profile's rollback:", autocompletion=profile_names
        ),
    ] = None,
    force: ForcedChecks = None,
    wait_s: Annotated[float | None, typer.Option("--wait", metavar="SECONDS", help=_WAIT_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    no_stage: Annotated[bool, typer.Option("--no-stage", help=_NO_STAGE_HELP)] = False,
) -> None:
    """Replace the running service with TARGET, all-or-nothing: the target up, or the previous one back.

    Before the old service stops, the target is staged: its image is checked against the pin, its argv parsed
    in the image, its weight files read ahead into the page cache (as far as free RAM allows), so that the
    downtime is the engine's start from RAM. A staging failure stops nothing (exit 3).

    Exit codes: 0 target up; 3 preflight or staging failed, nothing changed; 4 target failed and the previous
    service is back; 5 both failed, nothing runs.
    """
    _swap_and_render("swap", force=force, wait_s=wait_s, as_json=as_json, target=target, stage=not no_stage)


def rollback_command(
    force: ForcedChecks = None,
    wait_s: Annotated[float | None, typer.Option("--wait", metavar="SECONDS", help=_WAIT_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    no_stage: Annotated[bool, typer.Option("--no-stage", help=_NO_STAGE_HELP)] = False,
) -> None:
    """Swap back to the profile that ran before the current one (from servectl's history), staged as swap."""
    _swap_and_render("rollback", force=force, wait_s=wait_s, as_json=as_json, stage=not no_stage)


def rollback_check_command(
    name: Annotated[
        str | None,
        typer.Argument(
            help="profile whose rollback target to check; default: all that have one", autocompletion=profile_names
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the checks as JSON")] = False,
) -> None:
    """Prove that each profile's rollback target could start now (validates, image, model, preflight).

    Starts nothing. Exit code 3 when any target could not start.
    """
    from servectl.errors import PreflightFailed
    from servectl.host import from_env

    with from_env() as host:
        checks = host.rollback_check(names=None if name is None else [name])
    if as_json:
        typer.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        _print_checks(checks)
    failed = [c for c in checks if not c.ok]
    if failed:
        names = ", ".join(f"{c.profile} -> {c.target or '?'}" for c in failed)
        raise PreflightFailed(f"rollback target could not start now: {names} (see the checks above)")


# -- wiring ----------------------------------------------------------------------------------------------
def _swap_and_render(
    command: Literal["swap", "rollback"],
    *,
    force: list[str] | None,
    wait_s: float | None,
    as_json: bool,
    target: str | None = None,
    stage: bool = True,
) -> None:
    """Run ``Host.swap`` or ``Host.rollback``, keeping the preflight's warnings as notes, then print."""
    from servectl.host import from_env

    notes: list[str] = []

    def keep(report: PreflightReport) -> None:
        notes.extend(f"preflight {c.id} {c.result}: {c.message}" for c in report.checks if c.result == "warn")
        notes.extend(f"preflight {c.id} skipped with --force" for c in report.checks if c.forced)

    on_phase = None if as_json else _PhasePrinter()
    with from_env(lock_timeout_s=wait_s) as host:
        if command == "swap":
            result = host.swap(name=target, force=force or (), on_phase=on_phase, on_report=keep, stage=stage)
        else:
            result = host.rollback(force=force or (), on_phase=on_phase, on_report=keep, stage=stage)
    _render(result, as_json, notes)


# -- rendering -------------------------------------------------------------------------------------------
class _PhasePrinter:
    """Prints a swap's phases on stderr as they end, and one line per startup step (not per percentage)."""

    def __init__(self) -> None:
        self._last_step: dict[str, str] = {}  # phase -> the startup step printed last, for this one swap

    def __call__(self, event: PhaseEvent) -> None:
        if event.kind == "begin":
            return
        if event.kind == "progress":
            if self._last_step.get(event.phase) != event.step:
                self._last_step[event.phase] = event.step
                sys.stderr.write(f"    {event.phase}: {event.detail}\n")
            return
        mark = "ok" if event.ok else "FAILED"
        detail = f"  ({event.detail})" if event.detail else ""
        sys.stderr.write(f"  {event.phase:<18} {event.duration_s or 0.0:7.2f} s  {mark}{detail}\n")


def _render(result: SwapResult, as_json: bool, notes: list[str]) -> None:
    for note in notes:
        sys.stderr.write(f"note: {note}\n")
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2, default=str))
        return
    typer.echo(result.message)
    if result.downtime_s is not None:
        stop = f"{result.old_stop_s:.2f}" if result.old_stop_s is not None else "?"
        start = f"{result.target_startup_s:.2f}" if result.target_startup_s is not None else "?"
        typer.echo(
            f"downtime {result.downtime_s:.2f} s ({'release' if result.old_released else 'stop'} {stop} s + "
            f"{'resume' if result.target_resumed else 'start'} {start} s"
            f"{', old service was killed after ignoring SIGTERM' if result.forced_stop else ''})"
        )


def _print_checks(checks: list[RollbackCheck]) -> None:
    for check in checks:
        head = f"{check.profile} -> {check.target}" if check.target else check.profile
        typer.echo(f"{'ok  ' if check.ok else 'FAIL'} {head}")
        for item in check.items:
            typer.echo(f"     {'ok  ' if item.ok else 'FAIL'} {item.check:<10} {item.message}")
