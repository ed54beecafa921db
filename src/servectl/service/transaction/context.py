"""The context of one transaction: the adapters and state it works with, and the one home of their defaults.

``swap``, ``rollback``, ``recover``, ``up`` and ``down`` build their :class:`TxContext` with
:func:`build_context` (the state folder from ``SERVECTL_HOME``, the state lock with its timeout, the history
in that folder, Docker/compose conflicts, the Docker runtime, profile resolution); tests pass fakes for any of
them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.adapters.conflicts import STOPPED_CONFLICTS_FILE, ConflictHandler
from servectl.adapters.state import GATE_DIR, HISTORY_FILE, LOCK_FILE, PENDING_DIR, HistoryLog, prove_writable
from servectl.errors import ServectlError, UsageError
from servectl.service.container import ServiceRuntime, StopResult
from servectl.service.health import Progress
from servectl.service.journal import JOURNAL_FILE, SwapJournal, write_journal
from servectl.service.services import ServiceInfo
from servectl.service.transaction.model import PhaseEvent, PhaseMark, PhaseTiming

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.plan.resolve import Resolved

#: How long a second servectl process waits for the first one (``SERVECTL_LOCK_TIMEOUT_S`` overrides).
DEFAULT_LOCK_TIMEOUT_S = 10.0

#: Under the state folder: the files a plan generates, one folder per profile (see ``plan.compile``).
GENERATED_DIR = "generated"

Lock = Callable[[str], AbstractContextManager[object]]
"""``lock(purpose)``: the state lock, held while services change (purpose is shown to a process that waits)."""


def lock_timeout_default(environ: Mapping[str, str] | None = None) -> float:
    """``SERVECTL_LOCK_TIMEOUT_S``, else :data:`DEFAULT_LOCK_TIMEOUT_S`.

    Raises:
        UsageError: the variable is not a number.
    """
    env = os.environ if environ is None else environ
    raw = env.get("SERVECTL_LOCK_TIMEOUT_S")
    try:
        return float(raw) if raw else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        raise UsageError(f"SERVECTL_LOCK_TIMEOUT_S={raw!r} is not a number of seconds") from None


@dataclass
class TxContext:
    """The adapters and state one transaction works with (see :func:`build_context` for the defaults).

    ``phases`` collects the timing of each phase run through :meth:`phase`; ``on_phase`` hears of each one
    as it begins, progresses and ends.
    """

    docker: DockerEngine
    gpus: GpuInventory | None
    runtime: ServiceRuntime
    conflicts: ConflictHandler
    history: HistoryLog
    lock: Lock
    state_dir: Path
    resolve: Callable[[str], Resolved]
    environ: Mapping[str, str]
    scope: Mapping[str, str] | None = None
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    on_phase: Callable[[PhaseEvent], None] | None = None
    phases: list[PhaseTiming] = field(default_factory=list)

    def services(self, *, probe: bool) -> list[ServiceInfo]:
        """The servectl services now (no drift: a transaction never needs it)."""
        return list(
            self.runtime.services(
                docker=self.docker, probe=probe, plan_hash_of=None, state_dir=self.state_dir, scope=self.scope
            )
        )

    def stop(self, service: ServiceInfo) -> StopResult:
        """Stop and remove ``service`` (waiting for its cards when there is a GPU inventory)."""
        return self.runtime.stop(service=service, docker=self.docker, gpus=self.gpus, state_dir=self.state_dir)

    def emit(self, event: PhaseEvent) -> None:
        if self.on_phase is not None:
            with suppress(Exception):  # rendering must never break the transaction
                self.on_phase(event)

    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[PhaseMark]:
        """Time a phase, tell ``on_phase`` it began and ended; set ``mark.failed`` for a handled failure."""
        self.emit(PhaseEvent(name, "begin", detail=detail))
        began = self.clock()
        ok = False
        mark = PhaseMark()
        try:
            yield mark
            ok = not mark.failed
        finally:
            timing = PhaseTiming(name, self.clock() - began, ok, detail)
            self.phases.append(timing)
            self.emit(PhaseEvent(name, "end", timing.duration_s, ok, detail))

    def progress(self, phase: str) -> Callable[[Progress], None]:
        """The runtime's start progress, forwarded as ``progress`` events of ``phase``."""

        def forward(progress: Progress) -> None:
            parts = [progress.phase]
            if progress.percent is not None:
                parts.append(f"{progress.percent}%")
            if progress.detail:
                parts.append(progress.detail)
            self.emit(PhaseEvent(phase, "progress", detail=" ".join(parts), step=progress.phase))

        return forward

    def record(self, event: dict[str, Any]) -> None:
        """Append to the history; a failed write is not an error (the services are right, history is a record)."""
        with suppress(ServectlError, OSError):
            self.history.record(event)

    def prove_state_writable(self, *, profiles: Iterable[str] = (), repairs: Iterable[str] = ()) -> None:
        """Before anything changes: every file and folder of the state folder this transaction may write
        (gate records, generated files of ``profiles``, the journal, the record of stopped conflicts, the
        locks) is of the right kind and writable; ``repairs`` are files the command itself sets aside.

        Raises:
            StateDamaged: one line naming the entry and the fix; nothing was changed.
        """
        skip = set(repairs)
        prove_writable(
            self.state_dir,
            folders=(GATE_DIR, f"{GATE_DIR}/{PENDING_DIR}", GENERATED_DIR, *(f"{GENERATED_DIR}/{p}" for p in profiles)),
            files=[
                f for f in (LOCK_FILE, f"{HISTORY_FILE}.lock", JOURNAL_FILE, STOPPED_CONFLICTS_FILE) if f not in skip
            ],
        )

    def journal_at(self, journal: SwapJournal, phase: str, note: str | None = None) -> SwapJournal:
        """``journal`` moved to ``phase`` (and ``note``), written to the state folder."""
        moved = replace(journal, phase=phase, note=journal.note if note is None else note)
        write_journal(self.state_dir, moved)
        return moved


