"""The part of :class:`servectl.host.Host` that owns its :class:`~servectl.service.context.Context`: the adapters,
built on first use, closed by ``close``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from servectl.adapters.conflicts import ConflictHandler
    from servectl.adapters.docker import DockerEngine
    from servectl.adapters.gpu import GpuInventory
    from servectl.adapters.host import HostProbe
    from servectl.adapters.http import HttpAdapter
    from servectl.adapters.plan_cache import PlanCache
    from servectl.plan.resolve import Resolved
    from servectl.preflight.model import PreflightReport
    from servectl.service.clocks import Clocks

ReportHook = Callable[["PreflightReport"], None]
"""Gets the preflight report (warnings, checks skipped with ``force``) before anything starts."""


class HostBase:
    """The :class:`~servectl.service.context.Context` of a :class:`servectl.host.Host` (see there for the
    arguments) and its lifecycle: the host builds it once, and every method works through it."""

    def __init__(
        self,
        *,
        docker: DockerEngine | None = None,
        gpus: GpuInventory | None = None,
        host_probe: HostProbe | None = None,
        state_dir: Path | None = None,
        http: HttpAdapter | None = None,
        conflicts: ConflictHandler | None = None,
        environ: Mapping[str, str] | None = None,
        lock_timeout_s: float | None = None,
        scope: Mapping[str, str] | None = None,
        clocks: Clocks | None = None,
    ) -> None:
        from servectl.service.context import Context

        self.ctx = Context(
            docker=docker,
            gpus=gpus,
            probe=host_probe,
            state_dir=state_dir,
            http=http,
            conflicts=conflicts,
            environ=environ,
            lock_timeout_s=lock_timeout_s,
            scope=scope,
            clocks=clocks,
        )
        self._plan_cache: PlanCache | None = None

    # -- the context's parts, as the host's users read them ------------------------------------------------
    @property
    def environ(self) -> Mapping[str, str]:
        """The environment the host reads (``os.environ`` unless one was given)."""
        return self.ctx.environ

    @property
    def state_dir(self) -> Path:
        """The state folder: lock, history, journal, stopped conflicts."""
        return self.ctx.state_dir

    @property
    def plan_cache(self) -> PlanCache:
        """The plan cache in the state folder (``up --dry-run`` and the drift column compile an unchanged
        profile once)."""
        if self._plan_cache is None:
            from servectl.adapters.plan_cache import PlanCache

            self._plan_cache = PlanCache(environ=self.environ, state_dir=self.state_dir)
        return self._plan_cache

    @property
    def docker(self) -> DockerEngine:
        """The Docker engine (opened now when the host opens its own)."""
        return self.ctx.docker

    @property
    def gpus(self) -> GpuInventory:
        """The context's GPU inventory (:attr:`~servectl.service.context.Context.gpus`: NVML, opened at its first
        read, unless one was given)."""
        return self.ctx.gpus

    @property
    def host_probe(self) -> HostProbe:
        """The host probe (psutil unless one was given)."""
        return self.ctx.probe

    def close(self) -> None:
        """Close the Docker client and NVML the host opened (adapters given to it are left open)."""
        self.ctx.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Host(state_dir={str(self.state_dir)!r}{', closed' if self.ctx.closed else ''})"

    def _resolve(self, name: str) -> Resolved:
        return self.ctx.resolve(name)
