"""Host methods that change what runs all-or-nothing: swap, rollback, rollback_check, recover."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.host.base import HostBase, ReportHook

if TYPE_CHECKING:
    import httpx

    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.plan.resolve import Resolved
    from servectl.service.container import StartResult, StopResult
    from servectl.service.health import Progress
    from servectl.service.recover import RecoverResult
    from servectl.service.rollback import RollbackCheck
    from servectl.service.services import ServiceInfo
    from servectl.service.swap_preflight import Preflight
    from servectl.service.transaction.model import PhaseEvent, SwapResult


class TransactionCommands(HostBase):
    """The transactions, with the host's adapters and a runtime bound to its HTTP client."""

    # -- transactions --------------------------------------------------------------------------------------
    def swap(
        self,
        *,
        name: str | None = None,
        force: Iterable[str] = (),
        on_phase: Callable[[PhaseEvent], None] | None = None,
        on_report: ReportHook | None = None,
        lock_timeout_s: float | None = None,
    ) -> SwapResult:
        """Replace the running service with profile ``name`` (default: its ``rollback:``), all-or-nothing.

        Args:
            name: the profile to run instead.
            force: preflight check ids to skip.
            on_phase: called as each phase of the transaction begins, progresses and ends.
            on_report: called with the target's preflight report.
            lock_timeout_s: wait for another servectl changing services (default: the host's).

        Raises:
            SwapRolledBack: the target failed and the previous service is back (exit 4).
            SwapFailed: both failed and nothing runs (exit 5).
            PreflightFailed / LockTimeout: nothing changed.
        """
        from servectl.service.swap import swap

        return swap(target=name, **self._transaction(force, on_phase, on_report, lock_timeout_s))

    def rollback(
        self,
        *,
        force: Iterable[str] = (),
        on_phase: Callable[[PhaseEvent], None] | None = None,
        on_report: ReportHook | None = None,
        lock_timeout_s: float | None = None,
    ) -> SwapResult:
        """Swap back to the profile that ran before the current one (from the history); see :meth:`swap`.

        Raises:
            UsageError: nothing runs, several services run, or the history has no earlier profile.
        """
        from servectl.service.rollback import rollback

        return rollback(**self._transaction(force, on_phase, on_report, lock_timeout_s))

    def _transaction(
        self,
        force: Iterable[str],
        on_phase: Callable[[PhaseEvent], None] | None,
        on_report: ReportHook | None,
        lock_timeout_s: float | None,
    ) -> dict[str, Any]:
        """The adapters and settings ``swap`` and ``rollback`` share."""
        return {
            "docker": self.docker,
            "gpus": self._card_waits(),
            "preflight": self._preflight(on_report),
            "force": tuple(force),
            "lock_timeout_s": self._lock_timeout(lock_timeout_s),
            "on_phase": on_phase,
            "state_dir": self.state_dir,
            "scope": self.scope,
            "runtime": self._runtime(),
            "conflicts": self._conflict_handler(),
        }

    def rollback_check(self, *, names: Sequence[str] | None = None) -> list[RollbackCheck]:
        """Prove that each profile's rollback target could start now (profile, image, model, preflight).

        Args:
            names: the profiles whose target to check (default: every profile that has a ``rollback:``).
        """
        from servectl.service.rollback import rollback_check

        return rollback_check(
            names=names,
            docker=self.docker,
            gpus=self._card_waits(),
            preflight=self._preflight(None),
            runtime=self._runtime(),
            state_dir=self.state_dir,
            scope=self.scope,
        )

    def recover(self, *, lock_timeout_s: float | None = None) -> RecoverResult:
        """Settle a swap, rollback or up that was killed, from the journal it left: bring back what ran before.

        Raises:
            SwapFailed: the previous service did not pass its gate again; nothing of it runs.
            LockTimeout: another servectl process is changing services.
        """
        from servectl.service.recover import recover

        return recover(
            docker=self.docker,
            gpus=self._card_waits(),
            state_dir=self.state_dir,
            scope=self.scope,
            runtime=self._runtime(),
            conflicts=self._conflict_handler(),
            lock_timeout_s=self._lock_timeout(lock_timeout_s),
            environ=self.environ,
        )

    def _preflight(self, on_report: ReportHook | None) -> Preflight:
        """servectl's full preflight as swap runs it (the replaced service counts as stopped)."""
        from servectl.service.swap_preflight import profile_preflight

        return profile_preflight(state_dir=self.state_dir, on_report=on_report, host=self.host_probe)

    def _runtime(self) -> _HostRuntime:
        return _HostRuntime(http=self._http, environ=self.environ)


class _HostRuntime:
    """The service runtime ``swap``, ``rollback`` and ``recover`` drive, with the host's HTTP client and
    environment bound in (so the health gate probes through an injected client)."""

    def __init__(self, *, http: httpx.Client | None, environ: Mapping[str, str]) -> None:
        self._http = http
        self._environ = environ

    def services(
        self,
        *,
        docker: DockerEngine,
        probe: bool = True,
        plan_hash_of: Callable[[str], str | None] | None = None,
        state_dir: Path | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> list[ServiceInfo]:
        from servectl.service.services import services

        return services(
            docker=docker, http=self._http, probe=probe, plan_hash_of=plan_hash_of, state_dir=state_dir, scope=scope
        )

    def start(
        self,
        *,
        resolved: Resolved,
        docker: DockerEngine,
        on_phase: Callable[[Progress], None] | None = None,
        state_dir: Path | None = None,
    ) -> StartResult:
        from servectl.service.container import start

        return start(
            resolved=resolved,
            docker=docker,
            on_phase=on_phase,
            http=self._http,
            environ=self._environ,
            state_dir=state_dir,
        )

    def stop(
        self,
        *,
        service: ServiceInfo,
        docker: DockerEngine,
        gpus: GpuInventory | None = None,
        state_dir: Path | None = None,
    ) -> StopResult:
        from servectl.service.container import stop

        return stop(service=service, docker=docker, gpus=gpus, state_dir=state_dir)

    def ensure_image(
        self, resolved: Resolved, *, docker: DockerEngine, on_phase: Callable[[Progress], None] | None = None
    ) -> None:
        from servectl.service.image import ensure_image

        ensure_image(resolved, docker=docker, on_phase=on_phase)
