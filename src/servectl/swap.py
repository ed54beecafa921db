"""``swap`` and ``rollback``: change the running service all-or-nothing, with measured downtime.

Two cards cannot hold two of these models, so a swap is stop-then-start, made a transaction. The user ends
with one of:

* the target proven up (it passed the health gate) - :class:`SwapResult` with ``outcome="swapped"``;
* the target failed, and the previous service is back and proven up - :class:`SwapRolledBack` (exit 4);
* both failed: nothing of servectl runs, the cards are free - :class:`SwapFailed` (exit 5).

Steps, all under the state lock: validate and compile the target; preflight it counting the current
service's cards and port as about to be freed; stop the current service (SIGTERM, then SIGKILL) and wait
until its cards are free; stop declared conflicts; start the target and pass the health gate. On failure:
keep the target's last log lines and exit code, make sure it is removed, start the previous profile again
through the same gate, restore the conflicts this swap stopped, and raise.

SIGINT/SIGTERM during a swap take an orderly path: before anything changed, servectl just stops; once the old
service is being stopped, the target (if any) is removed and the previous service restored (exit 4,
"interrupted"); a second signal stops waiting and leaves a journal that ``servectl status`` reads.

The side effects come in through small interfaces (:class:`ServiceRuntime`, :class:`Preflight`,
:class:`~servectl.conflicts.ConflictHandler`, the lock and the history) so that the transaction is tested
with fakes (:mod:`servectl.testing_swap`) and on the real engine.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol

from servectl.conflicts import (
    ConflictHandler,
    RestoreOutcome,
    StoppedConflict,
    conflict_key,
    record_stopped,
    restore_conflicts,
)
from servectl.errors import (
    LockTimeout,
    PreflightFailed,
    ServectlError,
    StartupFailed,
    SwapFailed,
    SwapInterrupted,
    SwapRolledBack,
    UsageError,
)
from servectl.resolve import Resolved

JOURNAL_FILE = "swap-journal.json"
LOG_TAIL_LINES = 20
"""Lines of the failed target's log kept in the result and shown in the message."""

Outcome = Literal["swapped", "started", "noop", "rolled-back", "failed", "interrupted"]
_ALIVE = ("ready", "starting", "unhealthy")
"""Service states whose profile counts as "running" (and is brought back when a swap fails)."""


