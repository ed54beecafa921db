"""The ``up`` and ``down`` commands: the lock, the conflict rules, preflight and the history around one start
or stop.

Docker is the source of truth: every decision is derived from the containers that carry servectl's labels
(profile, plan hash, port, GPUs, stop grace), so a crashed or restarted servectl, or a container removed
behind its back, never leaves it confused. Containers servectl did not start are never touched; they are
reported as conflicts when they hold a port or a GPU that a profile needs.

Core functions (the host's :class:`~servectl.service.context.Context` first, then keyword-only business
arguments and an options object; used through ``servectl.host.Host``):

* :func:`up` / :func:`down` - the commands, through the context's
  :class:`~servectl.service.container.ServiceRuntime`; an interrupted ``up`` is undone by the transaction
  core's :func:`~servectl.service.transaction.undo.undo` like a failed swap.
* :func:`start` / :func:`stop` - one container through the gate / gracefully down and gone
  (:mod:`servectl.service.container`, re-exported here).

The read model (:func:`servectl.service.services.services`), the image (:mod:`servectl.service.image`), the
files a service needs (:mod:`servectl.service.host_files`) and its logs (:mod:`servectl.service.logs`) live
next door.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from servectl.adapters.conflicts import RestoreOutcome
from servectl.adapters.gateway_admin import GatewayHold
from servectl.adapters.state import GateRecord
from servectl.errors import (
    ServectlError,
    ServiceConflict,
    StartupFailed,
    StateDamaged,
    UpInterrupted,
    UsageError,
)
from servectl.preflight.checks import validate_skip
from servectl.preflight.model import StartContext
from servectl.preflight.request import check_start
from servectl.service.container import (
    CARDS_FREE_DEADLINE_S,
    CARDS_POLL_S,
    DockerRuntime,
    ServiceRuntime,
    StartResult,
    StopResult,
    start,
    stop,
)
from servectl.service.context import DEFAULT_LOCK_TIMEOUT_S, Context, lock_timeout_default
from servectl.service.health import GatePassage, Progress
from servectl.service.journal import SwapJournal, clear_journal, refuse_if_unfinished, write_journal
from servectl.service.services import ALIVE_STATES, ServiceInfo, running_refs
from servectl.service.standby import first_start
from servectl.service.transaction.context import TxContext
from servectl.service.transaction.undo import remove_unproven, undo
from servectl.signals import Interrupt, SignalGuard, signal_name

if TYPE_CHECKING:
    from servectl.plan.resolve import Resolved
    from servectl.preflight.model import PreflightReport
    from servectl.profile.loader import ProfileFolder

__all__ = [  # start/stop and their results live in servectl.service.container; re-exported for callers
    "CARDS_POLL_S",
    "DEFAULT_LOCK_TIMEOUT_S",
    "DockerRuntime",
    "DownOptions",
    "DownResult",
    "ServiceRuntime",
    "StartResult",
    "StopResult",
    "UpOptions",
    "UpResult",
    "down",
    "lock_timeout_default",
    "restore_after_down",
    "start",
    "stop",
    "up",
]


@dataclass(frozen=True)
class DownResult:
    """What ``down`` did: the services stopped, then the conflicts started again once none runs."""

    stopped: tuple[StopResult, ...]
    restored: RestoreOutcome | None = None  # None: nothing was recorded, or a servectl service still runs
    warning: str | None = None  # the record of stopped conflicts is damaged: restore them by hand


@dataclass(frozen=True)
class UpResult:
    """What ``up`` did: started the service, or found it already running with the same plan."""

    action: Literal["started", "already-running"]
    service: ServiceInfo
    url: str
    gate: GatePassage | None = None
    removed_stale: tuple[str, ...] = ()  # exited containers of this profile that were cleared first
    notes: tuple[str, ...] = ()  # what up did on the way (e.g. replaced a container that never passed its gate)

    @property
    def startup_s(self) -> float | None:
        return None if self.gate is None else self.gate.startup_s


@dataclass(frozen=True)
class UpOptions:
    """How ``up`` runs (every default is servectl's own).

    Attributes:
        force: preflight check ids to skip (recorded in the history).
        on_report: gets the preflight report before anything starts.
        on_phase: the health gate's progress (image, container, weights, ready...).
        lock_timeout_s: wait for another servectl process; default the context's.
        handle_signals: SIGINT/SIGTERM/SIGHUP remove what was started (main thread only).
    """

    force: tuple[str, ...] = ()
    on_report: Callable[[PreflightReport], None] | None = None
    on_phase: Callable[[Progress], None] | None = None
    lock_timeout_s: float | None = None
    handle_signals: bool = True


def up(ctx: Context, *, name: str, resolved: Resolved | None = None, opts: UpOptions | None = None) -> UpResult:
    """Start profile ``name`` unless it already runs; refuse when another service holds its GPUs or port.

    Args:
        ctx: the adapters and state; preflight reads :attr:`~servectl.service.context.Context.gpus` (a profile
            without GPUs opens no driver) and the context's host probe; the start goes through its runtime.
        name: the profile.
        resolved: the profile already resolved (else ``ctx.resolve(name)``).
        opts: :class:`UpOptions`.

    Raises:
        ProfileError / UsageError: the profile does not load (nothing was created).
        ServiceConflict: the profile runs with another plan; another service holds its GPUs, port or name.
        LockTimeout / PreflightFailed / StartupFailed: another servectl is changing services; see :func:`start`.
    """
    opts = opts or UpOptions()
    resolved = resolved or ctx.resolve(name)
    skip = validate_skip(opts.force)  # an unknown check id is a usage error before anything happens
    # a signal while it starts undoes the start, and whatever arrives then is only noted: removing it must finish
    guard = SignalGuard(opts.handle_signals, then="defer")
    tx = TxContext.of(ctx, lock_timeout_s=opts.lock_timeout_s, signals=guard)
    tx.knows(resolved)  # the one resolution of this transaction: every step reads this plan
    with tx.lock(f"up {resolved.name}"):
        # A journal of another transaction must be settled first; one of an `up` of this profile that was
        # killed is settled here: its container never passed the gate and is replaced below.
        own_journal = refuse_if_unfinished(ctx.state_dir, up_of=resolved.name)
        # an engine that does not answer fails here, on the first listing (preflight asks it again later)
        current = tx.ctx.runtime.services(probe=False)
        running = _already_running(resolved, current)
        if running is not None:
            if own_journal is not None:
                clear_journal(ctx.state_dir)
            return UpResult(action="already-running", service=running, url=running.url)
        tx.prove_state_writable(profiles=[resolved.name])  # before anything changes
        removed, notes = _clear_own_leftovers(resolved, current, tx)
        ctx.runtime.ensure_image(resolved, on_phase=opts.on_phase)  # once, before preflight
        check_start(
            resolved,
            docker=ctx.docker,
            gpus=ctx.gpus,
            host=ctx.probe,
            context=StartContext(services=running_refs(current)),  # none may hold the port or a card
            skip=skip,
            history=ctx.history,
            on_report=opts.on_report,
        )
        with GatewayHold(ctx.state_dir, ctx.history, profiles=[resolved.name], reason=f"up {resolved.name}"):
            started = _start_recorded(resolved, tx=tx, on_phase=opts.on_phase)
            started = first_start(tx, started, resolved)  # a warm one's fingerprint (and prime) before admission
    return UpResult("started", started.service, started.url, started.gate, tuple(removed), tuple(notes))


def _already_running(resolved: Resolved, current: Sequence[ServiceInfo]) -> ServiceInfo | None:
    """The profile's service that passed its gate with the same plan; another plan is a conflict."""
    for svc in current:
        if svc.profile == resolved.name and svc.running and svc.state in ("ready", "unhealthy"):
            if svc.plan_hash == resolved.plan.plan_hash:
                return svc
            raise ServiceConflict(
                f"{resolved.name} already runs with plan {svc.plan_hash}, "
                "but the profile now compiles to "
                f"{resolved.plan.plan_hash}: use servectl swap {resolved.name} to replace it"
            )
    return None


def _clear_own_leftovers(
    resolved: Resolved, current: Sequence[ServiceInfo], tx: TxContext
) -> tuple[list[str], list[str]]:
    """Remove the profile's containers (and any under its container name) that never passed their gate or
    exited: (names removed, notes)."""
    gone = remove_unproven(tx, profile=resolved.name, container_name=resolved.plan.docker.name, among=current)
    notes = [
        f"{svc.container_name} never passed its health gate (servectl was stopped while it started): replaced it"
        for svc in gone
        if svc.running
    ]
    return [svc.container_name for svc in gone], notes


def _start_recorded(
    resolved: Resolved,
    *,
    tx: TxContext,
    on_phase: Callable[[Progress], None] | None,
) -> StartResult:
    """``up``'s start, all-or-nothing: the service passes the gate *and* is recorded, or nothing is left.

    A journal marks the start (a ``kill -9`` leaves it for ``servectl recover`` or the next ``up``);
    SIGINT/SIGTERM/SIGHUP undo it (the transaction's one undo) and raise :class:`UpInterrupted`; a failed
    history write after the gate removes the container too (an unrecorded service is a service nobody knows
    about). When the undo cannot verify the container is gone (the engine went away), the journal stays so
    ``servectl recover`` finishes it, and the message says only what is known.
    """
    plan = resolved.plan
    journal = SwapJournal(
        pid=os.getpid(),
        from_profile=None,
        to_profile=resolved.name,
        phase="start-target",
        started_at=tx.ctx.clocks.wall(),
        kind="up",
        target_container=plan.docker.name,
    )
    write_journal(tx.ctx.state_dir, journal)
    started: StartResult | None = None
    with tx.signals:
        try:
            started = tx.ctx.runtime.start(resolved=resolved, on_phase=on_phase)
            tx.settle()  # it passed the gate: finish the bookkeeping whatever arrives now
            tx.ctx.history.record(
                {
                    "event": "up",
                    "profile": resolved.name,
                    "plan_hash": plan.plan_hash,
                    "container_id": started.service.container_id,
                    "container_name": started.service.container_name,
                    "startup_s": round(started.startup_s, 3),
                }
            )
        except StartupFailed as err:
            clear_journal(tx.ctx.state_dir)
            tx.record({"event": "failed", "profile": resolved.name, "plan_hash": plan.plan_hash, "reason": err.message})
            raise
        except Interrupt as intr:
            tx.settle()  # the undo of the start must finish
            gone, outcome = _undo_up(journal, tx, started)
            outcome = "what it started was removed; nothing of it runs" if gone else outcome
            tx.record({"event": "interrupted", "profile": resolved.name, "signal": signal_name(intr.signum)})
            raise UpInterrupted(
                f"interrupted ({signal_name(intr.signum)}) while {resolved.name} was starting; {outcome}"
            ) from None
        except BaseException as err:
            # servectl itself failed (a bug, a failed state write, the engine gone) after or while starting:
            # remove what runs unrecorded, keep nothing half-done, say what is known.
            tx.settle()
            gone, outcome = _undo_up(journal, tx, started)
            outcome = "it was removed, nothing of it runs" if gone else outcome
            if not isinstance(err, Exception) or (started is None and gone and isinstance(err, ServectlError)):
                raise  # Ctrl-C without our handlers, or a clear error before anything ran: as it is
            reason = err.lines()[0] if isinstance(err, ServectlError) else f"{type(err).__name__}: {err}"
            raise ServectlError(
                f"{resolved.name} {'passed its health gate' if started else 'was starting'}, but servectl failed: "
                f"{reason}; {outcome}"
            ) from err
    clear_journal(tx.ctx.state_dir)
    return started


def _undo_up(journal: SwapJournal, tx: TxContext, started: StartResult | None) -> tuple[bool, str]:
    """Undo an ``up`` that did not finish: (whether nothing of it is verified to be left, else what to do)."""
    try:
        if started is not None:  # it passed its gate but was never recorded: it goes too
            tx.stop(started.service)
            GateRecord(tx.ctx.state_dir).forget(started.service.container_id)
        undo(journal, tx)
    except ServectlError as err:
        return False, (
            f"could not make sure {journal.target_container} is gone ({err.lines()[0]}); once Docker answers, "
            f"`servectl recover` removes it (or `docker rm -f {journal.target_container}`)"
        )
    return True, ""


@dataclass(frozen=True)
class DownOptions:
    """How ``down`` runs.

    Attributes:
        lock_timeout_s: wait for another servectl process; default the context's.
        free_deadline_s: how long each stop waits for the service's cards to be free.
    """

    lock_timeout_s: float | None = None
    free_deadline_s: float = CARDS_FREE_DEADLINE_S


def down(ctx: Context, *, name: str | None, opts: DownOptions | None = None) -> DownResult:
    """Stop the service of profile ``name`` (or the only service when ``name`` is None).

    Each stop waits until the service's cards are free on :attr:`~servectl.service.context.Context.gpus`.
    Once no servectl service runs any more, the conflicts a swap stopped start again (see
    :func:`restore_after_down`).

    Returns:
        The containers stopped (none when the profile was not running) and the conflicts restored.

    Raises:
        UsageError: no ``name`` while several services run, or ``name`` is neither a service nor a profile.
        LockTimeout: another servectl process is changing services.
    """
    opts = opts or DownOptions()
    state = ctx.state_dir
    with ctx.lock(f"down {name or ''}".strip(), timeout_s=opts.lock_timeout_s):
        found = ctx.runtime.services(probe=False)
        targets = found if name is None else [s for s in found if name in (s.profile, s.container_name)]
        if name is None and len(targets) > 1:
            names = ", ".join(sorted({s.profile for s in targets}))
            raise UsageError(
                f"several services run ({names}): name the one to stop, e.g. servectl down {targets[0].profile}"
            )
        if name is not None and not targets:
            _require_known_profile(name, ctx.profile_folders)
            return DownResult(stopped=())
        with GatewayHold(
            state,
            ctx.history,
            profiles=[s.profile for s in targets],
            reason=f"down {name or ', '.join(s.profile for s in targets)}",
        ):
            results = [
                ctx.runtime.stop(service=svc, gpus=ctx.gpus, free_deadline_s=opts.free_deadline_s) for svc in targets
            ]
        for result in results:
            ctx.history.record(
                {
                    "event": "down",
                    "profile": result.profile,
                    "container_name": result.container_name,
                    "forced": result.forced,
                    "leaked_pids": list(result.leaked_pids),
                    "unknown_cards": list(result.unknown_cards),
                }
            )
    if not results:
        return DownResult(stopped=())
    # outside the lock, as before: restoring reads the services again and starts foreign containers
    try:
        restored = restore_after_down(ctx)
    except StateDamaged as err:  # the service is down; only the record of what to restore is unreadable
        return DownResult(stopped=tuple(results), warning=err.message)
    return DownResult(stopped=tuple(results), restored=restored)


def _require_known_profile(name: str, folders: Sequence[ProfileFolder]) -> None:
    from servectl.profile.loader import discover

    if name not in discover(folders):
        raise UsageError(f"no servectl service and no profile named {name}; servectl status lists the services")


def restore_after_down(ctx: Context) -> RestoreOutcome | None:
    """After ``down``: once no servectl service runs, start again every conflict servectl stopped.

    Returns:
        What was restored (``None``: nothing recorded, or a servectl service still runs).
    """
    from servectl.adapters.conflicts import load_stopped, restore_recorded

    if not load_stopped(ctx.state_dir):
        return None
    running = ctx.runtime.services(probe=False)
    if any(s.state in ALIVE_STATES for s in running):
        return None
    return restore_recorded(handler=ctx.conflicts, state_dir=ctx.state_dir)
