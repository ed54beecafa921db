"""servectl's front door: :class:`Host`, one object that owns this host's adapters and whose methods are the commands.

Modelled on docker-py's ``docker.from_env()`` and httpx's ``Client``: build it from the environment (every
adapter real), or hand it fakes (``servectl.testing.fake_host``); use it as a context manager so that the
Docker client and NVML it opened are closed::

    import servectl

    with servectl.from_env() as host:
        host.up(name="demo")
        print(host.status().services)
        host.swap(name="demo-rollback")

Adapters are opened on first use, so ``host.compile_plan(...)`` never touches Docker. What the host opened it
closes; adapters passed to the constructor stay the caller's (``close`` leaves them open). The module functions
of :mod:`servectl.api` (``servectl.up(name=...)``) each build a host, call one method and close it; the CLI
calls the same methods, so ``servectl up demo`` and ``Host().up(name="demo")`` are one path.

One name per concept across the methods: ``name`` is a profile, ``force`` a list of preflight check ids to
skip, ``lock_timeout_s`` the wait for another servectl process that is changing services.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import httpx

    from servectl.adapters.conflicts import ConflictHandler
    from servectl.adapters.docker import DockerEngine, DockerSdkEngine
    from servectl.adapters.gpu import GpuInventory, NvmlInventory
    from servectl.adapters.host import HostProbe
    from servectl.bench.model import BenchProgressEvent
    from servectl.bench.profile_run import ProfileBenchResult
    from servectl.bench.qualify.model import QualifyProgressEvent
    from servectl.bench.qualify.profile_run import ProfileQualifyResult
    from servectl.plan.compile import LaunchPlan
    from servectl.plan.inventory import Validation
    from servectl.plan.resolve import Resolved
    from servectl.preflight.doctor import DoctorReport
    from servectl.preflight.engine_image import ExtractedCatalog, InImageValidation
    from servectl.preflight.model import PreflightReport
    from servectl.profile.catalog import FlagCatalog
    from servectl.profile.catalog_diff import FlagChange
    from servectl.profile.evidence import EvidenceRecord
    from servectl.profile.loader import LoadedProfile
    from servectl.render.files import RenderedFile
    from servectl.service.adopt import AdoptResult, DockerDocuments
    from servectl.service.health import Progress
    from servectl.service.recover import RecoverResult
    from servectl.service.rollback import RollbackCheck
    from servectl.service.runtime import DownResult, StartResult, StopResult, UpResult
    from servectl.service.services import ServiceInfo
    from servectl.service.swap import PhaseEvent, Preflight, SwapResult
    from servectl.service.watch import WatchView

ReportHook = Callable[["PreflightReport"], None]
"""Gets the preflight report (warnings, checks skipped with ``force``) before anything starts."""


@dataclass(frozen=True)
class Status:
    """What ``servectl status`` shows: the services, and notes on state servectl left (a swap, conflicts)."""

    services: list[ServiceInfo]
    notes: list[str]  # an unfinished swap, conflicts kept stopped


class Host:
    """This host as servectl drives it: Docker, the GPUs, the host probe and the state folder.

    Args:
        docker: the Docker engine (:class:`~servectl.adapters.docker.DockerEngine`); default: the Docker SDK
            client of the environment (``DOCKER_HOST``), opened on first use and closed by :meth:`close`.
        gpus: the GPU inventory; default: NVML, opened on first use and closed by :meth:`close`.
        host_probe: listeners, memory, disks, model folders; default: psutil and ``/proc``.
        state_dir: the state folder (lock, history, journal); default ``$SERVECTL_HOME`` or the user state folder.
        http: the HTTP client of the health gate and of ``status``'s ``/health`` probes; default: a short-lived
            one per call (tests pass ``httpx.Client(transport=engine.http_transport())``).
        conflicts: stops and restarts declared conflicts; default: through Docker and the compose CLI.
        environ: the environment for ``${VAR}`` references, API keys and defaults; default ``os.environ``.
        lock_timeout_s: default wait for another servectl changing services (default
            ``$SERVECTL_LOCK_TIMEOUT_S`` or 10 s); each method's ``lock_timeout_s`` overrides it.
        scope: only containers with these labels are servectl's (tests use a session label).

    Adapters given here belong to the caller: :meth:`close` closes only what the host opened itself.
    """

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

    def __enter__(self) -> Host:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Host(state_dir={str(self.state_dir)!r}{', closed' if self._closed else ''})"

    # -- profiles (no adapters) ----------------------------------------------------------------------------
    def load_profile(self, *, name: str) -> LoadedProfile:
        """Find, merge and validate profile ``name`` (a name on the search path, or a ``.yaml`` path).

        Raises:
            UsageError: no such profile. ProfileError: every problem, one line each, with file and line.
        """
        from servectl.plan.validate import load_profile

        return load_profile(name)

    def compile_plan(self, *, name: str) -> LaunchPlan:
        """The launch plan of profile ``name`` on this host; starts nothing, opens no adapter.

        Reads the host's environment for the home and state folders and the ``${VAR}`` references.
        """
        return self._resolve(name).plan

    def validate(self, *, names: Sequence[str] | None = None) -> list[Validation]:
        """Validate profiles (all runnable ones when ``names`` is None), each read once: per profile its error,
        or its warnings and a note when its flag catalog may be stale for its image. Never raises for one profile.

        Raises:
            UsageError: a name is no profile on the search path.
        """
        from dataclasses import replace

        from servectl.plan.inventory import validations
        from servectl.preflight.engine_image import profile_catalog_note

        return [
            replace(v, note=profile_catalog_note(v.loaded.profile)) if v.loaded is not None else v
            for v in validations(list(names) if names else None)
        ]

    def render(self, *, name: str, to: str, out: str | None = None) -> RenderedFile:
        """Profile ``name`` as a docker compose file (``to="compose"``) or Kubernetes manifests (``to="k8s"``),
        from the plan ``up`` would run; nothing is written until ``.write()`` (``out``: the file, ``-`` for
        standard output, default ``compose/NAME.yaml`` or ``k8s/NAME.yaml``).

        Raises:
            UsageError: an unknown target. RenderUnsupported: the target cannot express this profile.
        """
        from servectl.render.files import parse_target, render_profile

        return render_profile(name, target=parse_target(to), out=out)

    def promote(self, *, name: str, evidence_dir: Path, qualification_dir: Path | None = None) -> EvidenceRecord:
        """Mark profile ``name`` promoted on the bench results in ``evidence_dir`` and its qualification evidence
        (``qualification_dir``, default ``evidence_dir``), both of its current plan, image and model pins.

        Raises:
            UsageError: unreadable or missing evidence. ProfileError: the evidence does not match the profile, or
                a gate failed (every reason, one line each).
        """
        from servectl.bench.promote import promote

        return promote(name=name, evidence_dir=evidence_dir, qualification_dir=qualification_dir)

    def _resolve(self, name: str) -> Resolved:
        from servectl.plan.resolve import resolve

        return resolve(name, environ=self.environ)

    # -- images and catalogs -------------------------------------------------------------------------------
    def validate_in_image(self, *, name: str) -> InImageValidation:
        """Profile ``name``'s argv parsed by its image's own SGLang in a throwaway container (``--in-image``).

        Raises:
            ProfileError: the profile does not validate. PreflightFailed: its image is not on this host.
            ImageProbeError: the image has no usable Python or SGLang.
        """
        from servectl.preflight.engine_image import validate_in_image

        return validate_in_image(self._resolve(name), engine=self.docker)

    def flag_catalog(self, *, name: str) -> FlagCatalog:
        """A flag catalog by what ``engine.catalog`` accepts (shipped name, ``sha256:...``, file), a profile's
        catalog, or an image's extracted one.

        Raises:
            UsageError: nothing by that name.
        """
        from servectl.preflight.engine_image import load_catalog_target

        return load_catalog_target(name)[1]

    def extract_catalog(
        self,
        *,
        image: str,
        out: Path | None = None,
        logs: bool = False,
        python: str | None = None,
        timeout_s: float = 120.0,
    ) -> ExtractedCatalog:
        """Dump an image's own SGLang parser into a flag catalog (``servectl catalog extract``).

        ``image`` is an image reference or a profile name (its image and ``image.entrypoint``); ``python``
        overrides the image's Python. The catalog is kept in the user cache by image id, and written to ``out``.

        Raises:
            PreflightFailed: the image is not on this host. ImageProbeError: no usable Python or SGLang in it.
        """
        from servectl.paths import catalog_cache_dir
        from servectl.preflight.engine_image import extract_catalog, image_target

        target = image_target(image)
        entrypoint = (python, "-m", "sglang.launch_server") if python else target.entrypoint
        return extract_catalog(
            image=target.image,
            engine=self.docker,
            entrypoint=entrypoint,
            out=out,
            logs=logs,
            timeout_s=timeout_s,
            store_dir=catalog_cache_dir(self.environ),
        )

    def diff_catalogs(self, *, a: str, b: str, name: str | None = None) -> tuple[str, str, list[FlagChange]]:
        """Flags added, removed or changed from catalog ``a`` to ``b`` (each as :meth:`flag_catalog` takes, or an
        image, extracted on the spot when it has no catalog yet); with ``name``, only that profile's flags.

        Returns:
            (label of a, label of b, the changes).
        """
        from servectl.preflight.engine_image import load_catalog_target
        from servectl.profile.catalog_diff import diff_catalogs, flags_affected

        label_a, cat_a = load_catalog_target(a, engine=self.docker)
        label_b, cat_b = load_catalog_target(b, engine=self.docker)
        changes = diff_catalogs(cat_a, cat_b)
        if name is not None:
            flags = {t.split("=", 1)[0] for t in self._resolve(name).plan.engine_argv if t.startswith("--")}
            primary = {opt.primary_flag for f in flags if (opt := cat_a.option(f)) is not None}
            changes = flags_affected(changes, primary | flags)
        return label_a, label_b, changes

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

        self._check_open()
        if self._docker is not None:
            return run_doctor(docker=self._docker, gpus=self.gpus, host=self.host_probe, state_dir=self.state_dir)
        from servectl.adapters.docker import DockerSdkEngine

        docker = DockerSdkEngine(timeout_s=5.0)  # a hung engine must not hang the check of it
        try:
            return run_doctor(docker=docker, gpus=self.gpus, host=self.host_probe, state_dir=self.state_dir)
        finally:
            docker.close()

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
        from servectl.service.runtime import up

        resolved = self._resolve(name)
        return up(
            name=name,
            docker=self.docker,
            resolved=resolved,
            gpus=self._gpus_for(resolved),
            host=self.host_probe,
            force=force,
            on_phase=on_phase,
            on_report=on_report,
            http=self._http,
            environ=self.environ,
            state_dir=self.state_dir,
            lock_timeout_s=self._lock_timeout(lock_timeout_s),
            scope=self.scope,
        )

    def down(self, *, name: str | None = None, lock_timeout_s: float | None = None) -> DownResult:
        """Stop the service of profile ``name`` (default: the only one running) and confirm it is gone.

        Waits until its GPUs are free (when NVML answers); once no servectl service runs, starts again the
        conflicts a swap stopped.

        Raises:
            UsageError: no ``name`` while several services run, or ``name`` is neither a service nor a profile.
        """
        from servectl.service.runtime import down

        return down(
            name=name,
            docker=self.docker,
            gpus=self._card_waits(),
            state_dir=self.state_dir,
            lock_timeout_s=self._lock_timeout(lock_timeout_s),
            scope=self.scope,
            environ=self.environ,
            conflicts=self._conflicts,
        )

    def services(self) -> list[ServiceInfo]:
        """Every servectl service on this host: profile, state, port, GPUs, plan hash and drift."""
        return self._list(probe=True)

    def _list(self, *, probe: bool) -> list[ServiceInfo]:
        from servectl.service.services import current_plan_hash, services

        return services(
            docker=self.docker,
            http=self._http,
            probe=probe,
            plan_hash_of=current_plan_hash if probe else None,
            state_dir=self.state_dir,
            scope=self.scope,
        )

    def status(self) -> Status:
        """Every servectl service, with the notes of an unfinished swap and of conflicts kept stopped."""
        from servectl.service.journal import status_notes

        return Status(services=self.services(), notes=status_notes(state_dir=self.state_dir))

    def watch(self) -> Callable[[], WatchView]:
        """For ``status --watch``: a function that takes one refresh (the services, the startup phase of each
        starting one, each card's memory and utilisation), through this host's adapters."""
        from servectl.service.watch import watch_view

        docker, gpus = self.docker, self._card_waits()

        def refresh() -> WatchView:
            return watch_view(docker=docker, gpus=gpus, list_services=self.services)

        return refresh

    def logs(self, *, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The log lines of profile (or container) ``name``'s service, secrets redacted; ``follow`` keeps reading.

        Raises:
            UsageError: no such service (when the first line is asked for).
        """
        from servectl.service.logs import follow_logs

        return follow_logs(name=name, docker=self.docker, follow=follow, tail=tail, scope=self.scope)

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
        from servectl.service.swap import profile_preflight

        return profile_preflight(state_dir=self.state_dir, on_report=on_report, host=self.host_probe)

    def _runtime(self) -> _HostRuntime:
        return _HostRuntime(http=self._http, environ=self.environ)

    # -- adopt ---------------------------------------------------------------------------------------------
    def adopt(
        self,
        *,
        container: str | None = None,
        compose_file: Path | None = None,
        service: str | None = None,
        name: str | None = None,
        out: Path | None = None,
        dry_run: bool = False,
        overwrite: bool = False,
    ) -> AdoptResult:
        """Write a profile that reproduces a container (``docker inspect``) or service ``service`` of a compose file.

        Args:
            container: name or id of the container to adopt.
            compose_file: with ``service``, adopt that compose service instead (read through the compose CLI).
            service: the compose service.
            name: profile name (default: from the container name).
            out: file to write (default: ``profiles/NAME.yaml``).
            dry_run: build the profile, write nothing.
            overwrite: replace a profile of that name (the old file is kept as ``.bak``).
        """
        from servectl.adapters.conflicts import detect_compose
        from servectl.service.adopt import adopt

        compose_config = None
        compose = detect_compose() if compose_file is not None else None
        if compose is not None:

            def compose_config(path: Path) -> dict[str, object]:
                assert compose is not None
                return compose.config(str(path))

        return adopt(
            docker=cast("DockerDocuments", self.docker),  # DockerSdkEngine reads volumes too; fakes need not
            container=container,
            compose_file=compose_file,
            service=service,
            compose_config=compose_config,
            name=name,
            out=out,
            dry_run=dry_run,
            force=overwrite,
            environ=self.environ,
        )

    def diff_container(self, *, name: str, container: str) -> list[str]:
        """What differs between a container (``docker inspect``) and the container profile ``name`` would create.

        Empty when they match on every field servectl controls (how ``status`` recognises an adopted service).

        Raises:
            UsageError: no such container or profile. ProfileError: the profile does not validate.
        """
        from servectl.service.adopted import diff_container

        return diff_container(profile=name, container=container, docker=self.docker)

    # -- measure -------------------------------------------------------------------------------------------
    def bench(
        self,
        *,
        name: str | None = None,
        url: str | None = None,
        model: str | None = None,
        api_key_env: str | None = None,
        prompt_tokens: Sequence[int] | None = None,
        concurrency: Sequence[int] = (1,),
        repeats: int = 3,
        max_tokens: int = 512,
        warmup: bool = True,
        timeout_s: float = 900.0,
        seed: int = 0,
        out_dir: Path | None = None,
        plot: Path | None = None,
        progress: Callable[[BenchProgressEvent], None] | None = None,
    ) -> ProfileBenchResult:
        """Benchmark profile ``name``'s running service (or the server at ``url``) and write the evidence.

        What ``servectl bench`` does; the arguments are those of
        :func:`servectl.bench.profile_run.run_profile_bench` (``prompt_tokens`` None: its default lengths),
        with the host's environment, Docker engine (to find the service) and GPU inventory (free VRAM after).
        """
        from servectl.bench.profile_run import run_profile_bench

        lengths: dict[str, Any] = {} if prompt_tokens is None else {"prompt_tokens": prompt_tokens}
        return run_profile_bench(
            name=name,
            url=url,
            model=model,
            api_key_env=api_key_env,
            concurrency=concurrency,
            repeats=repeats,
            max_tokens=max_tokens,
            warmup=warmup,
            timeout_s=timeout_s,
            seed=seed,
            out_dir=out_dir,
            plot=plot,
            progress=progress,
            environ=self.environ,
            **self._measured(name),
            **lengths,
        )

    def qualify(
        self,
        *,
        name: str | None = None,
        url: str | None = None,
        model: str | None = None,
        suite: str | None = None,
        api_key_env: str | None = None,
        seed: int = 0,
        out_dir: Path | None = None,
        progress: Callable[[QualifyProgressEvent], None] | None = None,
    ) -> ProfileQualifyResult:
        """Qualify profile ``name``'s running service (or the server at ``url``) and write ``qualify.json``.

        What ``servectl qualify`` does; the arguments are those of
        :func:`servectl.bench.qualify.profile_run.run_profile_qualify`, with the host's environment, Docker engine
        and GPU inventory.
        """
        from servectl.bench.qualify.profile_run import run_profile_qualify

        return run_profile_qualify(
            name=name,
            url=url,
            model=model,
            suite=suite,
            api_key_env=api_key_env,
            seed=seed,
            out_dir=out_dir,
            progress=progress,
            environ=self.environ,
            **self._measured(name),
        )

    def _measured(self, name: str | None) -> dict[str, Any]:
        """The adapters a measurement of profile ``name``'s service reads (none for a bare URL)."""
        if name is None:
            return {}
        return {"docker": self.docker, "gpus": self._gpus_for(self._resolve(name))}


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
        from servectl.service.runtime import start

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
        from servectl.service.runtime import stop

        return stop(service=service, docker=docker, gpus=gpus, state_dir=state_dir)

    def ensure_image(
        self, resolved: Resolved, *, docker: DockerEngine, on_phase: Callable[[Progress], None] | None = None
    ) -> None:
        from servectl.service.image import ensure_image

        ensure_image(resolved, docker=docker, on_phase=on_phase)


def from_env(*, environ: Mapping[str, str] | None = None, lock_timeout_s: float | None = None) -> Host:
    """A :class:`Host` with this machine's real adapters, configured from the environment (``DOCKER_HOST``,
    ``SERVECTL_HOME``, ``SERVECTL_PROFILES``, ``SERVECTL_LOCK_TIMEOUT_S``); close it, or use it in ``with``."""
    return Host(environ=environ, lock_timeout_s=lock_timeout_s)