# -- what swap needs from the runtime (see notes/RUNTIME_API.md) ---------------------------------------------
class ServiceLike(Protocol):
    """A running servectl service, as the runtime's ``services()`` reports it."""

    @property
    def container_id(self) -> str: ...
    @property
    def container_name(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def plan_hash(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def port(self) -> int | None: ...
    @property
    def gpus(self) -> tuple[int, ...]: ...


class StopResultLike(Protocol):
    @property
    def stop_s(self) -> float: ...
    @property
    def forced(self) -> bool: ...
    @property
    def leaked_pids(self) -> Sequence[int]: ...


class StartResultLike(Protocol):
    @property
    def startup_s(self) -> float: ...


class ServiceRuntime(Protocol):
    """``servectl.runtime``'s service functions (the module itself fits this protocol)."""

    def services(self, *, docker: Any) -> Sequence[ServiceLike]: ...

    def start(self, *, resolved: Resolved, docker: Any, on_phase: Any = None) -> StartResultLike: ...

    def stop(self, *, service: Any, docker: Any, gpus: Any = None) -> StopResultLike: ...


class HistoryLike(Protocol):
    def record(self, event: dict[str, Any]) -> None: ...

    def events(self) -> Sequence[Mapping[str, Any]]: ...


class Preflight(Protocol):
    """Raises :class:`PreflightFailed` when ``resolved`` could not start once ``replacing`` is stopped."""

    def __call__(
        self,
        *,
        resolved: Resolved,
        replacing: ServiceLike | None,
        skip: frozenset[str],
        docker: Any,
        gpus: Any,
    ) -> None: ...


PhaseCallback = Callable[["PhaseEvent"], None]


# -- results -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhaseEvent:
    """Progress for the CLI: a phase started (``duration_s is None``) or ended."""

    phase: str
    duration_s: float | None = None
    ok: bool = True
    detail: str = ""


@dataclass(frozen=True)
class PhaseTiming:
    """One phase of a swap and how long it took."""

    phase: str
    duration_s: float
    ok: bool = True
    detail: str = ""


@dataclass(frozen=True)
class TargetFailure:
    """Why the target did not come up."""

    profile: str
    message: str
    last_log_lines: tuple[str, ...] = ()
    exit_code_of_container: int | None = None
    oom_killed: bool = False

    def describe(self) -> str:
        """One line: the reason, with the exit code when there is one."""
        extra = []
        if self.exit_code_of_container is not None:
            extra.append(f"container exit code {self.exit_code_of_container}")
        if self.oom_killed:
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
        downtime_s: old service stops answering -> new (or restored) one passes the gate.
        old_stop_s: how long stopping the old service took.
        target_startup_s: the target's start, container create to gate passed.
        forced_stop: the old service ignored SIGTERM and was killed.
        stopped_conflicts: conflicts this swap stopped (still stopped when it succeeded).
        conflicts_restore: what restoring them did, after a failure.
        target_failure: why the target failed, when it did.
        previous_failure: why the previous service failed to come back, when it did.
        message: one sentence saying what happened and what to do.
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


@dataclass(frozen=True)
class CheckItem:
    """One point of a rollback check."""

    check: str  # "validates", "image", "model", "preflight", "declared"
    ok: bool
    message: str


@dataclass(frozen=True)
class RollbackCheck:
    """Whether ``profile``'s rollback target could start now."""

    profile: str
    target: str | None
    items: tuple[CheckItem, ...]

    @property
    def ok(self) -> bool:
        return bool(self.items) and all(item.ok for item in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "target": self.target,
            "ok": self.ok,
            "items": [asdict(i) for i in self.items],
        }


# -- the journal: what an interrupted swap left behind -------------------------------------------------------
@dataclass(frozen=True)
class SwapJournal:
    """The swap in progress (or abandoned): written at every step, removed when the swap ends orderly."""

    pid: int
    from_profile: str | None
    to_profile: str
    phase: str
    started_at: float
    stopped_conflicts: tuple[StoppedConflict, ...] = ()
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stopped_conflicts"] = [s.to_dict() for s in self.stopped_conflicts]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SwapJournal:
        return cls(
            pid=int(data["pid"]),
            from_profile=data.get("from_profile"),
            to_profile=str(data["to_profile"]),
            phase=str(data["phase"]),
            started_at=float(data["started_at"]),
            stopped_conflicts=tuple(StoppedConflict.from_dict(s) for s in data.get("stopped_conflicts", ())),
            note=str(data.get("note", "")),
        )

    def hint(self) -> str:
        """What the user should know and do about an unfinished swap."""
        src = self.from_profile or "nothing"
        text = f"a swap from {src} to {self.to_profile} (pid {self.pid}) stopped during phase '{self.phase}'"
        if self.note:
            text += f": {self.note}"
        return text


def read_journal(state_dir: Path) -> SwapJournal | None:
    """The unfinished swap's journal, or ``None`` (for ``servectl status``)."""
    path = state_dir / JOURNAL_FILE
    try:
        return SwapJournal.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ServectlError(
            f"{path}: unreadable swap journal ({e}); delete it after checking `servectl status`"
        ) from e


def _write_journal(state_dir: Path, journal: SwapJournal) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / JOURNAL_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(journal.to_dict(), indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _clear_journal(state_dir: Path) -> None:
    (state_dir / JOURNAL_FILE).unlink(missing_ok=True)


# -- signals -------------------------------------------------------------------------------------------------
class _Interrupt(BaseException):
    """First SIGINT/SIGTERM: take the orderly path. A BaseException so that ``except Exception`` passes it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Abandon(BaseException):
    """A signal while restoring: stop waiting, leave the journal and a status hint."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


SignalMode = Literal["raise", "abandon", "defer"]


class _SignalGuard:
    """Turns SIGINT/SIGTERM into exceptions at safe points of the transaction (main thread only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.mode: SignalMode = "raise"
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalGuard:
        if self.enabled:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.mode == "defer":
            return
        if self.mode == "raise":
            self.mode = "abandon"
            raise _Interrupt(signum)
        raise _Abandon(signum)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


# -- helpers -------------------------------------------------------------------------------------------------
def _failure_of(profile: str, err: BaseException) -> TargetFailure:
    if isinstance(err, StartupFailed):
        return TargetFailure(
            profile=profile,
            message=err.message,
            last_log_lines=tuple(err.last_log_lines[-LOG_TAIL_LINES:]),
            exit_code_of_container=err.exit_code_of_container,
            oom_killed=err.oom_killed,
        )
    if isinstance(err, ServectlError):
        return TargetFailure(profile=profile, message=err.message)
    return TargetFailure(profile=profile, message=f"{type(err).__name__}: {err}")


def _overlaps(service: ServiceLike, resolved: Resolved) -> bool:
    """Whether ``service`` stands in the way of ``resolved``: same profile, container name, port or a card."""
    plan = resolved.plan
    target_gpus = {int(d) for d in plan.docker.device_ids}
    target_port = resolved.loaded.profile.serve.port
    return (
        service.profile == plan.profile
        or service.container_name == plan.docker.name
        or (service.port is not None and service.port == target_port)
        or bool(target_gpus & set(service.gpus))
    )


def _indent(lines: Iterable[str]) -> str:
    return "\n".join("    " + line for line in lines)


# -- the transaction -----------------------------------------------------------------------------------------
@dataclass
class _Deps:
    docker: Any
    gpus: Any
    runtime: ServiceRuntime
    preflight: Preflight
    conflicts: ConflictHandler
    resolve: Callable[[str], Resolved]
    history: HistoryLike
    lock: Callable[[], AbstractContextManager[object]]
    state_dir: Path
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    on_phase: PhaseCallback | None


@dataclass
class _Swap:
    """One swap's mutable bookkeeping; :meth:`run` is the transaction."""

    deps: _Deps
    kind: str  # "swap" or "rollback", for the history
    skip: frozenset[str]
    signals: _SignalGuard
    phases: list[PhaseTiming] = field(default_factory=list)
    stopped: list[StoppedConflict] = field(default_factory=list)
    journal: SwapJournal | None = None

    # -- bookkeeping
    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[None]:
        d = self.deps
        if d.on_phase:
            d.on_phase(PhaseEvent(name, None, True, detail))
        began = d.clock()
        ok = False
        try:
            yield
            ok = True
        finally:
            timing = PhaseTiming(name, d.clock() - began, ok, detail)
            self.phases.append(timing)
            if d.on_phase:
                with suppress(Exception):  # rendering must never break the transaction
                    d.on_phase(PhaseEvent(name, timing.duration_s, ok, detail))

    def set_journal(self, phase: str, note: str = "") -> None:
        assert self.journal is not None
        self.journal = SwapJournal(
            pid=self.journal.pid,
            from_profile=self.journal.from_profile,
            to_profile=self.journal.to_profile,
            phase=phase,
            started_at=self.journal.started_at,
            stopped_conflicts=tuple(self.stopped),
            note=note,
        )
        _write_journal(self.deps.state_dir, self.journal)

    def record(self, result: SwapResult) -> None:
        event: dict[str, Any] = {
            "event": self.kind,
            "at": self.deps.wall_clock(),
            "from": result.from_profile,
            "to": result.to_profile,
            "outcome": result.outcome,
            "downtime_s": result.downtime_s,
            "phases": {p.phase: round(p.duration_s, 3) for p in result.phases},
            "stopped_conflicts": [s.to_dict() for s in result.stopped_conflicts],
        }
        if result.target_failure:
            event["reason"] = result.target_failure.describe()
        if result.previous_failure:
            event["previous_reason"] = result.previous_failure.describe()
        with suppress(ServectlError, OSError):  # the service state is already right; history is a record
            self.deps.history.record(event)

    # -- steps
    def stop_conflicts(self, resolved: Resolved) -> None:
        for spec in resolved.loaded.profile.conflicts:
            kind, ref = conflict_key(spec)
            if any((s.kind, s.ref) == (kind, ref) for s in self.stopped):
                continue
            stopped = self.deps.conflicts.stop(spec, stopped_by=resolved.name)
            if stopped is not None:
                self.stopped.append(stopped)
                record_stopped(self.deps.state_dir, stopped)
                self.set_journal("stop-conflicts")

    def restore_stopped(self) -> RestoreOutcome | None:
        if not self.stopped:
            return None
        with self.phase("restore-conflicts", ", ".join(s.label() for s in self.stopped)):
            outcome = restore_conflicts(
                self.stopped, handler=self.deps.conflicts, state_dir=self.deps.state_dir
            )
        return outcome

    def result(self, **kwargs: Any) -> SwapResult:
        return SwapResult(phases=tuple(self.phases), stopped_conflicts=tuple(self.stopped), **kwargs)


def _default_runtime() -> ServiceRuntime:
    import importlib

    module: Any = importlib.import_module("servectl.runtime")
    return module  # type: ignore[no-any-return]  # a module fits the protocol structurally


def swap(
    *,
    target: str | None,
    docker: Any,
    gpus: Any = None,
    preflight: Preflight | None = None,
    on_phase: PhaseCallback | None = None,
    clock: Callable[[], float] = time.monotonic,
    force: Iterable[str] = (),
    runtime: ServiceRuntime | None = None,
    conflicts: ConflictHandler | None = None,
    resolve_profile: Callable[[str], Resolved] | None = None,
    history: HistoryLike | None = None,
    lock: Callable[[], AbstractContextManager[object]] | None = None,
    state_dir: Path | None = None,
    lock_timeout_s: float = 30.0,
    handle_signals: bool = True,
    wall_clock: Callable[[], float] = time.time,
    _kind: str = "swap",
) -> SwapResult:
    """Replace the running service with ``target``, all-or-nothing.

    Args:
        target: profile to run; ``None``: the running profile's ``rollback:``.
        docker: the Docker engine (``servectl.docker_engine.DockerEngine``).
        gpus: GPU inventory, to wait until the old service's cards are free (``None``: no GPUs to watch).
        preflight: checks the target before anything stops (default: servectl's preflight).
        on_phase: called when each phase starts and ends (for progress output).
        clock: monotonic clock for the timings.
        force: preflight check ids to skip (``--force CHECK-ID``).
        runtime, conflicts, resolve_profile, history, lock, state_dir: injected for tests; defaults are
            servectl's runtime, :class:`~servectl.conflicts.DockerConflicts`,
            :func:`servectl.resolve.resolve`, the history and state lock in the state folder.
        lock_timeout_s: how long to wait for another servectl that holds the state lock.
        handle_signals: turn SIGINT/SIGTERM into the orderly path (main thread only).

    Returns:
        The result: ``swapped``, ``started`` (nothing ran) or ``noop`` (target already runs).

    Raises:
        UsageError, ProfileError: bad target; nothing changed.
        PreflightFailed: the target would not start; nothing changed.
        LockTimeout: another swap holds the lock; nothing changed.
        StartupFailed: nothing ran before and the target failed; nothing runs, conflicts restored.
        SwapRolledBack: the target failed (or the swap was interrupted); the previous service is back.
        SwapFailed: the target and the previous service both failed; nothing runs.
        SwapInterrupted: interrupted before anything changed, or a second signal stopped the waiting.
    """
    deps = _build_deps(
        docker=docker,
        gpus=gpus,
        preflight=preflight,
        on_phase=on_phase,
        clock=clock,
        runtime=runtime,
        conflicts=conflicts,
        resolve_profile=resolve_profile,
        history=history,
        lock=lock,
        state_dir=state_dir,
        lock_timeout_s=lock_timeout_s,
        wall_clock=wall_clock,
    )
    guard = _SignalGuard(handle_signals)
    tx = _Swap(deps=deps, kind=_kind, skip=frozenset(force), signals=guard)
    with guard:
        try:
            with tx.phase("lock"):  # the wait for another servectl, if any
                held = deps.lock()
                held.__enter__()
            try:
                return _run_locked(tx, target)
            finally:
                held.__exit__(None, None, None)
        except _Interrupt as intr:
            # Only reaches here before anything changed (later ones are handled inside).
            raise SwapInterrupted(
                f"interrupted ({_signal_name(intr.signum)}) before anything changed; "
                "the running service (if any) was not touched"
            ) from None


def _build_deps(
    *,
    docker: Any,
    gpus: Any,
    preflight: Preflight | None,
    on_phase: PhaseCallback | None,
    clock: Callable[[], float],
    runtime: ServiceRuntime | None,
    conflicts: ConflictHandler | None,
    resolve_profile: Callable[[str], Resolved] | None,
    history: HistoryLike | None,
    lock: Callable[[], AbstractContextManager[object]] | None,
    state_dir: Path | None,
    lock_timeout_s: float,
    wall_clock: Callable[[], float],
) -> _Deps:
    if state_dir is None:
        from servectl.paths import state_dir as default_state_dir

        state_dir = default_state_dir()
    if resolve_profile is None:
        from servectl.resolve import resolve

        def resolve_profile(name: str) -> Resolved:
            return resolve(name)

    if conflicts is None:
        from servectl.conflicts import DockerConflicts

        conflicts = DockerConflicts(docker=docker)
    if history is None or lock is None:
        from servectl.state import History, StateLock

        sd = state_dir
        history = history if history is not None else History(sd)
        if lock is None:

            def lock() -> AbstractContextManager[object]:
                return _lock_with_message(StateLock(sd, timeout_s=lock_timeout_s), lock_timeout_s)

    return _Deps(
        docker=docker,
        gpus=gpus,
        runtime=runtime if runtime is not None else _default_runtime(),
        preflight=preflight if preflight is not None else default_preflight,
        conflicts=conflicts,
        resolve=resolve_profile,
        history=history,
        lock=lock,
        state_dir=state_dir,
        clock=clock,
        wall_clock=wall_clock,
        on_phase=on_phase,
    )


@contextmanager
def _lock_with_message(lock: AbstractContextManager[object], timeout_s: float) -> Iterator[None]:
    try:
        lock.__enter__()
    except LockTimeout as e:
        raise LockTimeout(
            f"another servectl is changing services ({e.message}); waited {timeout_s:g} s. "
            "Try again when it has finished (`servectl status` shows what runs)"
        ) from e
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def _run_locked(tx: _Swap, target: str | None) -> SwapResult:
    deps = tx.deps
    if read_journal(deps.state_dir) is not None:
        # We hold the lock, so the swap that wrote it is gone; Docker (read below) says what runs now, and the
        # conflicts it stopped are in the record of stopped conflicts.
        _clear_journal(deps.state_dir)
    # -- what runs now, and what the target is
    with tx.phase("validate"):
        running = list(deps.runtime.services(docker=deps.docker))
        if target is None:
            target = _default_target(running, deps.resolve)
        resolved = deps.resolve(target)
        blocking = [s for s in running if _overlaps(s, resolved)]
        if len(blocking) > 1:
            names = ", ".join(f"{s.profile} ({s.container_name})" for s in blocking)
            raise UsageError(
                f"{target} would replace {len(blocking)} services ({names}); "
                "stop all but one with `servectl down NAME` first"
            )
        current = blocking[0] if blocking else None
        if (
            current is not None
            and current.profile == resolved.name
            and current.state in ("ready", "starting")
        ):
            drift = current.plan_hash != resolved.plan.plan_hash
            message = (
                f"{resolved.name} already runs ({current.container_name}, {current.state}); nothing to do"
            )
            if drift:
                message += (
                    "; its running plan differs from the profile file now - restart it with "
                    f"`servectl down {resolved.name}` then `servectl up {resolved.name}`"
                )
            return tx.result(
                from_profile=current.profile, to_profile=resolved.name, outcome="noop", message=message
            )
        previous_name = current.profile if current is not None and current.profile != resolved.name else None
        had_working_previous = current is not None and current.state in _ALIVE and bool(previous_name)

    with tx.phase("preflight"):
        deps.conflicts.check_available(resolved.loaded.profile.conflicts)
        deps.preflight(resolved=resolved, replacing=current, skip=tx.skip, docker=deps.docker, gpus=deps.gpus)

    tx.journal = SwapJournal(
        pid=os.getpid(),
        from_profile=previous_name,
        to_profile=resolved.name,
        phase="begin",
        started_at=deps.wall_clock(),
    )
    return _transact(tx, resolved, current, previous_name if had_working_previous else None)


def _default_target(running: Sequence[ServiceLike], resolve: Callable[[str], Resolved]) -> str:
    alive = [s for s in running if s.state in _ALIVE]
    if not alive:
        raise UsageError(
            "no servectl service runs, so there is no rollback target; name one: `servectl swap NAME`"
        )
    if len(alive) > 1:
        raise UsageError(
            "several services run ("
            + ", ".join(s.profile for s in alive)
            + "); name the target: `servectl swap NAME`"
        )
    current = resolve(alive[0].profile)
    if current.loaded.profile.rollback is None:
        raise UsageError(
            f"{current.name} declares no `rollback:` target in {current.loaded.file.path}; "
            "name the target: `servectl swap NAME`"
        )
    return current.loaded.profile.rollback


def _transact(tx: _Swap, resolved: Resolved, current: ServiceLike | None, previous: str | None) -> SwapResult:
    """Stop the current service, stop conflicts, start the target; roll back on any failure."""
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
                stopped = deps.runtime.stop(service=current, docker=deps.docker, gpus=deps.gpus)
            old_stop_s, forced = stopped.stop_s, stopped.forced
            if stopped.leaked_pids:
                pids = ", ".join(str(p) for p in stopped.leaked_pids)
                raise ServectlError(
                    f"the cards are still in use after {current.profile} stopped (pids {pids})"
                )
        if resolved.loaded.profile.conflicts:
            tx.set_journal("stop-conflicts")
            with tx.phase("stop-conflicts"):
                step = "stop-conflicts"
                tx.stop_conflicts(resolved)
        tx.set_journal("start-target")
        with tx.phase("start-target", resolved.name):
            step = "start-target"
            started = deps.runtime.start(
                resolved=resolved, docker=deps.docker, on_phase=_forward(tx, resolved.name)
            )
            tx.signals.mode = "defer"  # it is up: finish the bookkeeping whatever arrives now
        up_at = deps.clock()
    except ServectlError as err:
        tx.signals.mode = "abandon"
        failure = _failure_of(resolved.name, err)
        if step != "start-target":
            what = (
                f"stopping {from_profile}"
                if step == "stop-old"
                else f"stopping the conflicts of {resolved.name}"
            )
            failure = TargetFailure(
                resolved.name, f"{what} failed, so {resolved.name} was not started: {err.message}"
            )
        return _recover(tx, resolved, current, previous, failure, down_since, old_stop_s, forced, None)
    except _Interrupt as intr:
        if step == "begin":  # nothing was touched yet
            tx.signals.mode = "defer"
            _clear_journal(deps.state_dir)
            raise SwapInterrupted(
                f"interrupted ({_signal_name(intr.signum)}) before anything changed; "
                + (f"{from_profile} still runs" if from_profile else "nothing was started")
            ) from None
        failure = TargetFailure(resolved.name, f"interrupted ({_signal_name(intr.signum)}) during {step}")
        return _recover(tx, resolved, current, previous, failure, down_since, old_stop_s, forced, intr.signum)
    outcome: Outcome = "swapped" if from_profile else "started"
    downtime = up_at - down_since if down_since is not None else None
    stopped_note = f"; stopped {', '.join(s.label() for s in tx.stopped)}" if tx.stopped else ""
    message = (
        f"{resolved.name} is up ({resolved.plan.url})"
        + (
            f", replacing {from_profile}; downtime {downtime:.2f} s"
            if from_profile and downtime is not None
            else ""
        )
        + stopped_note
    )
    result = tx.result(
        from_profile=from_profile,
        to_profile=resolved.name,
        outcome=outcome,
        downtime_s=downtime,
        old_stop_s=old_stop_s,
        target_startup_s=started.startup_s,
        forced_stop=forced,
        message=message,
    )
    tx.record(result)
    _clear_journal(deps.state_dir)
    return result


def _forward(tx: _Swap, profile: str) -> Callable[..., None]:
    """The runtime's start progress, forwarded as detail of the start phase."""

    def forward(*args: Any, **kwargs: Any) -> None:
        if tx.deps.on_phase is None:
            return
        detail = " ".join(str(a) for a in args if a is not None)
        with suppress(Exception):
            tx.deps.on_phase(PhaseEvent(f"start-target:{profile}", None, True, detail))

    return forward


def _recover(
    tx: _Swap,
    resolved: Resolved,
    current: ServiceLike | None,
    previous: str | None,
    failure: TargetFailure,
    down_since: float | None,
    old_stop_s: float | None,
    forced: bool,
    interrupted_by: int | None,
) -> SwapResult:
    """The target failed or the user interrupted: remove it, bring the previous service back, restore."""
    deps = tx.deps
    tx.signals.mode = "abandon"
    from_profile = current.profile if current is not None else None
    why = (
        failure.describe() if interrupted_by is not None else f"{resolved.name} failed: {failure.describe()}"
    )
    if failure.message.startswith(("stopping ", "interrupted")):
        why = failure.describe()
    previous_failure: TargetFailure | None = None
    restored_at: float | None = None
    try:
        tx.set_journal("remove-target", why)
        with tx.phase("remove-target", resolved.name):
            # The runtime's start removes what it created; this makes sure, and finishes an interrupted stop.
            for service in deps.runtime.services(docker=deps.docker):
                if _overlaps(service, resolved) or (
                    current is not None and service.container_id == current.container_id
                ):
                    deps.runtime.stop(service=service, docker=deps.docker, gpus=deps.gpus)
        if previous is not None:
            tx.set_journal("start-previous", why)
            with tx.phase("start-previous", previous):
                try:
                    previous_resolved = deps.resolve(previous)
                    deps.runtime.start(
                        resolved=previous_resolved, docker=deps.docker, on_phase=_forward(tx, previous)
                    )
                    restored_at = deps.clock()
                except ServectlError as err:
                    previous_failure = _failure_of(previous, err)
            if previous_failure is not None:
                with tx.phase("remove-previous", previous):
                    for service in deps.runtime.services(docker=deps.docker):
                        if service.profile == previous:
                            deps.runtime.stop(service=service, docker=deps.docker, gpus=deps.gpus)
        tx.set_journal("restore-conflicts", why)
        restore = tx.restore_stopped()
    except _Abandon as abandon:
        return _abandon(tx, resolved, previous, failure, abandon.signum)
    downtime = restored_at - down_since if restored_at is not None and down_since is not None else None
    restore_text = f"; {restore.summary()}" if restore and restore.summary() else ""
    tail = (
        f"\n  last log lines of {resolved.name}:\n{_indent(failure.last_log_lines)}"
        if failure.last_log_lines
        else ""
    )
    base: dict[str, Any] = {
        "from_profile": from_profile,
        "to_profile": resolved.name,
        "downtime_s": downtime,
        "old_stop_s": old_stop_s,
        "forced_stop": forced,
        "conflicts_restore": restore,
        "target_failure": failure,
    }
    outcome: Outcome
    error: ServectlError
    if previous is not None and previous_failure is None:
        outcome = "interrupted" if interrupted_by is not None else "rolled-back"
        message = (
            f"{why}; {resolved.name} was removed and the previous service {previous} is back "
            "(it passed the health gate"
            + (f"; downtime {downtime:.1f} s)" if downtime is not None else ")")
            + restore_text
            + (
                f". Fix {resolved.name} before swapping again (`servectl validate {resolved.name}`)"
                if interrupted_by is None
                else ""
            )
            + tail
        )
        result = tx.result(outcome=outcome, message=message, **base)
        error = SwapRolledBack(message, result=result)
    elif previous is not None and previous_failure is not None:
        outcome = "failed"
        message = (
            f"{why}; the previous service {previous} failed to come back too: {previous_failure.describe()}. "
            f"Nothing of servectl runs now and the cards are free{restore_text}. "
            f"Check both (`servectl validate {resolved.name} {previous}`, the log lines below), "
            f"then `servectl up {previous}`"
            + tail
            + (
                f"\n  last log lines of {previous}:\n{_indent(previous_failure.last_log_lines)}"
                if previous_failure.last_log_lines
                else ""
            )
        )
        result = tx.result(outcome=outcome, message=message, previous_failure=previous_failure, **base)
        error = SwapFailed(message, result=result)
    else:  # nothing healthy ran before: this swap acted like `up`
        outcome = "interrupted" if interrupted_by is not None else "failed"
        before = f"{from_profile} was not serving and was removed" if from_profile else "nothing ran before"
        message = f"{why}; {resolved.name} was removed; {before}, so nothing runs now{restore_text}" + tail
        result = tx.result(outcome=outcome, message=message, **base)
        if interrupted_by is not None:
            error = SwapInterrupted(message, result=result)
        else:
            error = StartupFailed(
                message,
                last_log_lines=failure.last_log_lines,
                exit_code_of_container=failure.exit_code_of_container,
                oom_killed=failure.oom_killed,
            )
    tx.signals.mode = "defer"
    tx.record(result)
    _clear_journal(deps.state_dir)
    raise error


def _abandon(
    tx: _Swap, resolved: Resolved, previous: str | None, failure: TargetFailure, signum: int
) -> SwapResult:
    """A second signal: stop waiting, say exactly what runs and what to do, leave the journal."""
    deps = tx.deps
    tx.signals.mode = "defer"
    try:
        running = [f"{s.profile} ({s.state})" for s in deps.runtime.services(docker=deps.docker)]
        now = ", ".join(running) if running else "nothing of servectl"
    except (ServectlError, _Abandon, _Interrupt):
        now = "unknown (the engine did not answer)"
    pending = [s for s in tx.stopped]
    next_step = f"`servectl status`, then `servectl swap {previous}`" if previous else "`servectl status`"
    note = f"stopped waiting after {_signal_name(signum)}; running now: {now}"
    lead = failure.message if failure.message.startswith("interrupted") else f"swap to {resolved.name} failed"
    with suppress(OSError, AssertionError):
        tx.set_journal("abandoned", note)
    message = f"{lead}; {note}. Next: {next_step}" + (
        "; still stopped: " + ", ".join(f"{s.label()} (`{s.restore_command()}`)" for s in pending)
        if pending
        else ""
    )
    result = tx.result(
        from_profile=previous,
        to_profile=resolved.name,
        outcome="interrupted",
        target_failure=failure,
        message=message,
    )
    tx.record(result)
    raise SwapInterrupted(message, result=result)


# -- rollback ------------------------------------------------------------------------------------------------
def previous_profile(events: Sequence[Mapping[str, Any]], current: str | None) -> str | None:
    """The profile that ran before ``current``, from history: the newest successful change *to* ``current``.

    History events are dicts with ``from``/``to``/``outcome`` (``swap``, ``rollback``, ``up`` events).
    """
    for event in reversed(events):
        to = event.get("to") or (event.get("profile") if event.get("event") == "up" else None)
        ok = event.get("outcome") in ("swapped", "started", "ok", None)
        if to == current and ok and event.get("from") and event.get("from") != current:
            return str(event["from"])
    return None


def rollback(
    *,
    docker: Any,
    history: HistoryLike | None = None,
    runtime: ServiceRuntime | None = None,
    state_dir: Path | None = None,
    **kwargs: Any,
) -> SwapResult:
    """Swap back to the profile that ran before the current one (from history). Same errors as :func:`swap`.

    Raises:
        UsageError: nothing runs, or history has no earlier profile.
    """
    if state_dir is None:
        from servectl.paths import state_dir as default_state_dir

        state_dir = default_state_dir()
    if history is None:
        from servectl.state import History

        history = History(state_dir)
    rt = runtime if runtime is not None else _default_runtime()
    alive = [s for s in rt.services(docker=docker) if s.state in _ALIVE]
    if not alive:
        raise UsageError("nothing of servectl runs; start one with `servectl up NAME`")
    if len(alive) > 1:
        raise UsageError(
            "several services run (" + ", ".join(s.profile for s in alive) + "); use `servectl swap NAME`"
        )
    before = previous_profile(list(history.events()), alive[0].profile)
    if before is None:
        raise UsageError(
            f"history has no profile that ran before {alive[0].profile}; use `servectl swap NAME` "
            f"(or `servectl swap` for its declared rollback)"
        )
    return swap(
        target=before,
        docker=docker,
        history=history,
        runtime=rt,
        state_dir=state_dir,
        _kind="rollback",
        **kwargs,
    )


# -- rollback-check ------------------------------------------------------------------------------------------
def rollback_check(
    *,
    names: Sequence[str] | None,
    docker: Any,
    gpus: Any = None,
    preflight: Preflight | None = None,
    runtime: ServiceRuntime | None = None,
    resolve_profile: Callable[[str], Resolved] | None = None,
    list_names: Callable[[], Sequence[str]] | None = None,
    path_is_dir: Callable[[str], bool] = os.path.isdir,
) -> list[RollbackCheck]:
    """Prove that each profile's rollback target could start now. Starts nothing.

    For each profile (``names``; default: every profile that declares ``rollback:``) its target must validate,
    its image must be present (with the pinned digest), its model folder must exist, and preflight must pass
    counting the service the target would replace as stopped.
    """
    if resolve_profile is None:
        from servectl.resolve import resolve

        def resolve_profile(name: str) -> Resolved:
            return resolve(name)

    rt = runtime if runtime is not None else _default_runtime()
    check_preflight = preflight if preflight is not None else default_preflight
    if names is None:
        names = list(list_names() if list_names is not None else _profiles_with_rollback())
    running = list(rt.services(docker=docker))
    results = []
    for name in names:
        results.append(_check_one(name, docker, gpus, check_preflight, resolve_profile, running, path_is_dir))
    return results


def _profiles_with_rollback() -> list[str]:
    from servectl.loader import discover, load_profile_file

    out = []
    for name, file in sorted(discover().items()):
        if file.is_base:
            continue
        try:
            if load_profile_file(file).profile.rollback:
                out.append(name)
        except ServectlError:
            continue
    return out


def _check_one(
    name: str,
    docker: Any,
    gpus: Any,
    preflight: Preflight,
    resolve: Callable[[str], Resolved],
    running: Sequence[ServiceLike],
    path_is_dir: Callable[[str], bool],
) -> RollbackCheck:
    try:
        source = resolve(name)
    except ServectlError as e:
        return RollbackCheck(
            name, None, (CheckItem("declared", False, f"{name} itself does not load: {e.lines()[0]}"),)
        )
    target = source.loaded.profile.rollback
    if target is None:
        return RollbackCheck(
            name, None, (CheckItem("declared", False, f"{name} declares no `rollback:` target"),)
        )
    items = [CheckItem("declared", True, f"{name} rolls back to {target}")]
    try:
        resolved = resolve(target)
    except ServectlError as e:
        problems = e.lines()
        more = f" (+{len(problems) - 1} more: `servectl validate {target}`)" if len(problems) > 1 else ""
        items.append(CheckItem("validates", False, f"{target} does not validate: {problems[0]}{more}"))
        return RollbackCheck(name, target, tuple(items))
    items.append(CheckItem("validates", True, f"{target} validates and compiles"))
    items.append(_image_item(resolved, docker))
    model_dir = resolved.plan.docker.mounts[0].source
    items.append(
        CheckItem("model", True, f"model folder {model_dir} is there")
        if path_is_dir(model_dir)
        else CheckItem("model", False, f"model folder {model_dir} does not exist; fix model.path in {target}")
    )
    blocking = [s for s in running if _overlaps(s, resolved)]
    replacing = blocking[0] if len(blocking) == 1 else None
    try:
        preflight(resolved=resolved, replacing=replacing, skip=frozenset(), docker=docker, gpus=gpus)
        stopped = f" once {replacing.profile} is stopped" if replacing is not None else ""
        items.append(CheckItem("preflight", True, f"preflight passes{stopped}"))
    except PreflightFailed as e:
        items.append(CheckItem("preflight", False, f"preflight fails: {e.lines()[0]}"))
    except ServectlError as e:
        items.append(CheckItem("preflight", False, f"preflight could not run: {e.lines()[0]}"))
    if len(blocking) > 1:
        items.append(
            CheckItem("preflight", False, f"{target} would replace {len(blocking)} services at once")
        )
    return RollbackCheck(name, target, tuple(items))


def _image_item(resolved: Resolved, docker: Any) -> CheckItem:
    image = resolved.loaded.profile.image
    ref = resolved.plan.docker.image
    try:
        present = bool(docker.image_present(ref)) or (
            image.digest is not None and bool(docker.image_present(image.digest))
        )
    except ServectlError as e:
        return CheckItem("image", False, f"cannot ask Docker about {ref}: {e.lines()[0]}")
    if present:
        pinned = f" with pinned digest {image.digest}" if image.digest else " (no digest pinned)"
        return CheckItem("image", True, f"image {image.ref} is present{pinned}")
    if image.build == "standin" and image.digest is None:
        return CheckItem(
            "image", True, f"image {image.ref} is missing; servectl builds it on start (stand-in)"
        )
    if image.digest:
        return CheckItem(
            "image",
            False,
            f"image {image.ref} with digest {image.digest} is not on this host; `docker pull {ref}`",
        )
    return CheckItem("image", False, f"image {image.ref} is not on this host; `docker pull {image.ref}`")


# -- preflight -----------------------------------------------------------------------------------------------
def default_preflight(
    *, resolved: Resolved, replacing: ServiceLike | None, skip: frozenset[str], docker: Any, gpus: Any
) -> None:
    """servectl's preflight for ``resolved``, counting ``replacing``'s cards and port as free.

    Raises:
        PreflightFailed: a check failed; the message names it and the fix.
    """
    import importlib

    try:
        module: Any = importlib.import_module("servectl.preflight_profile")
    except ImportError:  # preflight arrives on its own branch; until then only the port is checked
        _port_preflight(resolved=resolved, replacing=replacing)
        return
    module.preflight_for_swap(resolved=resolved, replacing=replacing, skip=skip, docker=docker, gpus=gpus)


def _port_preflight(*, resolved: Resolved, replacing: ServiceLike | None) -> None:
    import socket

    serve = resolved.loaded.profile.serve
    if replacing is not None and replacing.port == serve.port:
        return
    with socket.socket(socket.AF_INET6 if ":" in serve.host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((serve.host, serve.port))
        except OSError as e:
            raise PreflightFailed(
                f"port.free: {serve.host}:{serve.port} is in use ({e.strerror}); "
                f"stop what listens there or change serve.port in {resolved.name}"
            ) from e
