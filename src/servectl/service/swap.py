"""``swap``: change the running service all-or-nothing, with measured downtime (the transaction).

Two cards cannot hold two of these models, so a swap is stop-then-start, made a transaction. The user ends
with one of:

* the target proven up (it passed the health gate): :class:`SwapResult` with ``outcome="swapped"``;
* the target failed, the previous service is back and proven up: :class:`SwapRolledBack` (exit 4);
* both failed: nothing of servectl runs, the cards are free: :class:`SwapFailed` (exit 5).

Steps, all under the state lock: validate and compile the target; make sure its image is there; preflight
it counting the current service's cards and port as about to be freed; stop the current service
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

Side effects come in through small interfaces (:class:`ServiceRuntime`, by default
:class:`servectl.service.runtime.DockerRuntime`; :class:`Preflight`,
:class:`~servectl.adapters.conflicts.ConflictHandler`, the lock, the history), so the transaction is tested
with fakes (:mod:`servectl.testing.swap`) and on the real engine.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from servectl.adapters.conflicts import (
    ConflictHandler,
    RestoreOutcome,
    StoppedConflict,
    conflict_key,
    load_stopped,
    record_stopped,
    restore_conflicts,
)
from servectl.adapters.gpu import wait_until_free
from servectl.adapters.state import HistoryLog
from servectl.errors import (
    ProfileTemplate,
    ServectlError,
    StartupFailed,
    SwapFailed,
    SwapInterrupted,
    SwapRolledBack,
    UsageError,
)
from servectl.service.health import Progress
from servectl.service.journal import (
    PreviousService,
    SwapJournal,
    clear_journal,
    refuse_if_unfinished,
    write_journal,
)
from servectl.service.runtime import CARDS_POLL_S, ServiceRuntime, StartResult, StopResult
from servectl.service.services import ALIVE_STATES, ServiceInfo, running_refs
from servectl.signals import Abandon, Interrupt, SignalGuard, signal_name

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.adapters.host import HostProbe
    from servectl.plan.resolve import Resolved
    from servectl.preflight.model import PreflightReport, Replacing


LOG_TAIL_LINES = 20
"""Lines of a failed service's log kept in the result and shown in the message."""
LOG_LINE_CHARS = 240
"""Longer log lines (SGLang prints all its server args on one) are cut in the message."""
CARDS_FREE_DEADLINE_S = 30.0


Outcome = Literal["swapped", "started", "noop", "rolled-back", "failed", "interrupted"]


class Preflight(Protocol):
    """Raises :class:`PreflightFailed` (or :class:`ServiceConflict`) when ``resolved`` could not start once
    ``replacing`` is stopped; ``running`` are the servectl services running now."""

    def __call__(
        self,
        *,
        resolved: Resolved,
        replacing: ServiceInfo | None,
        skip: frozenset[str],
        docker: DockerEngine,
        gpus: GpuInventory | None,
        running: Sequence[ServiceInfo] = (),
    ) -> None: ...


@dataclass(frozen=True)
class PhaseEvent:
    """Progress for the CLI: a phase ``begin``s, ``end``s (with its duration) or reports ``progress``."""

    phase: str
    kind: Literal["begin", "end", "progress"]
    duration_s: float | None = None
    ok: bool = True
    detail: str = ""
    step: str = ""  # with progress: the startup step (loading weights, capturing CUDA graphs, ...)


@dataclass(frozen=True)
class PhaseTiming:
    """One phase of a swap and how long it took."""

    phase: str
    duration_s: float
    ok: bool = True
    detail: str = ""


