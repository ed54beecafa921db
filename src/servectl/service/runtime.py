"""Services on the Docker engine: start one through the health gate, stop one, and the ``up``/``down`` commands.

Docker is the source of truth: every decision is derived from the containers that carry servectl's labels
(profile, plan hash, port, GPUs, stop grace), so a crashed or restarted servectl, or a container removed
behind its back, never leaves it confused. Containers servectl did not start are never touched; they are
reported as conflicts when they hold a port or a GPU that a profile needs.

Core functions (keyword-only, typed, used by the CLI and by ``swap``):

* :func:`start` / :func:`stop` - one container through the gate / gracefully down and gone.
* :func:`up` / :func:`down` - the commands: lock, conflict rules, preflight, history.

The read model (:func:`servectl.service.services.services`), the image (:mod:`servectl.service.image`), the
files a service needs (:mod:`servectl.service.host_files`) and its logs (:mod:`servectl.service.logs`) live
next door.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from servectl.adapters.conflicts import ConflictHandler, RestoreOutcome
from servectl.adapters.gpu import wait_until_free
from servectl.adapters.state import GateRecord, History, StateLock
from servectl.errors import (
    ServectlError,
    ServiceConflict,
    StartupFailed,
    StateDamaged,
    UpInterrupted,
    UsageError,
)
from servectl.paths import state_dir as default_state_dir
from servectl.preflight.checks import validate_skip
from servectl.preflight.model import StartContext
from servectl.preflight.request import check_start
from servectl.service.health import GateResult, Progress, wait_until_serving
from servectl.service.host_files import discard_key_file, read_api_key, remove_key_file, write_plan_files
from servectl.service.image import ImageBuilder, ensure_image
from servectl.service.journal import SwapJournal, clear_journal, refuse_if_unfinished, write_journal
from servectl.service.services import (
    ALIVE_STATES,
    ServiceInfo,
    find_services,
    running_refs,
    service_from_container,
    services,
)
from servectl.signals import Interrupt, SignalGuard, critical, signal_name

if TYPE_CHECKING:
    import httpx

    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.adapters.host import HostProbe
    from servectl.plan.resolve import Resolved
    from servectl.preflight.model import PreflightReport

#: How long a second servectl process waits for the first one (``SERVECTL_LOCK_TIMEOUT_S`` overrides).
DEFAULT_LOCK_TIMEOUT_S = 10.0


#: After a failed start, the engine gets at most this long to stop before it is killed.
FAILED_START_STOP_S = 5


#: Pause between two GPU snapshots while waiting for the cards to be free.
CARDS_POLL_S = 0.25
#: How long ``stop`` waits for Docker to report the container gone.
GONE_DEADLINE_S = 10.0


@dataclass(frozen=True)
class StartResult:
    """A container that passed the health gate."""

    service: ServiceInfo
    gate: GateResult
    url: str

    @property
    def startup_s(self) -> float:
        return self.gate.startup_s


@dataclass(frozen=True)
class StopResult:
    """A service that was stopped and removed."""

    profile: str
    container_name: str
    stop_s: float
    forced: bool  # SIGKILL after the grace period
    leaked_pids: tuple[int, ...] = ()
    gpus_checked: bool = False  # False when no GPU inventory was given or the service used no GPU
    exit_code: int | None = None
    gpus: tuple[int, ...] = ()
    unknown_cards: tuple[int, ...] = ()  # cards that could not be read (lost, or no process list) at the end


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
    gate: GateResult | None = None
    removed_stale: tuple[str, ...] = ()  # exited containers of this profile that were cleared first
    notes: tuple[str, ...] = ()  # what up did on the way (e.g. replaced a container that never passed its gate)

    @property
    def startup_s(self) -> float | None:
        return None if self.gate is None else self.gate.startup_s


def start(
    *,
    resolved: Resolved,
    docker: DockerEngine,
    on_phase: Callable[[Progress], None] | None = None,
    http: httpx.Client | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    state_dir: Path | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> StartResult:
    """Start the profile's container and wait until it passes the health gate.

    Writes the plan's generated files and the API-key file, creates and starts the container, then runs the
    gate. The image must be on the host: the command calls :func:`servectl.service.image.ensure_image` once,
    before preflight.
    No conflict rules and no lock: :func:`up` and ``swap`` add those. Passing the gate is recorded in the
    state folder's :class:`~servectl.adapters.state.GateRecord` (a failed write removes the container).

    Raises:
        UsageError: the API key's variable or file is missing (before anything starts).
        PreflightFailed: the image is missing.
        StartupFailed: the container did not pass the gate; it has been stopped and removed.
    """
    plan = resolved.plan
    env = os.environ if environ is None else environ
    api_key = read_api_key(plan, env)
    write_plan_files(plan, api_key=api_key)
    t0 = clock()
    container_id: str | None = None
    gates = GateRecord(state_dir or default_state_dir(env))
    try:
        if on_phase is not None:
            on_phase(Progress("starting", "creating the container"))
        gates.mark_pending(plan.docker.name)
        # a signal during create/start is raised once the id is known, so the except below can remove it
        with critical():
            container_id = docker.create_and_start(plan.docker, environ=env)
        gate = wait_until_serving(
            plan=plan,
            container_id=container_id,
            docker=docker,
            http=http,
            on_phase=on_phase,
            clock=clock,
            api_key=api_key,
            started_at=t0,
        )
        gates.mark(container_id)
        gates.clear_pending(plan.docker.name)
    except BaseException as err:
        # Whatever went wrong (gate, engine, Ctrl-C), nothing we started stays behind.
        if container_id is not None:
            grace_s = min(FAILED_START_STOP_S, plan.docker.stop_timeout_s)
            _discard(docker, container_id, grace_s=grace_s, clock=clock, sleep=sleep)
        gates.clear_pending(plan.docker.name)  # nothing of this start stays, its record neither
        discard_key_file(plan)
        if isinstance(err, StartupFailed) and container_id is not None:
            raise StartupFailed(
                f"{err.message}; the container was removed",
                last_log_lines=err.last_log_lines,
                exit_code_of_container=err.exit_code_of_container,
                oom_killed=err.oom_killed,
            ) from err
        raise
    state = docker.inspect(container_id)
    if state is None:
        raise StartupFailed(f"{plan.profile}: the container vanished right after passing the health gate")
    service = service_from_container(
        state, now=time.time(), answers_health=True, passed_gate=True, current_plan_hash=plan.plan_hash
    )
    return StartResult(service=service, gate=gate, url=plan.url)


def _discard(
    docker: DockerEngine, container_id: str, *, grace_s: int, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    with contextlib.suppress(ServectlError):
        docker.stop(container_id, timeout_s=grace_s)
    docker.remove(container_id, force=True)
    _wait_gone(docker, container_id, GONE_DEADLINE_S, clock=clock, sleep=sleep)


def _wait_gone(
    docker: DockerEngine,
    container_id: str,
    deadline_s: float,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    deadline = clock() + deadline_s
    while docker.inspect(container_id) is not None:
        if clock() > deadline:
            raise ServectlError(
                f"container {container_id[:12]} is still there {deadline_s:g} s after removal; "
                f"check docker ps -a and remove it with docker rm -f {container_id[:12]}"
            )
        sleep(0.05)


def stop(
    *,
    service: ServiceInfo,
    docker: DockerEngine,
    gpus: GpuInventory | None = None,
    free_deadline_s: float = 30.0,
    state_dir: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StopResult:
    """Stop a service gracefully and make sure it is gone.

    SIGTERM, the service's grace period (its ``servectl.stop-grace-s`` label), then SIGKILL; remove the
    container and confirm Docker no longer has it; delete the API-key file servectl wrote for it. With a
    GPU inventory, wait until its cards are free (:func:`servectl.adapters.gpu.wait_until_free`), or name
    the pids left behind and the cards that could not be read.

    Raises:
        ServectlError: the container is still there after removal.
    """
    t0 = clock()
    before = docker.inspect(service.container_id)
    if before is not None and before.running:
        docker.stop(service.container_id, timeout_s=service.stop_grace_s)
    after = docker.inspect(service.container_id)
    stop_s = clock() - t0
    exit_code = after.exit_code if after is not None else None
    forced = bool(
        before is not None and before.running and after is not None and exit_code == 137 and not after.oom_killed
    )
    docker.remove(service.container_id, force=True)
    _wait_gone(docker, service.container_id, GONE_DEADLINE_S, clock=clock, sleep=sleep)
    last_known = after or before
    remove_key_file(last_known.mounts if last_known is not None else (), state_dir or default_state_dir())
    leaked: tuple[int, ...] = ()
    unknown: tuple[int, ...] = ()
    checked = gpus is not None and bool(service.gpus)
    if gpus is not None and service.gpus:
        cards = wait_until_free(gpus, service.gpus, free_deadline_s, poll_s=CARDS_POLL_S, clock=clock, sleep=sleep)
        leaked, unknown = cards.leaked_pids, cards.unknown_cards
    return StopResult(
        profile=service.profile,
        container_name=service.container_name,
        stop_s=stop_s,
        forced=forced,
        leaked_pids=leaked,
        gpus_checked=checked,
        exit_code=exit_code,
        gpus=service.gpus,
        unknown_cards=unknown,
    )


def lock_timeout_default(environ: Mapping[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    raw = env.get("SERVECTL_LOCK_TIMEOUT_S")
    try:
        return float(raw) if raw else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        raise UsageError(f"SERVECTL_LOCK_TIMEOUT_S={raw!r} is not a number of seconds") from None


def up(
    *,
    name: str,
    docker: DockerEngine,
    gpus: GpuInventory | None = None,
    host: HostProbe | None = None,
    force: Iterable[str] = (),
    on_report: Callable[[PreflightReport], None] | None = None,
    http: httpx.Client | None = None,
    on_phase: Callable[[Progress], None] | None = None,
    environ: Mapping[str, str] | None = None,
    state_dir: Path | None = None,
    lock_timeout_s: float | None = None,
    scope: Mapping[str, str] | None = None,
    resolved: Resolved | None = None,
    build_image: ImageBuilder | None = None,
    handle_signals: bool = True,
) -> UpResult:
    """Start profile ``name`` unless it already runs; refuse when another service holds its GPUs or port.

    Args:
        name, docker: the profile; the engine.
        gpus, host: the GPU inventory and host probe preflight reads (None: NVML, psutil).
        force, on_report: preflight check ids to skip (recorded); gets the report before anything starts.
        http, on_phase: HTTP client for the gate's probes; progress callback of the gate.
        environ, state_dir: environment (API key, pass-through variables; default ``os.environ``); state folder.
        lock_timeout_s: wait for another servectl process; default 10 s or ``SERVECTL_LOCK_TIMEOUT_S``.
        scope, build_image: only containers with these labels are servectl's; builds the stand-in (tests).
        resolved: the profile already resolved (else ``resolve(name)``).
        handle_signals: SIGINT/SIGTERM/SIGHUP remove what was started (main thread only).

    Raises:
        ProfileError / UsageError: the profile does not load (nothing was created).
        ServiceConflict: the profile runs with another plan; another service holds its GPUs, port or name.
        LockTimeout / PreflightFailed / StartupFailed: another servectl is changing services; see :func:`start`.
    """
    from servectl.plan.resolve import resolve

    env = os.environ if environ is None else environ
    resolved = resolved or resolve(name, environ=env)
    skip = validate_skip(force)  # an unknown check id is a usage error before anything happens
    state = state_dir or default_state_dir(env)
    timeout = lock_timeout_default(env) if lock_timeout_s is None else lock_timeout_s
    with StateLock(state, timeout, purpose=f"up {resolved.name}"):
        # A journal of another transaction must be settled first; one of an `up` of this profile that was
        # killed is settled here: its container never passed the gate and is replaced below.
        own_journal = refuse_if_unfinished(state, up_of=resolved.name)
        # an engine that does not answer fails here, on the first listing (preflight asks it again later)
        current = services(docker=docker, probe=False, plan_hash_of=None, state_dir=state, scope=scope)
        running = _already_running(resolved, current)
        if running is not None:
            if own_journal is not None:
                clear_journal(state)
            return UpResult(action="already-running", service=running, url=running.url)
        removed, notes = _clear_own_leftovers(resolved, current, docker=docker, gpus=gpus, state=state)
        ensure_image(resolved, docker=docker, build_image=build_image, on_phase=on_phase)  # once, before preflight
        check_start(
            resolved,
            docker=docker,
            gpus=gpus,
            host=host,
            context=StartContext(services=running_refs(current)),  # none may hold the port or a card
            skip=skip,
            state_dir=state,
            on_report=on_report,
        )
        started = _start_recorded(
            resolved,
            docker=docker,
            state=state,
            scope=scope,
            on_phase=on_phase,
            http=http,
            environ=env,
            handle_signals=handle_signals,
        )
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
    resolved: Resolved,
    current: Sequence[ServiceInfo],
    *,
    docker: DockerEngine,
    gpus: GpuInventory | None,
    state: Path,
) -> tuple[list[str], list[str]]:
    """Remove the profile's containers that never passed their gate or exited: (names removed, notes)."""
    removed: list[str] = []
    notes: list[str] = []
    for svc in current:
        if svc.profile != resolved.name:
            continue
        if svc.running:
            notes.append(
                f"{svc.container_name} never passed its health gate (servectl was stopped while it "
                "started): replaced it"
            )
            stop(service=svc, docker=docker, gpus=gpus, state_dir=state)
        else:
            docker.remove(svc.container_id, force=True)
        removed.append(svc.container_name)
    # A stopped servectl container under the plan's name (of any profile) would make the create fail.
    for c in docker.containers_named(resolved.plan.docker.name):
        if c.managed and not c.running and c.name not in removed:
            docker.remove(c.id, force=True)
            removed.append(c.name)
    return removed, notes


