"""``swap``: change the running service all-or-nothing, with measured downtime (the transaction).

Two cards cannot hold two of these models, so a swap is stop-then-start, made a transaction. The user ends
with one of:

* the target proven up (it passed the health gate): :class:`SwapResult` with ``outcome="swapped"``;
* the target failed, the previous service is back and proven up: :class:`SwapRolledBack` (exit 4);
* both failed: nothing of servectl runs, the cards are free: :class:`SwapFailed` (exit 5).

Steps, all under the state lock: validate and compile the target; make sure its image is there; preflight
it counting the current service's cards and port as about to be freed; stage it (image pin, argv in the image,
weights read ahead into the page cache: :mod:`servectl.service.stage`); stop the current service
(SIGTERM, then SIGKILL) and wait until its cards are free; stop declared conflicts; start the target
through the health gate. On failure: keep the target's last log lines and exit code, make sure it is
removed, start the previous profile again through the same gate, restore the conflicts this swap stopped,
and raise. Conflicts stay stopped after a successful swap (``down`` restores them, see
:func:`servectl.adapters.conflicts.restore_recorded`).

SIGINT/SIGTERM take an orderly path: before anything changed, servectl just stops (exit 130); once the old
service is being stopped, the target (if any) is removed and the previous service restored (exit 4,
"interrupted"); a signal while restoring stops the waiting and leaves a journal
(:func:`servectl.service.journal.read_journal`) that says what runs and what to run next. A signal after the
target passed the gate does not undo the swap (:mod:`servectl.signals`). ``rollback`` and
``rollback-check`` live in :mod:`servectl.service.rollback`.

This module only sequences the steps. They are methods of the swap's one transaction object,
:class:`~servectl.service.swap_tx.SwapTx` (its journal, its phases, the conflicts it stopped, what a signal does
at each step, each profile resolved once), of the warm standby (:mod:`servectl.service.standby`) and of the
runtime. The way back is the transaction core's one undo (:func:`servectl.service.transaction.undo.undo`, shared
with ``recover``, ``rollback`` and ``up``), reached through :meth:`SwapTx.fail_back`; the check before anything
stops is :mod:`servectl.service.swap_preflight`.
Side effects come in through the small interfaces of the host's
:class:`~servectl.service.context.Context` (the runtime, conflicts, the lock, the history), which the swap opens
a :class:`~servectl.service.transaction.context.TxContext` over, and through the preflight of its
:class:`SwapOptions`; so the transaction is tested with fakes (:mod:`servectl.testing.swap`) and on the real
engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servectl.adapters.conflicts import load_stopped
from servectl.adapters.gateway_admin import GatewayHold
from servectl.errors import ProfileTemplate, ServectlError, SwapInterrupted, UsageError
from servectl.service.context import Context
from servectl.service.health import Progress
from servectl.service.journal import refuse_if_unfinished
from servectl.service.services import ALIVE_STATES, ServiceInfo
from servectl.service.stage import Stager
from servectl.service.standby import (
    expected_swap_s,
    first_start,
    prepare_release,
    release_or_stop,
    resume_or_cold_start,
)
from servectl.service.swap_preflight import Preflight, overlaps, profile_preflight, replacing_of
from servectl.service.swap_tx import SwapTx, Timings
from servectl.service.transaction.context import TxContext
from servectl.service.transaction.model import (
    LOG_LINE_CHARS,
    LOG_TAIL_LINES,
    Outcome,
    PhaseEvent,
    PhaseTiming,
    SwapResult,
    TargetFailure,
    failure_of,
)
from servectl.signals import Abandon, Interrupt, SignalGuard, signal_name

if TYPE_CHECKING:
    from servectl.adapters.engine_image import ParseMemo
    from servectl.plan.resolve import Resolved
    from servectl.preflight.model import PreflightReport
    from servectl.service.container import StartResult

__all__ = [  # the swap's public names; the types live in servectl.service.transaction.model
    "LOG_LINE_CHARS",
    "LOG_TAIL_LINES",
    "Outcome",
    "PhaseEvent",
    "PhaseTiming",
    "Preflight",
    "SwapOptions",
    "SwapResult",
    "TargetFailure",
    "overlaps",
    "profile_preflight",
    "replacing_of",
    "swap",
]


@dataclass(frozen=True)
class SwapOptions:
    """How ``swap`` and ``rollback`` run (every default is servectl's own).

    Attributes:
        force: preflight check ids to skip (``--force CHECK-ID``).
        on_phase: called as each phase begins and ends, and with the target's startup progress.
        on_report: gets the target's full preflight report (warnings, skipped checks) before a failure.
        preflight: checks the target before anything stops; default :func:`profile_preflight` on the
            context's state folder and host probe.
        lock_timeout_s: how long to wait for another servectl; default the context's.
        handle_signals: turn SIGINT/SIGTERM into the orderly path (main thread only).
        stage: stages the target before anything stops (image and pin, argv in the image, weights read ahead:
            :func:`servectl.service.stage.stager`); ``None``: no staging (``Host.swap`` stages unless told not to).
    """

    force: tuple[str, ...] = ()
    on_phase: Callable[[PhaseEvent], None] | None = None
    on_report: Callable[[PreflightReport], None] | None = None
    preflight: Preflight | None = None
    lock_timeout_s: float | None = None
    handle_signals: bool = True
    stage: Stager | None = None


def swap(ctx: Context, *, target: str | None, opts: SwapOptions | None = None) -> SwapResult:
    """Replace the running service with ``target``, all-or-nothing.

    Args:
        ctx: the adapters and state (:class:`servectl.service.context.Context`); its stops wait on
            :attr:`~servectl.service.context.Context.gpus`.
        target: profile to run; ``None``: the running profile's ``rollback:``.
        opts: :class:`SwapOptions`.

    Returns:
        ``swapped``, ``started`` (nothing ran before) or ``noop`` (the target already runs).

    Raises:
        UsageError, ProfileError: bad target; nothing changed.
        PreflightFailed: the target could not start; nothing changed.
        LockTimeout: another servectl holds the lock; nothing changed.
        StartupFailed: nothing ran before and the target failed; nothing runs, conflicts restored.
        SwapRolledBack: the target failed (or the swap was interrupted); the previous service is back.
        SwapFailed: the target failed and so did the previous service; nothing runs.
        SwapInterrupted: interrupted before anything changed, or a signal stopped the restoring.
    """
    opts = opts or SwapOptions()
    return run_swap(open_swap(ctx, opts, kind="swap"), target=target, opts=opts)


def open_swap(ctx: Context, opts: SwapOptions, *, kind: str) -> SwapTx:
    """The transaction of one :func:`swap` (``kind`` ``swap``) or ``rollback`` over ``ctx``: run it with
    :func:`run_swap`; a profile it resolves before (``rollback``'s drift note) is resolved once for both."""
    guard = SignalGuard(opts.handle_signals)
    tx = TxContext.of(ctx, on_phase=opts.on_phase, lock_timeout_s=opts.lock_timeout_s, signals=guard)
    return SwapTx(tx=tx, kind=kind, skip=frozenset(opts.force))


def run_swap(swap_tx: SwapTx, *, target: str | None, opts: SwapOptions) -> SwapResult:
    """:func:`swap` on the transaction ``tx`` (:func:`open_swap`), under its signal guard and the state lock."""
    check = opts.preflight or profile_preflight(
        history=swap_tx.tx.ctx.history, host=swap_tx.tx.ctx.probe, on_report=opts.on_report
    )
    return _guarded(swap_tx, check, target, opts.stage)


def _guarded(swap_tx: SwapTx, check: Preflight, target: str | None, stage: Stager | None) -> SwapResult:
    """Run the swap under the signal guard and the state lock."""
    with swap_tx.tx.signals:
        try:
            with swap_tx.tx.phase("lock"):  # the wait for another servectl, if any
                held = swap_tx.tx.lock(f"{swap_tx.kind} {target or '(rollback target)'}")
                held.__enter__()
            try:
                return _run_locked(swap_tx, check, target, stage)
            finally:
                held.__exit__(None, None, None)
        except Interrupt as intr:  # later ones are handled inside, where something has changed
            raise SwapInterrupted(
                f"interrupted ({signal_name(intr.signum)}) before anything changed; "
                "whatever ran still runs (`servectl status`)",
                signum=intr.signum,
            ) from None


@dataclass(frozen=True)
class _Found:
    """What the validate step found under the lock: the target, what runs, what the target replaces, the stopped
    containers in its way, and the target itself when it waits on warm standby (resumed, not started)."""

    resolved: Resolved
    running: list[ServiceInfo]
    current: ServiceInfo | None
    leftovers: list[ServiceInfo]
    waiting: ServiceInfo | None

    def beside(self) -> list[str]:
        """The servectl services that run beside the swap (it never touches them)."""
        skip = [*self.leftovers, self.current]
        return [s.profile for s in self.running if s.state in ALIVE_STATES and s not in skip]


def _run_locked(swap_tx: SwapTx, check: Preflight, target: str | None, stage: Stager | None) -> SwapResult:
    """The steps under the lock: nothing changes before :meth:`SwapTx.begin`; after it, :func:`_transact`."""
    # We hold the lock, so a journal left here belongs to a transaction that is gone: it is settled by
    # `servectl recover` (which knows what ran before), never silently dropped.
    refuse_if_unfinished(swap_tx.tx.ctx.state_dir)
    found = _validate(swap_tx, target)
    if isinstance(found, SwapResult):
        return found  # the target already runs
    with swap_tx.tx.phase("image", found.resolved.plan.docker.image):
        # Before anything stops: building the stand-in (or finding the image missing) costs no downtime.
        swap_tx.tx.ctx.runtime.ensure_image(found.resolved, on_phase=swap_tx.tx.progress("image"))
    from servectl.adapters.engine_image import ParseMemo

    parses = ParseMemo()  # preflight's engine.parse and the staging ask the image once between them
    _preflight(swap_tx, found, check, parses)
    if stage is not None and found.waiting is None:  # a standby target is resumed: nothing to read from disk
        _stage(swap_tx, found.resolved, stage, parses)
    swap_tx.begin(found.resolved, found.current, untouched=found.beside())
    with _gateway_hold(swap_tx, found):
        return _transact(swap_tx, found.leftovers, found.waiting)


def _validate(swap_tx: SwapTx, target: str | None) -> _Found | SwapResult:
    """The target resolved (the running profile's ``rollback:`` when none is named) and what stands in its way;
    the ``noop`` result when it already runs."""
    with swap_tx.tx.phase("validate"):
        running = list(swap_tx.tx.ctx.runtime.services(probe=True))
        if target is None:
            target = _default_target(running, swap_tx.tx.resolve)
        resolved = _resolve_target(target, swap_tx.tx.resolve)
        current, leftovers = _in_the_way(resolved, running)
        # Only a service that passed its gate counts as running: one still "starting" under our lock was left
        # by a servectl that is gone, and is replaced.
        if current is not None and current.profile == resolved.name and current.state == "ready":
            return _noop(swap_tx, resolved, current)
    waiting = next((s for s in running if s.profile == resolved.name and s.state == "standby"), None)
    return _Found(resolved, running, current, leftovers, waiting)


def _preflight(swap_tx: SwapTx, found: _Found, check: Preflight, parses: ParseMemo) -> None:
    """Before anything stops: the state folder takes every write the swap (and its undo) needs, the conflicts
    can be stopped, and the target could start with the service it replaces counted as gone."""
    tx, resolved, current = swap_tx.tx, found.resolved, found.current
    with tx.phase("preflight"):
        load_stopped(tx.ctx.state_dir)  # a damaged record of stopped conflicts stops the swap before any change
        # every state write the transaction (and its undo) needs is possible before the old service stops
        tx.prove_state_writable(profiles=[resolved.name, *([current.profile] if current is not None else [])])
        tx.ctx.conflicts.check_available(resolved.loaded.profile.conflicts)
        if found.waiting is None:  # a standby target already holds its name, port and cards: resumed, not started
            check(resolved=resolved, replacing=current, skip=swap_tx.skip, docker=tx.ctx.docker, gpus=tx.gpus,
                  running=found.running, parses=parses)  # fmt: skip


def _gateway_hold(swap_tx: SwapTx, found: _Found) -> GatewayHold:
    """The running gateway holds the requests for every profile the swap changes, expecting the measured
    release + resume (or start) as its ``Retry-After``."""
    resolved, current = found.resolved, found.current
    changed = [resolved.name, *(s.profile for s in (current, *found.leftovers) if s is not None)]
    reason = f"{swap_tx.kind} {current.profile if current else 'nothing'} -> {resolved.name}"
    expect = expected_swap_s(swap_tx.tx, current, resolved.name, found.waiting)
    return GatewayHold(
        swap_tx.tx.ctx.state_dir,
        swap_tx.tx.ctx.history,
        profiles=changed,
        reason=reason,
        target=resolved.name,
        expect_s=expect,
    )


def _stage(swap_tx: SwapTx, resolved: Resolved, stage: Stager, parses: ParseMemo) -> None:
    """Before the stop and the gateway's hold: what the target's start would otherwise wait for (downtime)."""
    with swap_tx.tx.phase("stage", resolved.name):
        progress = swap_tx.tx.progress("stage")
        report = stage(
            resolved=resolved, docker=swap_tx.tx.ctx.docker, skip=swap_tx.skip, on_progress=progress, parses=parses
        )
        progress(Progress("staged", report.summary()))


def _in_the_way(resolved: Resolved, running: Sequence[ServiceInfo]) -> tuple[ServiceInfo | None, list[ServiceInfo]]:
    """The running service the target replaces (or None), and the stopped containers in its way."""
    blocking = [s for s in running if overlaps(s, resolved) and s.state in ALIVE_STATES]
    # Containers that stand in the way but do not run (exited, created) are removed before the start; a warm
    # standby (its memory released) is in nobody's way, and a swap to its profile resumes it.
    leftovers = [s for s in running if overlaps(s, resolved) and s.state not in (*ALIVE_STATES, "standby")]
    if len(blocking) > 1:
        names = ", ".join(f"{s.profile} ({s.container_name})" for s in blocking)
        raise UsageError(
            f"{resolved.name} would replace {len(blocking)} services ({names}); "
            "stop all but one with `servectl down NAME` first"
        )
    return (blocking[0] if blocking else None), leftovers


def _noop(swap_tx: SwapTx, resolved: Resolved, current: ServiceInfo) -> SwapResult:
    message = f"{resolved.name} already runs ({current.container_name}, {current.state}); nothing to do"
    if current.plan_hash != resolved.plan.plan_hash:
        message += (
            f"; its running plan {current.plan_hash} differs from the profile's plan "
            f"{resolved.plan.plan_hash} now - `servectl down {resolved.name}` then "
            f"`servectl up {resolved.name}` applies it"
        )
    return swap_tx.result(from_profile=current.profile, to_profile=resolved.name, outcome="noop", message=message)


def _resolve_target(target: str, resolve: Callable[[str], Resolved]) -> Resolved:
    """The target, or a refusal that says how to write its profile when it has none yet.

    A missing target is often a service that already runs but was started by hand (the EXL3 rollback of
    glm53-393k): ``servectl adopt`` writes its profile. A template's own message says the same.
    """
    try:
        return resolve(target)
    except ProfileTemplate:
        raise
    except UsageError as err:
        if "not found" not in err.message:
            raise
        raise UsageError(
            f"{err.message}; if {target} is a service you already run, write its profile from the container: "
            f"servectl adopt <container> --name {target}"
        ) from None


def _default_target(running: Sequence[ServiceInfo], resolve: Callable[[str], Resolved]) -> str:
    alive = [s for s in running if s.state in ALIVE_STATES]
    if not alive:
        raise UsageError("no servectl service runs, so there is no rollback target; name one: `servectl swap NAME`")
    if len(alive) > 1:
        names = ", ".join(s.profile for s in alive)
        raise UsageError(f"several services run ({names}); name the target: `servectl swap NAME`")
    current = resolve(alive[0].profile)
    if current.loaded.profile.rollback is None:
        raise UsageError(
            f"{current.name} declares no `rollback:` target in {current.loaded.file.path}; "
            "name the target: `servectl swap NAME`"
        )
    return current.loaded.profile.rollback


def _transact(swap_tx: SwapTx, leftovers: Sequence[ServiceInfo], waiting: ServiceInfo | None) -> SwapResult:
    """Stop (or release, :mod:`servectl.service.standby`) the current service, stop conflicts, start (or
    resume, when ``waiting`` is the target on standby) the target; on any failure, undo."""
    tx, resolved, current = swap_tx.tx, swap_tx.resolved_target(), swap_tx.current
    step = "begin"
    try:
        # A warm standby's answer and idle engine, before anything changes: a refusal here leaves it serving.
        prepared = prepare_release(tx, current) if current is not None else None
        swap_tx.at("stop-old")
        if current is not None:
            with tx.phase("stop-old", current.container_name):
                step = "stop-old"
                swap_tx.timings = Timings(down_since=tx.ctx.clocks.monotonic())
                stopped = release_or_stop(tx, current, resolved, mark=swap_tx.mark_standby, prepared=prepared)
            swap_tx.timings = Timings(swap_tx.timings.down_since, stopped.stop_s, stopped.forced, stopped.released)
            if stopped.leaked_pids:
                pids = ", ".join(str(p) for p in stopped.leaked_pids)
                raise ServectlError(f"the cards are still in use after {current.profile} stopped (pids {pids})")
        if leftovers:
            with tx.phase("remove-leftovers", ", ".join(s.container_name for s in leftovers)):
                step = "remove-leftovers"
                for leftover in leftovers:
                    tx.stop(leftover)
        if resolved.loaded.profile.conflicts:
            swap_tx.at("stop-conflicts")
            with tx.phase("stop-conflicts"):
                step = "stop-conflicts"
                swap_tx.stop_conflicts()
        swap_tx.at("start-target")
        with tx.phase("start-target", resolved.name):
            step = "start-target"
            started = _start_target(swap_tx, waiting)
            tx.settle()  # it passed the gate: finish the bookkeeping whatever arrives now
        up_at = tx.ctx.clocks.monotonic()
    except Exception as err:  # a ServectlError, or a bug: either way the old service must come back
        tx.enter_restore()
        swap_tx.fail_back(_failure_during(step, swap_tx, err), None, err)
    except Interrupt as intr:
        if step == "begin":  # nothing was touched yet
            swap_tx.untouched_interrupt(intr.signum)
        swap_tx.fail_back(
            TargetFailure(resolved.name, f"interrupted ({signal_name(intr.signum)}) during {step}"), intr.signum
        )
    except Abandon as abandon:  # a second signal while the runtime was cleaning up the target
        failure = TargetFailure(resolved.name, f"interrupted ({signal_name(abandon.signum)}) during {step}")
        swap_tx.abandon(failure, f"stopped waiting after {signal_name(abandon.signum)}", signum=abandon.signum)
    return swap_tx.finish(started, up_at)


def _start_target(swap_tx: SwapTx, waiting: ServiceInfo | None) -> StartResult:
    """Resume the target from its warm standby, or start it (a warm profile's fingerprint is taken, and with
    ``standby_prime`` its first release paid, now)."""
    tx, resolved = swap_tx.tx, swap_tx.resolved_target()
    if waiting is not None:
        return resume_or_cold_start(tx, waiting, resolved, mark=swap_tx.mark_standby)
    return first_start(tx, tx.ctx.runtime.start(resolved=resolved, on_phase=tx.progress("start-target")), resolved)


def _failure_during(step: str, swap_tx: SwapTx, err: Exception) -> TargetFailure:
    """The target's failure, or (before its start) the step that failed, so it was not started."""
    resolved = swap_tx.resolved_target()
    failure = failure_of(resolved.name, err)
    if step == "start-target":
        return failure
    from_profile = swap_tx.current.profile if swap_tx.current is not None else None
    what = {
        "begin": f"preparing the release of {from_profile}",
        "stop-old": f"stopping {from_profile}",
        "remove-leftovers": "removing the stopped containers in its way",
    }.get(step, f"stopping the conflicts of {resolved.name}")
    return TargetFailure(resolved.name, f"{what} failed, so {resolved.name} was not started: {failure.message}")
