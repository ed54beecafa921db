"""One container: start it through the health gate, stop it and make sure it is gone.

The primitives every command builds on (:func:`start`, :func:`stop`), with no lock and no conflict rules:
``up``/``down`` (:mod:`servectl.service.runtime`), ``swap`` and the transaction's undo
(:mod:`servectl.service.transaction`) add those. :class:`ServiceRuntime` is what the transaction drives:
:class:`DockerRuntime` here, ``servectl.testing.swap.FakeRuntime`` in tests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from servectl.adapters.state import GateRecord, HistoryLog
from servectl.errors import ServectlError, StartupFailed
from servectl.service.clocks import Clocks
from servectl.service.host_files import discard_key_file, read_plan_keys, remove_key_file, write_plan_files
from servectl.service.image import ImageBuilder, ensure_image
from servectl.service.services import ServiceInfo, ServiceRecords, adopted_in, service_from_container, services
from servectl.signals import critical

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.adapters.http import HttpAdapter
    from servectl.plan.resolve import Resolved
    from servectl.service.health import GatePassage, Progress

#: After a failed start, the engine gets at most this long to stop before it is killed.
FAILED_START_STOP_S = 5


#: Pause between two GPU snapshots while waiting for the cards to be free.
CARDS_POLL_S = 0.25
#: How long a stop (``down``, swap's stop of the old service, an undo) waits for the service's cards to be free.
CARDS_FREE_DEADLINE_S = 30.0
#: How long ``stop`` waits for Docker to report the container gone.
GONE_DEADLINE_S = 10.0


@dataclass(frozen=True)
class StartResult:
    """A container that passed the health gate."""

    service: ServiceInfo
    gate: GatePassage
    url: str
    resumed: bool = False  # a warm standby's resume (no container start)

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
    released: bool = False  # a warm standby's release (the container still runs), not a stop


def start(
    *,
    resolved: Resolved,
    docker: DockerEngine,
    on_phase: Callable[[Progress], None] | None = None,
    http: HttpAdapter,
    environ: Mapping[str, str],
    state_dir: Path,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
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
    from servectl.service.health import GateOptions, Progress, wait_until_serving  # not on status's path
    from servectl.service.logs import referenced_secrets

    plan = resolved.plan
    env = environ
    keys = read_plan_keys(plan, env)
    api_key = None if plan.secret is None else keys[plan.secret.container_path]
    write_plan_files(plan, keys=keys)
    t0 = clock()
    container_id: str | None = None
    gates = GateRecord(state_dir)
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
            on_phase=_recording_passage(gates, container_id, plan.docker.name, on_phase),
            api_key=api_key,
            started_at=t0,
            opts=GateOptions(clock=clock, sleep=sleep, secrets=tuple(referenced_secrets(plan, env))),
        )
        _record_passed(gates, container_id, plan.docker.name)  # idempotent; a gate stubbed in tests
    except BaseException as err:
        # Whatever went wrong (gate, engine, Ctrl-C), nothing we started stays behind.
        if container_id is not None:
            grace_s = min(FAILED_START_STOP_S, plan.docker.stop_timeout_s)
            _discard(docker, container_id, grace_s=grace_s, clock=clock, sleep=sleep)
            gates.forget(container_id)  # it may have passed just before the failure: it is gone now
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


def _recording_passage(
    gates: GateRecord, container_id: str, container_name: str, on_phase: Callable[[Progress], None] | None
) -> Callable[[Progress], None]:
    """The gate's progress callback: the passage is recorded before anything announces "ready", so a
    ``kill -9`` right after the announcement keeps a service that passed."""

    from servectl.service.health import READY

    def announce(progress: Progress) -> None:
        if progress.phase == READY:
            _record_passed(gates, container_id, container_name)
        if on_phase is not None:
            on_phase(progress)

    return announce


def _record_passed(gates: GateRecord, container_id: str, container_name: str) -> None:
    """The gate passed: record it before anything reports it (a ``kill -9`` then keeps the service)."""
    gates.mark(container_id)
    gates.clear_pending(container_name)


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
    gpus: GpuInventory,
    free_deadline_s: float,
    state_dir: Path,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> StopResult:
    """Stop a service gracefully and make sure it is gone.

    SIGTERM, the service's grace period (its ``servectl.stop-grace-s`` label), then SIGKILL; remove the
    container and confirm Docker no longer has it; delete the API-key file servectl wrote for it. With an
    inventory that reads cards (not a null one), wait until its cards are free
    (:func:`servectl.adapters.gpu.wait_until_free`), or name the pids left behind and the cards that could not
    be read.

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
    remove_key_file(last_known.mounts if last_known is not None else (), state_dir)
    leaked: tuple[int, ...] = ()
    unknown: tuple[int, ...] = ()
    from servectl.adapters.gpu import reads_cards

    checked = bool(service.gpus) and reads_cards(gpus)  # a service on no card opens no driver
    if checked:
        from servectl.adapters.gpu import wait_until_free

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