def _start_recorded(
    resolved: Resolved,
    *,
    docker: DockerEngine,
    state: Path,
    scope: Mapping[str, str] | None,
    on_phase: Callable[[Progress], None] | None,
    http: httpx.Client | None,
    environ: Mapping[str, str],
    handle_signals: bool,
) -> StartResult:
    """``up``'s start, all-or-nothing: the service passes the gate *and* is recorded, or nothing is left.

    A journal marks the start (a ``kill -9`` leaves it for ``servectl recover`` or the next ``up``);
    SIGINT/SIGTERM/SIGHUP remove what was started and raise :class:`UpInterrupted`; a failed history write
    after the gate removes the container too (an unrecorded service is a service nobody knows about).
    """
    plan = resolved.plan
    history = History(state)
    write_journal(
        state,
        SwapJournal(
            pid=os.getpid(),
            from_profile=None,
            to_profile=resolved.name,
            phase="start-target",
            started_at=time.time(),
            kind="up",
        ),
    )
    started: StartResult | None = None
    with SignalGuard(handle_signals, then="defer") as guard:
        try:
            started = start(
                resolved=resolved,
                docker=docker,
                on_phase=on_phase,
                http=http,
                environ=environ,
                state_dir=state,
            )
            guard.mode = "defer"  # it passed the gate: finish the bookkeeping whatever arrives now
            history.record(
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
            clear_journal(state)
            with contextlib.suppress(ServectlError):
                history.record(
                    {"event": "failed", "profile": resolved.name, "plan_hash": plan.plan_hash, "reason": err.message}
                )
            raise
        except Interrupt as intr:
            guard.mode = "defer"
            if started is not None:  # the signal came between the gate and the bookkeeping
                with contextlib.suppress(ServectlError):
                    stop(service=started.service, docker=docker, state_dir=state)
            left = _remove_ungated(resolved.name, docker=docker, state=state, scope=scope)
            clear_journal(state)
            with contextlib.suppress(ServectlError):
                history.record({"event": "interrupted", "profile": resolved.name, "signal": signal_name(intr.signum)})
            raise UpInterrupted(
                f"interrupted ({signal_name(intr.signum)}) while {resolved.name} was starting; "
                + (f"could not remove {left}: `docker rm -f {left}`" if left else "what it started was removed")
                + "; nothing of it runs"
            ) from None
        except BaseException as err:
            # servectl itself failed (a bug, a failed state write) after or while starting: remove what runs
            # unrecorded, keep nothing half-done, say what happened.
            guard.mode = "defer"
            if started is not None:
                with contextlib.suppress(ServectlError):
                    stop(service=started.service, docker=docker, state_dir=state)
                GateRecord(state).forget(started.service.container_id)
            left = _remove_ungated(resolved.name, docker=docker, state=state, scope=scope)
            clear_journal(state)
            if not isinstance(err, Exception) or (started is None and not left and isinstance(err, ServectlError)):
                raise  # Ctrl-C without our handlers, or a clear error before anything ran: as it is
            reason = err.lines()[0] if isinstance(err, ServectlError) else f"{type(err).__name__}: {err}"
            raise ServectlError(
                f"{resolved.name} {'passed its health gate' if started else 'was starting'}, but servectl failed: "
                f"{reason}; "
                + (f"could not remove {left}: `docker rm -f {left}`" if left else "it was removed")
                + ", nothing of it runs"
            ) from err
    clear_journal(state)
    return started


def _remove_ungated(profile: str, *, docker: DockerEngine, state: Path, scope: Mapping[str, str] | None) -> str:
    """Remove containers of ``profile`` that never passed the gate; the name of one that would not go, or ''."""
    try:
        for svc in services(docker=docker, probe=False, plan_hash_of=None, state_dir=state, scope=scope):
            if svc.profile == profile and svc.state not in ("ready", "unhealthy"):
                try:
                    docker.remove(svc.container_id, force=True)
                except ServectlError:
                    return svc.container_name
    except ServectlError:
        return profile
    return ""


def down(
    *,
    name: str | None,
    docker: DockerEngine,
    gpus: GpuInventory | None = None,
    state_dir: Path | None = None,
    lock_timeout_s: float | None = None,
    scope: Mapping[str, str] | None = None,
    free_deadline_s: float = 30.0,
    environ: Mapping[str, str] | None = None,
    conflicts: ConflictHandler | None = None,
) -> DownResult:
    """Stop the service of profile ``name`` (or the only service when ``name`` is None).

    Once no servectl service runs any more, the conflicts a swap stopped start again (see
    :func:`restore_after_down`); ``conflicts`` replaces the Docker/compose handler in tests.

    Returns:
        The containers stopped (none when the profile was not running) and the conflicts restored.

    Raises:
        UsageError: no ``name`` while several services run, or ``name`` is neither a service nor a profile.
        LockTimeout: another servectl process is changing services.
    """
    env = os.environ if environ is None else environ
    state = state_dir or default_state_dir(env)
    timeout = lock_timeout_default(env) if lock_timeout_s is None else lock_timeout_s
    with StateLock(state, timeout, purpose=f"down {name or ''}".strip()):
        targets = find_services(name, docker=docker, scope=scope, state_dir=state)
        if name is None and len(targets) > 1:
            names = ", ".join(sorted({s.profile for s in targets}))
            raise UsageError(
                f"several services run ({names}): name the one to stop, e.g. servectl down {targets[0].profile}"
            )
        if name is not None and not targets:
            _require_known_profile(name)
            return DownResult(stopped=())
        results = [
            stop(service=svc, docker=docker, gpus=gpus, free_deadline_s=free_deadline_s, state_dir=state)
            for svc in targets
        ]
        history = History(state)
        for result in results:
            history.record(
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
        restored = restore_after_down(docker=docker, state_dir=state, scope=scope, conflicts=conflicts)
    except StateDamaged as err:  # the service is down; only the record of what to restore is unreadable
        return DownResult(stopped=tuple(results), warning=err.message)
    return DownResult(stopped=tuple(results), restored=restored)


def _require_known_profile(name: str) -> None:
    from servectl.profile.loader import discover

    if name not in discover():
        raise UsageError(f"no servectl service and no profile named {name}; servectl status lists the services")


def restore_after_down(
    *,
    docker: DockerEngine,
    state_dir: Path,
    scope: Mapping[str, str] | None = None,
    conflicts: ConflictHandler | None = None,
) -> RestoreOutcome | None:
    """After ``down``: once no servectl service runs, start again every conflict servectl stopped.

    Returns:
        What was restored (``None``: nothing recorded, or a servectl service still runs).
    """
    from servectl.adapters.conflicts import DockerConflicts, load_stopped, restore_recorded

    if not load_stopped(state_dir):
        return None
    running = services(docker=docker, probe=False, plan_hash_of=None, state_dir=state_dir, scope=scope)
    if any(s.state in ALIVE_STATES for s in running):
        return None
    handler = conflicts if conflicts is not None else DockerConflicts(docker=docker)
    return restore_recorded(handler=handler, state_dir=state_dir)


class ServiceRuntime(Protocol):
    """What ``swap`` and ``rollback`` drive: :class:`DockerRuntime`, or ``servectl.testing.swap.FakeRuntime``."""

    def services(
        self,
        *,
        docker: DockerEngine,
        probe: bool = ...,
        plan_hash_of: Callable[[str], str | None] | None = ...,
        state_dir: Path | None = ...,
        scope: Mapping[str, str] | None = ...,
    ) -> Sequence[ServiceInfo]: ...

    def start(
        self,
        *,
        resolved: Resolved,
        docker: DockerEngine,
        on_phase: Callable[[Progress], None] | None = ...,
        state_dir: Path | None = ...,
    ) -> StartResult: ...

    def stop(
        self,
        *,
        service: ServiceInfo,
        docker: DockerEngine,
        gpus: GpuInventory | None = ...,
        state_dir: Path | None = ...,
    ) -> StopResult: ...

    def ensure_image(
        self, resolved: Resolved, *, docker: DockerEngine, on_phase: Callable[[Progress], None] | None = ...
    ) -> None: ...


class DockerRuntime:
    """The runtime as one object: what ``swap`` and ``rollback`` drive (tests give them a fake instead)."""

    services = staticmethod(services)
    start = staticmethod(start)
    stop = staticmethod(stop)
    ensure_image = staticmethod(ensure_image)