@dataclass(frozen=True)
class TargetFailure:
    """Why a service did not come up (the target, or the previous one on the way back)."""

    profile: str
    message: str
    last_log_lines: tuple[str, ...] = ()
    exit_code_of_container: int | None = None
    oom_killed: bool = False

    def describe(self) -> str:
        """One line: the reason, with the exit code when there is one."""
        extra = []
        if self.exit_code_of_container is not None and f"code {self.exit_code_of_container}" not in self.message:
            extra.append(f"container exit code {self.exit_code_of_container}")
        if self.oom_killed and "OOM" not in self.message:
            extra.append("killed for lack of memory (OOM)")
        return self.message + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class SwapResult:
    """What a swap did.

    Attributes:
        from_profile: the service that ran before (``None``: nothing ran).
        to_profile: the target.
        outcome: ``swapped``, ``started`` (nothing ran before), ``noop`` (target already runs),
            ``rolled-back``, ``failed`` or ``interrupted``.
        phases: each phase with its duration, in order.
        downtime_s: old service stops answering -> the new (or restored) one passes the gate.
        old_stop_s: how long stopping the old service took.
        target_startup_s: the target's start, container created -> gate passed.
        forced_stop: the old service ignored SIGTERM and was killed.
        stopped_conflicts: conflicts this swap stopped (still stopped when it succeeded).
        conflicts_restore: what restoring them did, after a failure.
        target_failure: why the target failed, when it did.
        previous_failure: why the previous service did not come back, when it did not.
        message: what happened and what to do.
    """

    from_profile: str | None
    to_profile: str
    outcome: Outcome
    phases: tuple[PhaseTiming, ...] = ()
    downtime_s: float | None = None
    old_stop_s: float | None = None
    target_startup_s: float | None = None
    forced_stop: bool = False
    stopped_conflicts: tuple[StoppedConflict, ...] = ()
    conflicts_restore: RestoreOutcome | None = None
    target_failure: TargetFailure | None = None
    previous_failure: TargetFailure | None = None
    message: str = ""

    def phase_s(self, phase: str) -> float | None:
        """Duration of the first phase with that name."""
        return next((p.duration_s for p in self.phases if p.phase == phase), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stopped_conflicts"] = [s.to_dict() for s in self.stopped_conflicts]
        return data


@dataclass
class PhaseMark:
    """Set ``failed`` inside a phase that handled its own failure, so it does not end as ``ok``."""

    failed: bool = False


def _failure_of(profile: str, err: Exception) -> TargetFailure:
    if not isinstance(err, ServectlError):
        return TargetFailure(profile, f"unexpected {type(err).__name__}: {err} (a servectl bug; please report it)")
    if isinstance(err, StartupFailed):
        # The runtime's wording starts with the profile and ends with the removal; the swap says both itself.
        message = err.message.removeprefix(f"{profile}: ").removesuffix("; the container was removed")
        return TargetFailure(
            profile=profile,
            message=message,
            last_log_lines=tuple(err.last_log_lines[-LOG_TAIL_LINES:]),
            exit_code_of_container=err.exit_code_of_container,
            oom_killed=err.oom_killed,
        )
    return TargetFailure(profile=profile, message=err.message)


def overlaps(service: ServiceInfo, resolved: Resolved) -> bool:
    """Whether ``service`` stands in the way of ``resolved``: same profile, container name, port or a card."""
    plan = resolved.plan
    target_gpus = {int(d) for d in plan.docker.device_ids if d.isdigit()}
    return (
        service.profile == plan.profile
        or service.container_name == plan.docker.name
        or (service.port is not None and service.port == resolved.loaded.profile.serve.port)
        or bool(target_gpus & set(service.gpus))
    )


def _indent(lines: Iterable[str]) -> str:
    return "\n".join("    " + line for line in lines)


def _log_tail(failure: TargetFailure) -> str:
    if not failure.last_log_lines:
        return ""
    lines = [
        line if len(line) <= LOG_LINE_CHARS else line[: LOG_LINE_CHARS - 3] + "..." for line in failure.last_log_lines
    ]
    return f"\n  last log lines of {failure.profile}:\n{_indent(lines)}"


def default_runtime() -> ServiceRuntime:
    from servectl.service.runtime import DockerRuntime

    return DockerRuntime()


@dataclass
class _Deps:
    docker: DockerEngine
    gpus: GpuInventory | None
    runtime: ServiceRuntime
    preflight: Preflight
    conflicts: ConflictHandler
    resolve: Callable[[str], Resolved]
    history: HistoryLog
    lock: Callable[[str], AbstractContextManager[object]]
    state_dir: Path
    scope: Mapping[str, str] | None
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    sleep: Callable[[float], None]
    on_phase: Callable[[PhaseEvent], None] | None

    def services(self, *, probe: bool) -> list[ServiceInfo]:
        return list(
            self.runtime.services(
                docker=self.docker, probe=probe, plan_hash_of=None, state_dir=self.state_dir, scope=self.scope
            )
        )

    def stop(self, service: ServiceInfo) -> StopResult:
        return self.runtime.stop(service=service, docker=self.docker, gpus=self.gpus, state_dir=self.state_dir)

    def emit(self, event: PhaseEvent) -> None:
        if self.on_phase is not None:
            with suppress(Exception):  # rendering must never break the transaction
                self.on_phase(event)


@dataclass
class _Swap:
    """One swap's bookkeeping; the steps are the module functions below."""

    deps: _Deps
    kind: str  # "swap" or "rollback", for the history
    skip: frozenset[str]
    signals: SignalGuard
    phases: list[PhaseTiming] = field(default_factory=list)
    stopped: list[StoppedConflict] = field(default_factory=list)
    journal: SwapJournal | None = None

    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[PhaseMark]:
        d = self.deps
        d.emit(PhaseEvent(name, "begin", detail=detail))
        began = d.clock()
        ok = False
        mark = PhaseMark()
        try:
            yield mark
            ok = not mark.failed
        finally:
            timing = PhaseTiming(name, d.clock() - began, ok, detail)
            self.phases.append(timing)
            d.emit(PhaseEvent(name, "end", timing.duration_s, ok, detail))

    def progress(self, phase: str) -> Callable[[Progress], None]:
        """The runtime's start progress, forwarded as ``progress`` events."""

        def forward(progress: Progress) -> None:
            parts = [progress.phase]
            if progress.percent is not None:
                parts.append(f"{progress.percent}%")
            if progress.detail:
                parts.append(progress.detail)
            self.deps.emit(PhaseEvent(phase, "progress", detail=" ".join(parts), step=progress.phase))

        return forward

    def set_journal(self, phase: str, note: str = "") -> None:
        assert self.journal is not None
        self.journal = replace(self.journal, phase=phase, stopped_conflicts=tuple(self.stopped), note=note)
        write_journal(self.deps.state_dir, self.journal)

    def record(self, event: dict[str, Any]) -> None:
        with suppress(ServectlError, OSError):  # the services are already right; history is a record
            self.deps.history.record(event)

    def result_event(self, result: SwapResult) -> dict[str, Any]:
        event: dict[str, Any] = {
            "event": self.kind if result.outcome in ("swapped", "started") else "swap-failed",
            "kind": self.kind,
            "profile": result.to_profile,
            "replaced": result.from_profile,
            "outcome": result.outcome,
            "downtime_s": None if result.downtime_s is None else round(result.downtime_s, 3),
            "old_stop_s": None if result.old_stop_s is None else round(result.old_stop_s, 3),
            "forced_stop": result.forced_stop,
            "phases": {p.phase: round(p.duration_s, 3) for p in result.phases},
            "stopped_conflicts": [s.to_dict() for s in result.stopped_conflicts],
        }
        if result.target_failure:
            event["reason"] = result.target_failure.describe()
        if result.previous_failure:
            event["previous_reason"] = result.previous_failure.describe()
        return event

    def stop_conflicts(self, resolved: Resolved) -> None:
        for spec in resolved.loaded.profile.conflicts:
            kind, ref = conflict_key(spec)
            if any((s.kind, s.ref) == (kind, ref) for s in self.stopped):
                continue
            stopped = self.deps.conflicts.stop(spec, stopped_by=resolved.name)
            if stopped is not None:
                self.stopped.append(stopped)
                record_stopped(self.deps.state_dir, stopped)  # before anything else can go wrong
                self.set_journal("stop-conflicts")

    def restore_stopped(self) -> RestoreOutcome | None:
        if not self.stopped:
            return None
        with self.phase("restore-conflicts", ", ".join(s.label() for s in self.stopped)):
            return restore_conflicts(self.stopped, handler=self.deps.conflicts, state_dir=self.deps.state_dir)

    def result(self, **kwargs: Any) -> SwapResult:
        return SwapResult(phases=tuple(self.phases), stopped_conflicts=tuple(self.stopped), **kwargs)


def swap(
    *,
    target: str | None,
    docker: DockerEngine,
    gpus: GpuInventory | None = None,
    preflight: Preflight | None = None,
    on_phase: Callable[[PhaseEvent], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    force: Iterable[str] = (),
    scope: Mapping[str, str] | None = None,
    state_dir: Path | None = None,
    lock_timeout_s: float | None = None,
    runtime: ServiceRuntime | None = None,
    conflicts: ConflictHandler | None = None,
    resolve_profile: Callable[[str], Resolved] | None = None,
    history: HistoryLog | None = None,
    lock: Callable[[str], AbstractContextManager[object]] | None = None,
    handle_signals: bool = True,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    _kind: str = "swap",
) -> SwapResult:
    """Replace the running service with ``target``, all-or-nothing.

    Args:
        target: profile to run; ``None``: the running profile's ``rollback:``.
        docker: the Docker engine (:class:`servectl.adapters.docker.DockerEngine`).
        gpus: GPU inventory; with it, stopping waits until the old service's cards are free.
        preflight: checks the target before anything stops; default :func:`profile_preflight`.
        on_phase: called as each phase begins and ends, and with the target's startup progress.
        clock: monotonic clock for the timings.
        force: preflight check ids to skip (``--force CHECK-ID``).
        scope: only services whose containers carry these labels count (tests use a session label).
        state_dir: state folder (lock, history, journal, stopped conflicts); default from the environment.
        lock_timeout_s: how long to wait for another servectl; default ``SERVECTL_LOCK_TIMEOUT_S`` or 10 s.
        runtime, conflicts, resolve_profile, history, lock: injected for tests; defaults are
            :mod:`servectl.service.runtime`, :class:`~servectl.adapters.conflicts.DockerConflicts`,
            :func:`servectl.plan.resolve.resolve`, and the state folder's history and lock.
        handle_signals: turn SIGINT/SIGTERM into the orderly path (main thread only).
        wall_clock: epoch seconds for the journal and history.
        sleep: pause while waiting for the cards (tests pass one that moves their clock).

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
    deps = _build_deps(
        docker=docker,
        gpus=gpus,
        preflight=preflight,
        on_phase=on_phase,
        clock=clock,
        scope=scope,
        state_dir=state_dir,
        lock_timeout_s=lock_timeout_s,
        runtime=runtime,
        conflicts=conflicts,
        resolve_profile=resolve_profile,
        history=history,
        lock=lock,
        wall_clock=wall_clock,
        sleep=sleep,
    )
    guard = SignalGuard(handle_signals)
    return _guarded(_Swap(deps=deps, kind=_kind, skip=frozenset(force), signals=guard), target)


def _guarded(tx: _Swap, target: str | None) -> SwapResult:
    """Run the swap under the signal guard and the state lock."""
    with tx.signals:
        try:
            with tx.phase("lock"):  # the wait for another servectl, if any
                held = tx.deps.lock(f"{tx.kind} {target or '(rollback target)'}")
                held.__enter__()
            try:
                return _run_locked(tx, target)
            finally:
                held.__exit__(None, None, None)
        except Interrupt as intr:  # later ones are handled inside, where something has changed
            raise SwapInterrupted(
                f"interrupted ({signal_name(intr.signum)}) before anything changed; "
                "whatever ran still runs (`servectl status`)"
            ) from None


def _build_deps(
    *,
    docker: DockerEngine,
    gpus: GpuInventory | None,
    preflight: Preflight | None,
    on_phase: Callable[[PhaseEvent], None] | None,
    clock: Callable[[], float],
    scope: Mapping[str, str] | None,
    state_dir: Path | None,
    lock_timeout_s: float | None,
    runtime: ServiceRuntime | None,
    conflicts: ConflictHandler | None,
    resolve_profile: Callable[[str], Resolved] | None,
    history: HistoryLog | None,
    lock: Callable[[str], AbstractContextManager[object]] | None,
    wall_clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> _Deps:
    if state_dir is None:
        from servectl.paths import state_dir as default_state_dir

        state_dir = default_state_dir()
    sd = state_dir
    if resolve_profile is None:
        from servectl.plan.resolve import resolve

        resolve_profile = resolve
    if conflicts is None:
        from servectl.adapters.conflicts import DockerConflicts

        conflicts = DockerConflicts(docker=docker)
    if history is None:
        from servectl.adapters.state import History

        history = History(sd)
    if lock is None:
        from servectl.adapters.state import StateLock
        from servectl.service.runtime import lock_timeout_default

        timeout = lock_timeout_default() if lock_timeout_s is None else lock_timeout_s

        def lock(purpose: str) -> AbstractContextManager[object]:
            return StateLock(sd, timeout, purpose=purpose)

    return _Deps(
        docker=docker,
        gpus=gpus,
        runtime=runtime if runtime is not None else default_runtime(),
        preflight=preflight if preflight is not None else profile_preflight(state_dir=sd),
        conflicts=conflicts,
        resolve=resolve_profile,
        history=history,
        lock=lock,
        state_dir=sd,
        scope=scope,
        clock=clock,
        wall_clock=wall_clock,
        sleep=sleep,
        on_phase=on_phase,
    )


def _run_locked(tx: _Swap, target: str | None) -> SwapResult:
    deps = tx.deps
    # We hold the lock, so a journal left here belongs to a transaction that is gone: it is settled by
    # `servectl recover` (which knows what ran before), never silently dropped.
    refuse_if_unfinished(deps.state_dir)
    with tx.phase("validate"):
        running = deps.services(probe=True)
        if target is None:
            target = _default_target(running, deps.resolve)
        resolved = _resolve_target(target, deps.resolve)
        blocking = [s for s in running if overlaps(s, resolved) and s.state in ALIVE_STATES]
        # Containers that stand in the way but do not run (exited, created) are removed before the start.
        leftovers = [s for s in running if overlaps(s, resolved) and s.state not in ALIVE_STATES]
        if len(blocking) > 1:
            names = ", ".join(f"{s.profile} ({s.container_name})" for s in blocking)
            raise UsageError(
                f"{target} would replace {len(blocking)} services ({names}); "
                "stop all but one with `servectl down NAME` first"
            )
        current = blocking[0] if blocking else None
        # Only a service that passed its gate counts as running: one still "starting" under our lock was left
        # by a servectl that is gone, and is replaced.
        if current is not None and current.profile == resolved.name and current.state == "ready":
            message = f"{resolved.name} already runs ({current.container_name}, {current.state}); nothing to do"
            if current.plan_hash != resolved.plan.plan_hash:
                message += (
                    f"; its running plan {current.plan_hash} differs from the profile's plan "
                    f"{resolved.plan.plan_hash} now - `servectl down {resolved.name}` then "
                    f"`servectl up {resolved.name}` applies it"
                )
            return tx.result(from_profile=current.profile, to_profile=resolved.name, outcome="noop", message=message)
        # On failure the previous service is brought back only when it is another profile.
        previous = current.profile if current is not None and current.profile != resolved.name else None

    with tx.phase("image", resolved.plan.docker.image):
        # Before anything stops: building the stand-in (or finding the image missing) costs no downtime.
        deps.runtime.ensure_image(resolved, docker=deps.docker, on_phase=tx.progress("image"))
    with tx.phase("preflight"):
        load_stopped(deps.state_dir)  # a damaged record of stopped conflicts stops the swap before any change
        deps.conflicts.check_available(resolved.loaded.profile.conflicts)
        deps.preflight(
            resolved=resolved, replacing=current, skip=tx.skip, docker=deps.docker, gpus=deps.gpus, running=running
        )

    tx.journal = SwapJournal(
        pid=os.getpid(),
        from_profile=current.profile if current is not None else None,
        to_profile=resolved.name,
        phase="begin",
        started_at=deps.wall_clock(),
        kind=tx.kind,
        previous=_snapshot(current, deps.resolve) if current is not None else None,
    )
    return _transact(tx, resolved, current, previous, leftovers)


def _snapshot(current: ServiceInfo, resolve: Callable[[str], Resolved]) -> PreviousService | None:
    """The running service's profile document now, kept in the journal for ``servectl recover``."""
    try:
        loaded = resolve(current.profile).loaded
    except ServectlError:
        return None  # recovery then resolves the profile by name, and says so
    data = json.loads(json.dumps(loaded.data, default=str))  # YAML dates and the like become text
    return PreviousService(
        profile=current.profile, source=str(loaded.file.path), data=data, plan_hash=current.plan_hash
    )


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


def _transact(
    tx: _Swap,
    resolved: Resolved,
    current: ServiceInfo | None,
    previous: str | None,
    leftovers: Sequence[ServiceInfo],
) -> SwapResult:
    """Stop the current service, stop conflicts, start the target; on any failure, recover."""
    deps = tx.deps
    from_profile = current.profile if current is not None else None
    down_since: float | None = None
    old_stop_s: float | None = None
    forced = False
    step = "begin"
    try:
        tx.set_journal("stop-old")
        if current is not None:
            with tx.phase("stop-old", current.container_name):
                step = "stop-old"
                down_since = deps.clock()
                stopped = deps.stop(current)
            old_stop_s, forced = stopped.stop_s, stopped.forced
            if stopped.leaked_pids:
                pids = ", ".join(str(p) for p in stopped.leaked_pids)
                raise ServectlError(f"the cards are still in use after {current.profile} stopped (pids {pids})")
        if leftovers:
            with tx.phase("remove-leftovers", ", ".join(s.container_name for s in leftovers)):
                step = "remove-leftovers"
                for leftover in leftovers:
                    deps.stop(leftover)
        if resolved.loaded.profile.conflicts:
            tx.set_journal("stop-conflicts")
            with tx.phase("stop-conflicts"):
                step = "stop-conflicts"
                tx.stop_conflicts(resolved)
        tx.set_journal("start-target")
        with tx.phase("start-target", resolved.name):
            step = "start-target"
            started = deps.runtime.start(
                resolved=resolved,
                docker=deps.docker,
                on_phase=tx.progress("start-target"),
                state_dir=deps.state_dir,
            )
            tx.signals.mode = "defer"  # it passed the gate: finish the bookkeeping whatever arrives now
        up_at = deps.clock()
    except Exception as err:  # a ServectlError, or a bug: either way the old service must come back
        tx.signals.mode = "abandon"
        failure = _failure_of(resolved.name, err)
        if step != "start-target":
            what = {
                "stop-old": f"stopping {from_profile}",
                "remove-leftovers": "removing the stopped containers in its way",
            }.get(step, f"stopping the conflicts of {resolved.name}")
            failure = TargetFailure(
                resolved.name, f"{what} failed, so {resolved.name} was not started: {failure.message}"
            )
        return _recover(tx, resolved, current, previous, failure, down_since, old_stop_s, forced, None, err)
    except Interrupt as intr:
        if step == "begin":  # nothing was touched yet
            tx.signals.mode = "defer"
            clear_journal(deps.state_dir)
            raise SwapInterrupted(
                f"interrupted ({signal_name(intr.signum)}) before anything changed; "
                + (f"{from_profile} still runs" if from_profile else "nothing was started")
            ) from None
        failure = TargetFailure(resolved.name, f"interrupted ({signal_name(intr.signum)}) during {step}")
        return _recover(tx, resolved, current, previous, failure, down_since, old_stop_s, forced, intr.signum)
    except Abandon as abandon:  # a second signal while the runtime was cleaning up the target
        failure = TargetFailure(resolved.name, f"interrupted ({signal_name(abandon.signum)}) during {step}")
        return _abandon(tx, resolved, previous, failure, f"stopped waiting after {signal_name(abandon.signum)}")
    downtime = up_at - down_since if down_since is not None else None
    return _swapped(tx, resolved, from_profile, started, downtime, old_stop_s, forced)


def _swapped(
    tx: _Swap,
    resolved: Resolved,
    from_profile: str | None,
    started: StartResult,
    downtime: float | None,
    old_stop_s: float | None,
    forced: bool,
) -> SwapResult:
    """The target passed the gate: the result, recorded in the history; the journal is done."""
    message = f"{resolved.name} is up ({resolved.plan.url})"
    if from_profile and downtime is not None:
        message += f", replacing {from_profile}; downtime {downtime:.2f} s"
    if tx.stopped:
        message += f"; stopped {', '.join(s.label() for s in tx.stopped)} (`servectl down` restores it)"
    result = tx.result(
        from_profile=from_profile,
        to_profile=resolved.name,
        outcome="swapped" if from_profile else "started",
        downtime_s=downtime,
        old_stop_s=old_stop_s,
        target_startup_s=started.startup_s,
        forced_stop=forced,
        message=message,
    )
    event = tx.result_event(result)
    event.update(
        container_id=started.service.container_id,
        container_name=started.service.container_name,
        plan_hash=resolved.plan.plan_hash,
        startup_s=round(started.startup_s, 3),
    )
    tx.record(event)
    clear_journal(tx.deps.state_dir)
    return result


@dataclass
class _Recovered:
    """What recovering did: the previous service back (or why not), the cards, the conflicts restored."""

    restored: StartResult | None = None
    restored_at: float | None = None
    previous_failure: TargetFailure | None = None
    cards: str = ""
    restore: RestoreOutcome | None = None


def _recover(
    tx: _Swap,
    resolved: Resolved,
    current: ServiceInfo | None,
    previous: str | None,
    failure: TargetFailure,
    down_since: float | None,
    old_stop_s: float | None,
    forced: bool,
    interrupted_by: int | None,
    cause: BaseException | None = None,
) -> SwapResult:
    """The target failed or the user interrupted: remove it, bring the previous service back, restore."""
    tx.signals.mode = "abandon"
    if interrupted_by is not None or failure.message.startswith("stopping "):
        why = failure.describe()
    else:
        why = f"{resolved.name} failed: {failure.describe()}"
    try:
        got = _bring_back(tx, resolved, current, previous, why)
    except Abandon as abandon:
        return _abandon(tx, resolved, previous, failure, f"stopped waiting after {signal_name(abandon.signum)}")
    except ServectlError as err:  # the engine failed us while cleaning up: say what is known, keep the journal
        return _abandon(tx, resolved, previous, failure, f"cleanup failed: {err.message}", SwapFailed)
    tx.signals.mode = "defer"
    downtime = got.restored_at - down_since if got.restored_at is not None and down_since is not None else None
    base: dict[str, Any] = {
        "from_profile": current.profile if current is not None else None,
        "to_profile": resolved.name,
        "downtime_s": downtime,
        "old_stop_s": old_stop_s,
        "forced_stop": forced,
        "conflicts_restore": got.restore,
        "target_failure": failure,
    }
    error = _recovery_error(tx, resolved, previous, failure, why, got, base, interrupted_by)
    clear_journal(tx.deps.state_dir)
    raise error from cause


def _bring_back(
    tx: _Swap, resolved: Resolved, current: ServiceInfo | None, previous: str | None, why: str
) -> _Recovered:
    """Remove the target, start the previous service through the gate (or remove it again), restore."""
    deps, got = tx.deps, _Recovered()
    tx.set_journal("remove-target", why)
    with tx.phase("remove-target", resolved.name):
        # The runtime's start removes what it created; this makes sure, and finishes an interrupted stop.
        for service in deps.services(probe=False):
            if overlaps(service, resolved) or (current is not None and service.container_id == current.container_id):
                deps.stop(service)
    if previous is not None:
        tx.set_journal("start-previous", why)
        with tx.phase("start-previous", previous) as mark:
            try:
                before = deps.resolve(previous)
                deps.runtime.ensure_image(before, docker=deps.docker, on_phase=tx.progress("start-previous"))
                got.restored = deps.runtime.start(
                    resolved=before,
                    docker=deps.docker,
                    on_phase=tx.progress("start-previous"),
                    state_dir=deps.state_dir,
                )
                got.restored_at = deps.clock()
            except ServectlError as err:
                got.previous_failure = _failure_of(previous, err)
                mark.failed = True
        if got.previous_failure is not None:
            with tx.phase("remove-previous", previous):
                for service in deps.services(probe=False):
                    if service.profile == previous:
                        deps.stop(service)
    if got.restored is None:
        got.cards = _cards_after_failure(tx, resolved, current)
    tx.set_journal("restore-conflicts", why)
    got.restore = tx.restore_stopped()
    return got


def _recovery_error(
    tx: _Swap,
    resolved: Resolved,
    previous: str | None,
    failure: TargetFailure,
    why: str,
    got: _Recovered,
    base: dict[str, Any],
    interrupted_by: int | None,
) -> ServectlError:
    """The error that says how the recovery ended (the history records it)."""
    restore_text = f"; {got.restore.summary()}" if got.restore and got.restore.summary() else ""
    downtime = base["downtime_s"]
    if previous is not None and got.restored is not None:
        message = (
            f"{why}; {resolved.name} was removed and the previous service {previous} is back "
            "(it passed the health gate"
            + (f"; downtime {downtime:.1f} s)" if downtime is not None else ")")
            + restore_text
            + (f". Fix {resolved.name} before swapping again" if interrupted_by is None else "")
            + _log_tail(failure)
        )
        result = tx.result(outcome="interrupted" if interrupted_by else "rolled-back", message=message, **base)
        tx.record(tx.result_event(result))
        tx.record(
            {
                "event": "up",
                "profile": previous,
                "container_id": got.restored.service.container_id,
                "container_name": got.restored.service.container_name,
                "startup_s": round(got.restored.startup_s, 3),
                "restored_after": resolved.name,
            }
        )
        return SwapRolledBack(message, result=result)
    if previous is not None and got.previous_failure is not None:
        message = (
            f"{why}; the previous service {previous} did not come back either: "
            f"{got.previous_failure.describe()}. Nothing of servectl runs now{got.cards}{restore_text}. "
            f"Check both (the log lines below, `servectl validate {resolved.name}`), "
            f"then `servectl up {previous}`" + _log_tail(failure) + _log_tail(got.previous_failure)
        )
        result = tx.result(outcome="failed", message=message, previous_failure=got.previous_failure, **base)
        tx.record(tx.result_event(result))
        return SwapFailed(message, result=result)
    # nothing healthy ran before: this swap acted like `up`
    before = "nothing was serving before"
    message = f"{why}; {resolved.name} was removed; {before}, so nothing runs now{got.cards}{restore_text}"
    message += _log_tail(failure)
    result = tx.result(outcome="interrupted" if interrupted_by else "failed", message=message, **base)
    tx.record(tx.result_event(result))
    if interrupted_by is not None:
        return SwapInterrupted(message, result=result)
    return StartupFailed(
        message,
        last_log_lines=failure.last_log_lines,
        exit_code_of_container=failure.exit_code_of_container,
        oom_killed=failure.oom_killed,
    )


def _cards_after_failure(tx: _Swap, resolved: Resolved, current: ServiceInfo | None) -> str:
    """With a GPU inventory: wait until the target's (and the old service's) cards run nothing."""
    devices = sorted(
        {int(d) for d in resolved.plan.docker.device_ids if d.isdigit()} | set(current.gpus if current else ())
    )
    gpus = tx.deps.gpus
    if gpus is None or not devices:
        return ""
    with tx.phase("verify-cards", ",".join(map(str, devices))):
        cards = wait_until_free(
            gpus, devices, CARDS_FREE_DEADLINE_S, poll_s=CARDS_POLL_S, clock=tx.deps.clock, sleep=tx.deps.sleep
        )
    shown = ", ".join(map(str, devices))
    if cards.leaked_pids:
        pids = ", ".join(map(str, cards.leaked_pids))
        return f"; but cards {shown} still run pids {pids}: find them with nvidia-smi"
    if cards.unknown_cards:
        unread = ", ".join(map(str, cards.unknown_cards))
        return f"; cards {shown} could not all be read (card {unread}): check them with nvidia-smi"
    return f" and cards {shown} are free"


def _abandon(
    tx: _Swap,
    resolved: Resolved,
    previous: str | None,
    failure: TargetFailure,
    why_stopped: str,
    error: type[SwapInterrupted] | type[SwapFailed] = SwapInterrupted,
) -> SwapResult:
    """Stop recovering (a signal, or the engine failed): say what runs and what to do; keep the journal."""
    deps = tx.deps
    tx.signals.mode = "defer"
    try:
        running = [f"{s.profile} ({s.state})" for s in deps.services(probe=True)]
        now = ", ".join(running) if running else "nothing of servectl"
    except ServectlError:
        now = "unknown (the engine did not answer)"
    note = f"{why_stopped}; running now: {now}"
    # the journal stays, so a later swap is refused until recover settles it (and brings the previous one back)
    after = f" (it starts {previous} again)" if previous else " (it removes what never passed its gate)"
    next_step = f"`servectl status`, then `servectl recover`{after}"
    lead = failure.message if failure.message.startswith("interrupted") else f"{resolved.name} failed"
    message = f"{lead}; {note}. Next: {next_step}"
    if tx.stopped:
        message += "; still stopped: " + ", ".join(f"{s.label()} (`{s.restore_command()}`)" for s in tx.stopped)
    with suppress(OSError, AssertionError):
        tx.set_journal("abandoned", note)
    result = tx.result(
        from_profile=previous,
        to_profile=resolved.name,
        outcome="interrupted" if error is SwapInterrupted else "failed",
        target_failure=failure,
        message=message,
    )
    tx.record(tx.result_event(result))
    raise error(message, result=result)


def profile_preflight(
    *,
    state_dir: Path | None = None,
    on_report: Callable[[PreflightReport], None] | None = None,
    host: HostProbe | None = None,
) -> Preflight:
    """servectl's preflight (:func:`servectl.preflight.request.check_start`) as a swap :class:`Preflight`.

    The service being replaced counts as stopped (its container, main pid and port) and declared conflicts
    as about to be stopped; both go to ``check_start`` as data, with the servectl services running now and,
    for an adopted profile, its own container (which holds the name and is replaced like a servectl one).
    Checks skipped with ``--force`` are recorded in the history. The swap's own Docker client and GPU
    inventory are used (no second ones).

    Args:
        state_dir: where forced checks are recorded.
        on_report: gets the full report (warnings, skipped checks) before a failure is raised.
        host: host probe instead of psutil (tests).
    """

    def check(
        *,
        resolved: Resolved,
        replacing: ServiceInfo | None,
        skip: frozenset[str],
        docker: DockerEngine,
        gpus: GpuInventory | None,
        running: Sequence[ServiceInfo] = (),
    ) -> None:
        from servectl.preflight.model import StartContext
        from servectl.preflight.request import check_start

        check_start(
            resolved,
            docker=docker,
            gpus=gpus,
            host=host,
            context=StartContext(
                replacing=None if replacing is None else replacing_of(replacing, docker),
                stop_conflicts=True,
                services=running_refs(running),
                # an adopted profile's own container (recognised by services()): replaced like a servectl one
                own_container_ids=frozenset(
                    s.container_id for s in running if s.adopted and s.profile == resolved.name
                ),
            ),
            skip=skip,
            state_dir=state_dir,
            on_report=on_report,
        )

    return check


def replacing_of(service: ServiceInfo, docker: DockerEngine) -> Replacing:
    """What preflight counts as freed once ``service`` is stopped: its container, main pid and port."""
    from servectl.preflight.model import Replacing

    state = docker.inspect(service.container_id)
    pid = state.pid if state is not None else None
    return Replacing(
        container_id=service.container_id,
        container_name=service.container_name,
        pids=frozenset({pid} if pid else ()),
        port=service.port,
    )
