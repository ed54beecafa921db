"""Fakes for testing ``swap``/``rollback`` without Docker: a service runtime, conflicts, history, lock, clock.

:class:`FakeRuntime` keeps services in memory and follows the runtime's contract: ``start`` passes the gate or
raises :class:`StartupFailed` after removing what it created; ``stop`` removes the container. It refuses to
start a service whose port, cards or container name are still held, so a test catches a start-before-stop.
Each profile's start can be scripted (:class:`StartScript`): fail, take time, or run a hook (send a signal).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from servectl.adapters.conflicts import StoppedConflict, conflict_key
from servectl.errors import EngineUnavailable, LockTimeout, ServectlError, ServiceConflict, StartupFailed
from servectl.plan.resolve import Resolved
from servectl.profile.models import ConflictSpec
from servectl.service.container import CARDS_FREE_DEADLINE_S, ServiceRuntime, StartResult, StopResult
from servectl.service.health import GatePassage, Progress
from servectl.service.services import ALIVE_STATES, ServiceInfo, ServiceState

if TYPE_CHECKING:
    from servectl.adapters.gpu import GpuInventory


class FakeClock:
    """A monotonic clock that only moves when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def fake_service(
    *,
    container_id: str,
    container_name: str,
    profile: str,
    plan_hash: str,
    state: ServiceState = "ready",
    port: int | None = None,
    gpus: tuple[int, ...] = (),
    host: str = "127.0.0.1",
) -> ServiceInfo:
    """A service as the runtime's ``services()`` reports it, with what swap does not read left empty."""
    return ServiceInfo(
        container_id=container_id,
        container_name=container_name,
        profile=profile,
        plan_hash=plan_hash,
        state=state,
        exit_code=None,
        oom_killed=False,
        host=host,
        port=port,
        gpus=gpus,
        started_at=None,
        uptime_s=None,
        stop_grace_s=0,
        drift=None,
        running=state in ALIVE_STATES,
    )


@dataclass
class StartScript:
    """How a profile's start behaves in :class:`FakeRuntime`.

    Attributes:
        startup_s: clock time the start takes (until the gate passes or the failure shows).
        failure: message of the :class:`StartupFailed` to raise; ``None``: it comes up.
        last_log_lines: the log tail the failure carries.
        exit_code: the container's exit code the failure carries.
        error: another error to raise instead (e.g. :class:`EngineUnavailable`).
        hook: called with the runtime while the start runs (the container exists), e.g. to send a signal.
        times: how many starts this script applies to (``None``: all), then the profile starts normally.
    """

    startup_s: float = 2.0
    failure: str | None = None
    last_log_lines: tuple[str, ...] = ()
    exit_code: int | None = None
    error: ServectlError | None = None
    hook: Callable[[FakeRuntime], None] | None = None
    times: int | None = None


