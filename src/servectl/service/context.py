"""The one :class:`Context` the core works with: the adapters, the state folder and the clocks, wired in one place.

``Host`` builds one from the environment (:meth:`Context` with nothing given: every adapter real, each opened
on first use, so ``--help`` and ``up --dry-run`` open nothing); ``servectl.testing.FakeHost`` and the unit
tests build one from fakes. The core functions (``up``, ``down``, ``swap``, ``rollback``, ``rollback_check``,
``recover``) take it first, then their business arguments, then an options object::

    ctx = Context(environ=os.environ)
    swap(ctx, target="demo-rollback", opts=SwapOptions(force=("gpu.memory",)))

What the context opened it closes (:meth:`Context.close`); adapters given to it stay the caller's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.service.clocks import Clocks as Clocks  # re-exported: its home before clocks.py

if TYPE_CHECKING:
    from servectl.adapters.conflicts import ConflictHandler
    from servectl.adapters.docker import DockerEngine, DockerSdkEngine
    from servectl.adapters.gpu import GpuInventory, OpenedWhenRead
    from servectl.adapters.host import HostProbe
    from servectl.adapters.http import HttpAdapter
    from servectl.adapters.sandbox import CodeSandbox
    from servectl.adapters.state import HistoryLog
    from servectl.plan.resolve import Resolved
    from servectl.profile.loader import ProfileSearch
    from servectl.service.container import ServiceRuntime

#: How long a second servectl process waits for the first one (``SERVECTL_LOCK_TIMEOUT_S`` overrides).
DEFAULT_LOCK_TIMEOUT_S = 10.0
#: How long each call to a Docker engine that is being checked (``doctor``) may take.
CHECK_DOCKER_TIMEOUT_S = 5.0

Lock = Callable[[str], AbstractContextManager[object]]
"""``lock(purpose)``: the state lock, held while services change (purpose is shown to a process that waits)."""


def lock_timeout_default(environ: Mapping[str, str] | None = None) -> float:
    """``SERVECTL_LOCK_TIMEOUT_S``, else :data:`DEFAULT_LOCK_TIMEOUT_S`.

    Raises:
        UsageError: the variable is not a number.
    """
    from servectl.errors import UsageError

    env = os.environ if environ is None else environ
    raw = env.get("SERVECTL_LOCK_TIMEOUT_S")
    try:
        return float(raw) if raw else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        raise UsageError(f"SERVECTL_LOCK_TIMEOUT_S={raw!r} is not a number of seconds") from None


def standard_http() -> HttpAdapter:
    """The real HTTP adapter: the Context's own where none is given, and the one of an entry point that runs
    without a host (:func:`servectl.bench.qualify.run_qualify` at a URL)."""
    from servectl.adapters.http import StandardHttp

    return StandardHttp()


class Context:
    """The adapters and state every core function works with; the one home of their defaults.

    Each adapter is the one given, else servectl's own, built on first use (and then kept):

    * ``docker``: the Docker SDK engine of the environment (``DOCKER_HOST``), closed by :meth:`close`;
    * ``gpus``: NVML, opened at its first read and closed by :meth:`close` (with ``nvml=False``, a null
      inventory, which reads no card);
    * ``probe``: the host probe on psutil and ``/proc``;
    * ``http``: the HTTP adapter of the health gate, a standby engine's calls and ``status``'s ``/health`` probes
      (:class:`~servectl.adapters.http.StandardHttp`: an httpx client per gate or call, the probes over a socket);
    * ``conflicts``: stops and restores declared conflicts through Docker and the compose CLI;
    * ``history``, ``lock``: the state folder's history and lock (waiting ``lock_timeout_s``, default
      ``SERVECTL_LOCK_TIMEOUT_S`` or 10 s);
    * ``runtime``: :class:`~servectl.service.container.DockerRuntime` over the engine, HTTP client,
      environment, state folder and scope above;
    * ``resolve``: :func:`servectl.plan.resolve.resolve` in ``environ``;
    * ``state_dir``: ``SERVECTL_HOME`` or the platform's state folder; ``environ``: ``os.environ``;
    * ``profile_folders``: the profile search path of ``environ``;
    * ``scope``: only containers with these labels are servectl's (tests use a session label);
    * ``code_sandbox``: where qualify's coding gate runs a model's programs (a locked-down container of the
      stand-in image on the Docker SDK engine);
    * ``clocks``: :class:`Clocks`.

    Frozen once built: the adapters can only be given, or opened by the context itself.
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        state_dir: Path | None = None,
        docker: DockerEngine | None = None,
        gpus: GpuInventory | None = None,
        nvml: bool = True,
        probe: HostProbe | None = None,
        http: HttpAdapter | None = None,
        conflicts: ConflictHandler | None = None,
        history: HistoryLog | None = None,
        lock: Lock | None = None,
        lock_timeout_s: float | None = None,
        runtime: ServiceRuntime | None = None,
        resolve: Callable[[str], Resolved] | None = None,
        scope: Mapping[str, str] | None = None,
        clocks: Clocks | None = None,
        code_sandbox: CodeSandbox | None = None,
    ) -> None:
        self._environ = os.environ if environ is None else environ
        self._state_dir = state_dir
        self._docker = docker
        self._gpus = gpus
        self._nvml = nvml
        self._probe = probe
        self._http = http
        self._conflicts = conflicts
        self._history = history
        self._lock = lock
        self._lock_timeout_s = lock_timeout_s
        self._runtime = runtime
        self._resolve = resolve
        self._scope = scope
        self._clocks = clocks or Clocks()
        self._code_sandbox = code_sandbox
        self._docker_owned: DockerSdkEngine | None = None
        self._gpus_owned: OpenedWhenRead | None = None
        self._closed = False

    # -- plain values ----------------------------------------------------------------------------------------
    @property
    def environ(self) -> Mapping[str, str]:
        """The environment: ``${VAR}`` references, API keys, defaults."""
        return self._environ

    @property
    def profile_folders(self) -> ProfileSearch:
        """The profile search path of :attr:`environ` (``./profiles``, ``SERVECTL_PROFILES``, the user's
        folder, the shipped profiles) with its catalog folder (``SERVECTL_CATALOG_CACHE``), read now: every
        profile lookup of the host goes through it, and the profiles it loads find ``engine.catalog: image``
        in the host's catalog folder."""
        from servectl.profile.loader import search_path

        return search_path(environ=self._environ)

    @property
    def state_dir(self) -> Path:
        """The state folder: lock, history, journal, gate records, stopped conflicts."""
        if self._state_dir is None:
            from servectl.paths import state_dir

            self._state_dir = state_dir(self._environ)
        return self._state_dir

    @property
    def scope(self) -> Mapping[str, str] | None:
        """Only containers that carry these labels are servectl's (tests)."""
        return self._scope

    @property
    def clocks(self) -> Clocks:
        return self._clocks

    @property
    def lock_timeout_s(self) -> float:
        """The default wait for another servectl changing services.

        Raises:
            UsageError: ``SERVECTL_LOCK_TIMEOUT_S`` is not a number.
        """
        if self._lock_timeout_s is None:
            return lock_timeout_default(self._environ)
        return self._lock_timeout_s

    @property
    def closed(self) -> bool:
        return self._closed

    # -- adapters ---------------------------------------------------------------------------------------------
    @property
    def docker(self) -> DockerEngine:
        """The Docker engine (opened now when the context opens its own)."""
        self._check_open()
        if self._docker is None:
            from servectl.adapters.docker import DockerSdkEngine

            self._docker_owned = DockerSdkEngine(environ=self._environ)
            self._docker = self._docker_owned
        return self._docker

    @contextmanager
    def docker_to_check(self) -> Iterator[DockerEngine]:
        """The Docker engine to check (``doctor``): the context's if given or open, else a short-lived SDK
        engine whose calls give up after :data:`CHECK_DOCKER_TIMEOUT_S`, closed when the block ends."""
        self._check_open()
        if self._docker is not None:
            yield self._docker
            return
        from servectl.adapters.docker import DockerSdkEngine

        engine = DockerSdkEngine(environ=self._environ, timeout_s=CHECK_DOCKER_TIMEOUT_S)
        try:
            yield engine
        finally:
            engine.close()

    @property
    def gpus(self) -> GpuInventory:
        """The GPU inventory, the one door to the cards: the one given, else NVML opened at its first read (a
        command that reads no card, such as ``up`` of a profile without GPUs, opens no driver; where none
        answers, every read raises :class:`~servectl.errors.GpuUnavailable` with NVML's reason and stops wait on
        no card), else with ``nvml=False`` a :class:`~servectl.adapters.gpu.NullGpuInventory`, which reads none."""
        self._check_open()
        if self._gpus is None:
            from servectl.adapters.gpu import NullGpuInventory, NvmlInventory, OpenedWhenRead

            if not self._nvml:
                self._gpus = NullGpuInventory("this servectl context reads no GPUs (built with nvml=False)")
            else:
                self._gpus_owned = OpenedWhenRead(NvmlInventory)
                self._gpus = self._gpus_owned
        return self._gpus

    @property
    def probe(self) -> HostProbe:
        """The host probe (psutil unless one was given)."""
        if self._probe is None:
            from servectl.adapters.host import PsutilHostProbe

            self._probe = PsutilHostProbe()
        return self._probe

    @property
    def http(self) -> HttpAdapter:
        """The HTTP adapter of the health gate, a standby engine's calls and ``/health`` probes: the one given,
        else :class:`~servectl.adapters.http.StandardHttp` (it imports httpx only when a client is opened, so
        ``status`` and ``up --dry-run`` load none)."""
        if self._http is None:
            self._http = standard_http()
        return self._http

    @property
    def conflicts(self) -> ConflictHandler:
        """Stops and restores declared conflicts (through Docker and the compose CLI unless given)."""
        self._check_open()
        if self._conflicts is None:
            from servectl.adapters.conflicts import DockerConflicts

            self._conflicts = DockerConflicts(docker=self.docker, clock=self._clocks.wall)
        return self._conflicts

    @property
    def history(self) -> HistoryLog:
        """The history (the state folder's unless given)."""
        if self._history is None:
            from servectl.adapters.state import History

            self._history = History(self.state_dir, clock=self._clocks.wall)
        return self._history

    @property
    def runtime(self) -> ServiceRuntime:
        """What starts, stops and lists services (:class:`~servectl.service.container.DockerRuntime` unless given)."""
        self._check_open()
        if self._runtime is None:
            from servectl.service.container import DockerRuntime

            self._runtime = DockerRuntime(
                docker=self.docker,
                http=self.http,
                environ=self._environ,
                state_dir=self.state_dir,
                history=self.history,
                clocks=self._clocks,
                scope=self._scope,
            )
        return self._runtime

    @property
    def code_sandbox(self) -> CodeSandbox:
        """Where qualify's coding gate runs a model's programs: the one given, else a locked-down container on
        this context's Docker SDK engine, of the stand-in image (built when missing); made now, reached when a
        program runs."""
        if self._code_sandbox is None:
            from servectl.adapters.sandbox import DockerSandbox
            from servectl.standin.image import build_standin_image

            self._code_sandbox = DockerSandbox(
                client=self._sdk_client, build_image=lambda: build_standin_image(docker=self.docker)
            )
        return self._code_sandbox

    def _sdk_client(self) -> object:
        """The Docker SDK client of :attr:`docker` (the coding sandbox runs on it)."""
        from servectl.adapters.docker import DockerSdkEngine
        from servectl.errors import UsageError

        docker = self.docker
        if not isinstance(docker, DockerSdkEngine):
            raise UsageError(
                "the coding sandbox runs on the Docker SDK engine and this context was given another engine; "
                "give the context a code_sandbox too"
            )
        return docker.client

    def lock(self, purpose: str, *, timeout_s: float | None = None) -> AbstractContextManager[object]:
        """The state lock, held while services change; waits ``timeout_s`` (default :attr:`lock_timeout_s`).

        Raises:
            UsageError: ``SERVECTL_LOCK_TIMEOUT_S`` is not a number.
        """
        if self._lock is not None:
            return self._lock(purpose)
        from servectl.adapters.state import StateLock

        return StateLock(self.state_dir, self.lock_timeout_s if timeout_s is None else timeout_s, purpose=purpose)

    def resolve(self, name: str) -> Resolved:
        """Profile ``name`` loaded, validated and compiled for this host (in :attr:`environ`)."""
        if self._resolve is not None:
            return self._resolve(name)
        from servectl.plan.resolve import resolve

        return resolve(name, environ=self._environ)

    # -- lifecycle --------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            from servectl.errors import UsageError

            raise UsageError("this servectl Host is closed; build a new one (servectl.from_env())")

    def close(self) -> None:
        """Close the Docker client and NVML the context opened (adapters given to it are left open)."""
        self._closed = True
        docker, self._docker_owned = self._docker_owned, None
        gpus, self._gpus_owned = self._gpus_owned, None
        try:
            if docker is not None:
                docker.close()
        finally:
            if gpus is not None:
                gpus.close()