def build_context(
    *,
    docker: DockerEngine,
    gpus: GpuInventory | None = None,
    state_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    lock_timeout_s: float | None = None,
    runtime: ServiceRuntime | None = None,
    conflicts: ConflictHandler | None = None,
    history: HistoryLog | None = None,
    lock: Lock | None = None,
    resolve_profile: Callable[[str], Resolved] | None = None,
    scope: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    on_phase: Callable[[PhaseEvent], None] | None = None,
) -> TxContext:
    """A :class:`TxContext` with servectl's defaults for whatever is not given: the one home of the wiring.

    Args:
        docker, gpus: the engine; the GPU inventory stops wait on (None: no wait).
        state_dir, environ: the state folder (default ``SERVECTL_HOME`` or the platform's); the environment.
        lock_timeout_s: how long the lock waits for another servectl (default :func:`lock_timeout_default`).
        runtime, conflicts, history, lock, resolve_profile: :class:`~servectl.service.container.DockerRuntime`,
            :class:`~servectl.adapters.conflicts.DockerConflicts`, the state folder's history and lock,
            :func:`servectl.plan.resolve.resolve` unless given (tests pass fakes).
        scope, on_phase: only containers with these labels are servectl's (tests); hears of each phase.
        clock, wall_clock, sleep: monotonic seconds, epoch seconds, the pause while waiting.

    Raises:
        UsageError: ``SERVECTL_LOCK_TIMEOUT_S`` is not a number.
    """
    env = os.environ if environ is None else environ
    from servectl.paths import state_dir as default_state_dir

    folder = default_state_dir(env) if state_dir is None else state_dir
    if lock is None:
        from servectl.adapters.state import StateLock

        timeout = lock_timeout_default(env) if lock_timeout_s is None else lock_timeout_s

        def lock(purpose: str) -> AbstractContextManager[object]:
            return StateLock(folder, timeout, purpose=purpose)

    if history is None:
        from servectl.adapters.state import History

        history = History(folder)
    if conflicts is None:
        from servectl.adapters.conflicts import DockerConflicts

        conflicts = DockerConflicts(docker=docker)
    if runtime is None:
        from servectl.service.container import DockerRuntime

        runtime = DockerRuntime()
    if resolve_profile is None:
        from servectl.plan.resolve import resolve

        def resolve_profile(name: str) -> Resolved:
            return resolve(name, environ=env)

    return TxContext(
        docker=docker,
        gpus=gpus,
        runtime=runtime,
        conflicts=conflicts,
        history=history,
        lock=lock,
        state_dir=folder,
        resolve=resolve_profile,
        environ=env,
        scope=scope,
        clock=clock,
        wall_clock=wall_clock,
        sleep=sleep,
        on_phase=on_phase,
    )