class FakeRuntime:
    """In-memory services with the runtime's ``services``/``start``/``stop`` (see module docstring)."""

    def __init__(self, clock: FakeClock | None = None, *, stop_s: float = 1.0) -> None:
        self.clock = clock or FakeClock()
        self.stop_s = stop_s
        self.running: dict[str, ServiceInfo] = {}
        self.scripts: dict[str, StartScript] = {}
        self.ignores_sigterm: set[str] = set()
        self.leaks_pids: dict[str, tuple[int, ...]] = {}
        self.stop_error: dict[str, ServectlError] = {}
        self.image_error: dict[str, ServectlError] = {}
        self.stop_hook: Callable[[FakeRuntime, ServiceInfo], None] | None = None
        self.calls: list[tuple[str, str]] = []
        self.stop_gpus: list[GpuInventory] = []
        self._ids = itertools.count(1)

    # -- set-up
    def script(self, profile: str, **kwargs: Any) -> None:
        self.scripts[profile] = StartScript(**kwargs)

    def run(self, resolved: Resolved, *, state: ServiceState = "ready") -> ServiceInfo:
        """Put a service in place as if it had been started earlier."""
        service = self._service_of(resolved, state)
        self.running[service.container_name] = service
        return service

    def _service_of(self, resolved: Resolved, state: ServiceState) -> ServiceInfo:
        plan = resolved.plan
        return fake_service(
            container_id=f"{next(self._ids):012x}",  # hex, as Docker ids are (state records key on them)
            container_name=plan.docker.name,
            profile=plan.profile,
            plan_hash=plan.plan_hash,
            state=state,
            port=resolved.loaded.profile.serve.port,
            gpus=tuple(int(d) for d in plan.docker.device_ids),
        )

    def profiles(self) -> list[str]:
        """Profiles of the services now present, sorted."""
        return sorted(s.profile for s in self.running.values())

    # -- the runtime API
    def services(
        self, *, probe: bool = True, plan_hash_of: Callable[[str], str | None] | None = None
    ) -> list[ServiceInfo]:
        return list(self.running.values())

    def ensure_image(self, resolved: Resolved, *, on_phase: Callable[[Progress], None] | None = None) -> None:
        self.calls.append(("ensure_image", resolved.name))
        if resolved.name in self.image_error:
            raise self.image_error[resolved.name]

    def start(self, *, resolved: Resolved, on_phase: Callable[[Progress], None] | None = None) -> StartResult:
        name = resolved.name
        self.calls.append(("start", name))
        new = self._service_of(resolved, "starting")
        for other in self.running.values():
            if other.container_name == new.container_name:
                raise ServiceConflict(f"container name {new.container_name} is in use by {other.profile}")
            if other.port == new.port or set(other.gpus) & set(new.gpus):
                raise ServiceConflict(f"{other.profile} still holds the port or cards {name} needs")
        script = self.scripts.get(name, StartScript())
        remaining = script.times
        if remaining is not None:
            if remaining <= 0:
                script = StartScript()
            else:
                script.times = remaining - 1
        self.running[new.container_name] = new
        if on_phase is not None:
            on_phase(Progress("container-started"))
        try:
            if script.hook is not None:
                script.hook(self)
            self.clock.advance(script.startup_s)
            if script.error is not None:
                raise script.error
            if script.failure is not None:
                raise StartupFailed(
                    script.failure,
                    last_log_lines=script.last_log_lines,
                    exit_code_of_container=script.exit_code,
                )
        except BaseException:
            self.running.pop(new.container_name, None)  # the runtime removes what it created
            raise
        ready = replace(new, state="ready", running=True)
        self.running[new.container_name] = ready
        gate = GatePassage(startup_s=script.startup_s, phases=[])
        return StartResult(service=ready, gate=gate, url=f"http://{ready.host}:{ready.port}")

    def stop(
        self, *, service: ServiceInfo, gpus: GpuInventory, free_deadline_s: float = CARDS_FREE_DEADLINE_S
    ) -> StopResult:
        self.calls.append(("stop", service.profile))
        self.stop_gpus.append(gpus)  # what the stop waited on for the cards (a null inventory: no wait)
        if service.profile in self.stop_error:
            raise self.stop_error[service.profile]
        if self.stop_hook is not None:
            self.stop_hook(self, service)
        forced = service.profile in self.ignores_sigterm
        took = self.stop_s + (5.0 if forced else 0.0)
        self.clock.advance(took)
        self.running.pop(service.container_name, None)
        return StopResult(
            profile=service.profile,
            container_name=service.container_name,
            stop_s=took,
            forced=forced,
            leaked_pids=self.leaks_pids.get(service.profile, ()),
            gpus=service.gpus,
        )


class FakeConflicts:
    """Conflicts in memory: which are running, and what stop/restore were asked."""

    def __init__(
        self,
        running: Sequence[tuple[str, str]] = (),
        *,
        compose_available: bool = True,
        clock: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.running: set[tuple[str, str]] = set(running)
        self.compose_available = compose_available
        self.fail_restore: set[str] = set()
        self.fail_stop: set[str] = set()
        self.calls: list[tuple[str, str]] = []
        self._clock = clock

    def check_available(self, specs: Sequence[ConflictSpec]) -> None:
        if any(s.compose_file for s in specs) and not self.compose_available:
            raise EngineUnavailable("no compose CLI; install docker-compose. Nothing was stopped")

    def stop(self, spec: ConflictSpec, *, stopped_by: str) -> StoppedConflict | None:
        kind, ref = conflict_key(spec)
        self.calls.append(("stop", ref))
        if ref in self.fail_stop:
            raise ServectlError(f"cannot stop {ref}")
        if (kind, ref) not in self.running:
            return None
        self.running.discard((kind, ref))
        return StoppedConflict(kind, ref, (f"id-{ref}",), stopped_by, self._clock())

    def restore(self, stopped: StoppedConflict) -> None:
        self.calls.append(("restore", stopped.ref))
        if stopped.ref in self.fail_restore:
            raise ServectlError(f"{stopped.ref} would not start")
        self.running.add((stopped.kind, stopped.ref))


class FakeHistory:
    """History in memory."""

    def __init__(self, events: Sequence[Mapping[str, Any]] = ()) -> None:
        self._events: list[dict[str, Any]] = [dict(e) for e in events]

    def record(self, event: dict[str, Any]) -> None:
        self._events.append(dict(event))

    def events(self) -> list[dict[str, Any]]:
        return list(self._events)

    def readable_events(self) -> tuple[list[dict[str, Any]], str | None]:
        return self.events(), None


class FakeLock:
    """The state lock: ``held_by`` set means another process holds it (entering raises LockTimeout)."""

    def __init__(self, held_by: int | None = None) -> None:
        self.held_by = held_by
        self.purposes: list[str] = []

    @contextlib.contextmanager
    def __call__(self, purpose: str = "") -> Iterator[None]:
        if self.held_by is not None:
            raise LockTimeout(
                f"another servectl process (pid {self.held_by}) is changing services; let it finish, then try again"
            )
        self.purposes.append(purpose)
        yield


if TYPE_CHECKING:
    _fits: ServiceRuntime = FakeRuntime()  # mypy: the fake keeps the runtime's contract
