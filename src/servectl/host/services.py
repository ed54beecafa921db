"""Host methods on services: preflight, doctor, up, down, services, status, watch, logs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servectl.host.base import HostBase, ReportHook

if TYPE_CHECKING:
    from servectl.preflight.doctor import DoctorReport
    from servectl.preflight.model import PreflightReport
    from servectl.service.health import Progress
    from servectl.service.runtime import DownResult, UpResult
    from servectl.service.services import ServiceInfo
    from servectl.service.watch import WatchView


@dataclass(frozen=True)
class Status:
    """What ``servectl status`` shows: the services, notes on state servectl left (a swap, conflicts), and
    the gateway running on this host."""

    services: list[ServiceInfo]
    notes: list[str]  # an unfinished swap, conflicts kept stopped
    #: what the running gateway (container or ``gateway run``) says of itself through its admin socket:
    #: ``listen``, ``pid``, ``aliases`` (alias -> ``profile``/``profiles`` and ``state``), ``services_error``;
    #: None when no gateway runs
    gateway: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """``status --json``: ``{"services": [...], "notes": [...], "gateway": {...} or null}``."""
        return {
            "services": [s.to_dict() for s in self.services],
            "notes": list(self.notes),
            "gateway": None if self.gateway is None else dict(self.gateway),
        }


class ServiceCommands(HostBase):
    """Start, stop and look at services."""

    # -- checks --------------------------------------------------------------------------------------------
    def preflight(self, *, name: str, force: Iterable[str] = ()) -> PreflightReport:
        """Every preflight check of profile ``name`` on this host; starts nothing.

        The servectl services running now are passed to the checks, as ``up`` does (``services``,
        ``container.name``).

        Args:
            name: the profile.
            force: check ids to skip; the report says which were.

        Returns:
            The report; ``report.exit_code`` is 3 when a check failed.

        Raises:
            UsageError / ProfileError: the profile does not resolve; ``force`` names an unknown check.
        """
        from servectl.errors import EngineUnavailable
        from servectl.preflight.checks import validate_skip
        from servectl.preflight.model import StartContext
        from servectl.preflight.request import measure_start
        from servectl.service.services import running_refs

        skip = validate_skip(force)
        resolved = self._resolve(name)
        try:
            running = self._list(probe=False)
        except EngineUnavailable:
            running = []  # docker.engine reports it
        return measure_start(
            resolved,
            docker=self.docker,
            gpus=self.gpus,
            host=self.host_probe,
            context=StartContext(services=running_refs(running)),
            skip=skip,
        )

    def doctor(self) -> DoctorReport:
        """Is this machine set up for servectl: Docker, the GPU runtime, the driver, compose, the state folder.

        Returns:
            One line per part with its fix; ``report.exit_code`` is 3 when a required part fails.
        """
        from servectl.preflight.doctor import run_doctor

        with self.ctx.docker_to_check() as docker:  # a hung engine must not hang the check of it
            return run_doctor(docker=docker, gpus=self.gpus, host=self.host_probe, state_dir=self.state_dir)

    # -- services ------------------------------------------------------------------------------------------
    def up(
        self,
        *,
        name: str,
        force: Iterable[str] = (),
        on_phase: Callable[[Progress], None] | None = None,
        on_report: ReportHook | None = None,
        lock_timeout_s: float | None = None,
    ) -> UpResult:
        """Validate, preflight and start profile ``name``, then wait until it serves (the health gate).

        Args:
            name: the profile.
            force: preflight check ids to skip (recorded in the history).
            on_phase: called with each startup phase (image, container, weights, ready...).
            on_report: called with the preflight report before anything starts.
            lock_timeout_s: wait for another servectl changing services (default: the host's).

        Raises:
            PreflightFailed: a check failed; nothing was started. StartupFailed: the engine did not pass the
                gate (its container is removed; ``err.last_log_lines`` has its last lines).
            ServiceConflict: the profile runs with another plan, or another service holds its GPUs or port.
        """
        from servectl.service.runtime import UpOptions, up

        resolved = self.plan_cache.resolve(name)  # compiled once, and cached for the drift column of status
        opts = UpOptions(force=tuple(force), on_report=on_report, on_phase=on_phase, lock_timeout_s=lock_timeout_s)
        return up(self.ctx, name=name, resolved=resolved, opts=opts)

    def down(self, *, name: str | None = None, lock_timeout_s: float | None = None) -> DownResult:
        """Stop the service of profile ``name`` (default: the only one running) and confirm it is gone.

        Waits until its GPUs are free (when NVML answers); once no servectl service runs, starts again the
        conflicts a swap stopped.

        Raises:
            UsageError: no ``name`` while several services run, or ``name`` is neither a service nor a profile.
        """
        from servectl.service.runtime import DownOptions, down

        return down(self.ctx, name=name, opts=DownOptions(lock_timeout_s=lock_timeout_s))

    def services(self) -> list[ServiceInfo]:
        """Every servectl service on this host: profile, state, port, GPUs, plan hash and drift."""
        return self._list(probe=True)

    def _list(self, *, probe: bool) -> list[ServiceInfo]:
        plan_hash_of = self.plan_cache.moment().plan_hash if probe else None
        return list(self.ctx.runtime.services(probe=probe, plan_hash_of=plan_hash_of))

    def status(self) -> Status:
        """Every servectl service, with the notes of an unfinished swap and of conflicts kept stopped, and
        what the gateway running on this host reports (None when none runs)."""
        from servectl.gateway.container import gateway_live
        from servectl.service.journal import status_notes

        found, notes = self.services(), status_notes(state_dir=self.state_dir, history=self.ctx.history)
        return Status(services=found, notes=notes, gateway=gateway_live(state_dir=self.state_dir))

    def watch(self, *, interval_s: float) -> Iterator[WatchView]:
        """For ``status --watch``: one refresh now (the services, the startup phase of each starting one, each
        card's memory and utilisation), then one every ``interval_s`` seconds paused on the context's clock,
        for as long as the caller iterates."""
        from servectl.service.watch import watch_view

        docker, gpus, clocks = self.docker, self.ctx.gpus, self.ctx.clocks
        while True:
            yield watch_view(docker=docker, gpus=gpus, list_services=self.services, clock=clocks.wall)
            clocks.sleep(interval_s)

    def logs(self, *, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The log lines of profile (or container) ``name``'s service, secrets redacted; ``follow`` keeps reading.

        Raises:
            UsageError: no such service (when the first line is asked for).
        """
        from servectl.errors import ServectlError
        from servectl.service.logs import follow_logs, referenced_secrets

        def secrets(profile: str) -> list[str]:  # the values its profile references, as this host has them
            try:
                return referenced_secrets(self._resolve(profile).plan, self.ctx.environ)
            except ServectlError:  # the profile is gone or broken: the shapes are still redacted
                return []

        return follow_logs(
            name=name, docker=self.docker, follow=follow, tail=tail, scope=self.ctx.scope, secrets=secrets
        )