class ServiceRuntime(Protocol):
    """What the core drives to list, start and stop services: :class:`DockerRuntime`, or
    ``servectl.testing.swap.FakeRuntime`` in tests. The runtime owns its engine, state folder and scope."""

    def services(
        self, *, probe: bool = ..., plan_hash_of: Callable[[str], str | None] | None = ...
    ) -> Sequence[ServiceInfo]: ...

    def start(self, *, resolved: Resolved, on_phase: Callable[[Progress], None] | None = ...) -> StartResult: ...

    def stop(self, *, service: ServiceInfo, gpus: GpuInventory, free_deadline_s: float = ...) -> StopResult: ...

    def ensure_image(self, resolved: Resolved, *, on_phase: Callable[[Progress], None] | None = ...) -> None: ...


class DockerRuntime:
    """The runtime on a Docker engine, with everything it needs bound in: what every core function drives.

    Args:
        docker: the engine.
        http: the HTTP adapter of the health gate and of ``/health`` probes (the Context's).
        environ: the environment (API keys, pass-through variables).
        state_dir: the state folder (gate records, key files).
        history: the history (which containers passed the gate before gate records existed).
        clocks: time as the gate, the stops and the listing read it (the context's).
        scope: only containers with these labels are servectl's (tests use a session label).
        build_image: builds the stand-in image (default :func:`servectl.service.image.build_standin`).
    """

    def __init__(
        self,
        *,
        docker: DockerEngine,
        http: HttpAdapter,
        environ: Mapping[str, str],
        state_dir: Path,
        history: HistoryLog,
        clocks: Clocks,
        scope: Mapping[str, str] | None = None,
        build_image: ImageBuilder | None = None,
    ) -> None:
        self.docker = docker
        self.http = http
        self.environ = environ
        self.state_dir = state_dir
        self.history = history
        self.clocks = clocks
        self.scope = scope
        self.build_image = build_image

    def services(
        self, *, probe: bool = True, plan_hash_of: Callable[[str], str | None] | None = None
    ) -> list[ServiceInfo]:
        """The servectl services now (see :func:`servectl.service.services.services`)."""
        return services(
            docker=self.docker,
            http=self.http,
            probe=probe,
            plan_hash_of=plan_hash_of,
            records=ServiceRecords(self.state_dir, self.history),
            scope=self.scope,
            clock=self.clocks.wall,
            adopted=lambda: adopted_in(self.environ),
        )

    def start(self, *, resolved: Resolved, on_phase: Callable[[Progress], None] | None = None) -> StartResult:
        """Start ``resolved`` through the health gate (see :func:`start`)."""
        return start(
            resolved=resolved,
            docker=self.docker,
            on_phase=on_phase,
            http=self.http,
            environ=self.environ,
            state_dir=self.state_dir,
            clock=self.clocks.monotonic,
            sleep=self.clocks.sleep,
        )

    def stop(
        self, *, service: ServiceInfo, gpus: GpuInventory, free_deadline_s: float = CARDS_FREE_DEADLINE_S
    ) -> StopResult:
        """Stop ``service`` and make sure it is gone, waiting for its cards on ``gpus`` (a null inventory: no
        wait; see :func:`stop`)."""
        return stop(
            service=service,
            docker=self.docker,
            gpus=gpus,
            free_deadline_s=free_deadline_s,
            state_dir=self.state_dir,
            clock=self.clocks.monotonic,
            sleep=self.clocks.sleep,
        )

    def ensure_image(self, resolved: Resolved, *, on_phase: Callable[[Progress], None] | None = None) -> None:
        """Make sure the profile's image is here (see :func:`servectl.service.image.ensure_image`)."""
        ensure_image(resolved, docker=self.docker, build_image=self.build_image, on_phase=on_phase)
