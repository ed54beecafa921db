"""The part of :class:`servectl.host.Host` that owns the adapters: built on first use, closed by ``close``."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    import httpx

    from servectl.adapters.conflicts import ConflictHandler
    from servectl.adapters.docker import DockerEngine, DockerSdkEngine
    from servectl.adapters.gpu import GpuInventory, NvmlInventory
    from servectl.adapters.host import HostProbe
    from servectl.adapters.plan_cache import PlanCache
    from servectl.plan.resolve import Resolved
    from servectl.preflight.model import PreflightReport

ReportHook = Callable[["PreflightReport"], None]
"""Gets the preflight report (warnings, checks skipped with ``force``) before anything starts."""


class HostBase:
    """The adapters of a :class:`servectl.host.Host` (see there for the arguments) and their lifecycle."""

    def __init__(
        self,
        *,
        docker: DockerEngine | None = None,
        gpus: GpuInventory | None = None,
        host_probe: HostProbe | None = None,
        state_dir: Path | None = None,
        http: httpx.Client | None = None,
        conflicts: ConflictHandler | None = None,
        environ: Mapping[str, str] | None = None,
        lock_timeout_s: float | None = None,
        scope: Mapping[str, str] | None = None,
    ) -> None:
        self._docker = docker
        self._gpus = gpus
        self._host_probe = host_probe
        self._state_dir = state_dir
        self._http = http
        self._conflicts = conflicts
        self._environ = environ
        self.lock_timeout_s = lock_timeout_s
        self.scope = scope
        self._gpus_given = gpus is not None
        self._docker_owned: DockerSdkEngine | None = None
        self._gpus_owned: NvmlInventory | None = None
        self._gpus_answer: bool | None = None  # whether NVML answered its first snapshot
        self._plan_cache: PlanCache | None = None
        self._closed = False

    # -- adapters ------------------------------------------------------------------------------------------
    @property
    def environ(self) -> Mapping[str, str]:
        """The environment the host reads (``os.environ`` unless one was given)."""
        return os.environ if self._environ is None else self._environ

    @property
    def state_dir(self) -> Path:
        """The state folder: lock, history, journal, stopped conflicts."""
        if self._state_dir is None:
            from servectl.paths import state_dir

            self._state_dir = state_dir(self.environ)
        return self._state_dir

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
        self._check_open()
        if self._docker is None:
            from servectl.adapters.docker import DockerSdkEngine

            self._docker_owned = DockerSdkEngine()
            self._docker = self._docker_owned
        return self._docker

    @property
    def gpus(self) -> GpuInventory:
        """The GPU inventory (NVML unless one was given); preflight reports a card or driver it cannot read."""
        self._check_open()
        if self._gpus is None:
            from servectl.adapters.gpu import NvmlInventory

            self._gpus_owned = NvmlInventory()
            self._gpus = self._gpus_owned
        return self._gpus

    @property
    def host_probe(self) -> HostProbe:
        """The host probe (psutil unless one was given)."""
        if self._host_probe is None:
            from servectl.adapters.host import PsutilHostProbe

            self._host_probe = PsutilHostProbe()
        return self._host_probe

    def _card_waits(self) -> GpuInventory | None:
        """The inventory stops wait on until the cards are free: None when NVML does not answer here."""
        if self._gpus_given:
            return self.gpus
        if self._gpus_answer is None:
            from servectl.errors import GpuUnavailable

            try:
                self.gpus.snapshot()
                self._gpus_answer = True
            except GpuUnavailable:
                self._gpus_answer = False
        return self.gpus if self._gpus_answer else None

    def _gpus_for(self, resolved: Resolved) -> GpuInventory | None:
        """A profile without GPUs needs no NVML (unless the caller gave an inventory)."""
        if not self._gpus_given and not resolved.loaded.profile.gpus.devices:
            return None
        return self._card_waits()

    def _conflict_handler(self) -> ConflictHandler:
        if self._conflicts is None:
            from servectl.adapters.conflicts import DockerConflicts

            self._conflicts = DockerConflicts(docker=self.docker)
        return self._conflicts

    def _lock_timeout(self, lock_timeout_s: float | None) -> float | None:
        return self.lock_timeout_s if lock_timeout_s is None else lock_timeout_s

    def _check_open(self) -> None:
        if self._closed:
            from servectl.errors import UsageError

            raise UsageError("this servectl Host is closed; build a new one (servectl.from_env())")

    def close(self) -> None:
        """Close the Docker client and NVML the host opened (adapters given to it are left open)."""
        self._closed = True
        docker, self._docker_owned = self._docker_owned, None
        gpus, self._gpus_owned = self._gpus_owned, None
        try:
            if docker is not None:
                docker.close()
        finally:
            if gpus is not None:
                gpus.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Host(state_dir={str(self.state_dir)!r}{', closed' if self._closed else ''})"

    def _resolve(self, name: str) -> Resolved:
        from servectl.plan.resolve import resolve

        return resolve(name, environ=self.environ)
