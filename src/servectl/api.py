"""servectl's public functions on this host: each builds the real adapters (Docker, NVML) and calls the core.

Use them through the package (``servectl.up(name="demo")``; see ``servectl/__init__.py``). The core
functions they call (:func:`servectl.service.runtime.up` and the others) take every adapter as a parameter;
call those, with the fakes of :mod:`servectl.testing`, to drive servectl without Docker or GPUs. The CLI
calls these functions too, so ``servectl up demo`` and ``servectl.up(name="demo")`` do the same thing.

Every function is keyword-only and raises :class:`servectl.errors.ServectlError` subclasses (one line each,
with the exit code the CLI would use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servectl.adapters.docker import DockerSdkEngine
    from servectl.plan.compile import LaunchPlan
    from servectl.plan.inventory import Validation
    from servectl.plan.resolve import Resolved
    from servectl.preflight.doctor import DoctorReport
    from servectl.preflight.engine_image import ExtractedCatalog, InImageValidation
    from servectl.preflight.model import PreflightReport
    from servectl.profile.catalog import FlagCatalog
    from servectl.profile.catalog_diff import FlagChange
    from servectl.profile.loader import LoadedProfile
    from servectl.service.adopt import AdoptResult
    from servectl.service.health import Progress
    from servectl.service.recover import RecoverResult
    from servectl.service.rollback import RollbackCheck
    from servectl.service.runtime import DownResult, UpResult
    from servectl.service.services import ServiceInfo
    from servectl.service.swap import PhaseEvent, Preflight, SwapResult
    from servectl.service.watch import WatchView

ReportHook = Callable[["PreflightReport"], None]


def load_profile(*, name: str) -> LoadedProfile:
    """Find, merge and validate profile ``name`` (a name on the search path, or a ``.yaml`` path).

    Raises:
        UsageError: no such profile. ProfileError: every problem, one line each, with file and line.
    """
    from servectl.plan.validate import load_profile as load

    return load(name)


def compile_plan(*, profile: str | LoadedProfile, environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """The launch plan of ``profile`` (a name, or what :func:`load_profile` returned) on this host.

    Pure apart from loading the profile: reads the environment given (default ``os.environ``) for the home
    and state folders and the ``${VAR}`` references, starts nothing.
    """
    from servectl.plan.resolve import plan_for

    loaded = load_profile(name=profile) if isinstance(profile, str) else profile
    return plan_for(loaded, environ=environ)


def run_preflight(*, name: str, force: Iterable[str] = ()) -> PreflightReport:
    """Every preflight check of profile ``name`` on this host (NVML, psutil, Docker); starts nothing.

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
    from servectl.plan.resolve import resolve
    from servectl.preflight.checks import validate_skip
    from servectl.preflight.model import StartContext
    from servectl.preflight.request import measure_start
    from servectl.service.services import running_refs
    from servectl.service.services import services as list_services

    skip = validate_skip(force)
    resolved = resolve(name)
    docker = _docker()
    try:
        running = list_services(docker=docker, probe=False, plan_hash_of=None)
    except EngineUnavailable:
        running = []  # docker.engine reports it
    return measure_start(resolved, docker=docker, context=StartContext(services=running_refs(running)), skip=skip)


def up(
    *,
    name: str,
    force: Iterable[str] = (),
    on_phase: Callable[[Progress], None] | None = None,
    on_report: ReportHook | None = None,
    resolved: Resolved | None = None,
) -> UpResult:
    """Validate, preflight and start profile ``name``, then wait until it serves (the health gate).

    Args:
        name: the profile.
        force: preflight check ids to skip (recorded in the history).
        on_phase: called with each startup phase (image, container, weights, ready...).
        on_report: called with the preflight report before anything starts.
        resolved: the profile already resolved by the caller (skips loading it again).

    Raises:
        PreflightFailed: a check failed; nothing was started. StartupFailed: the engine did not pass the gate
            (its container is removed; ``err.last_log_lines`` has its last lines).
    """
    from servectl.preflight.request import optional_gpu_inventory
    from servectl.service.runtime import up as start_service

    if resolved is None:
        from servectl.plan.resolve import resolve

        resolved = resolve(name)
    docker = _docker()
    return start_service(
        name=name,
        docker=docker,
        resolved=resolved,
        on_phase=on_phase,
        gpus=optional_gpu_inventory(resolved),
        force=force,
        on_report=on_report,
    )


def down(*, name: str | None = None) -> DownResult:
    """Stop the service of profile ``name`` (default: the only one running) and confirm it is gone.

    Waits until its GPUs are free (when NVML answers); once no servectl service runs, starts again the
    conflicts a swap stopped.
    """
    from servectl.preflight.request import optional_gpu_inventory
    from servectl.service.runtime import down as stop_service

    return stop_service(name=name, docker=_docker(), gpus=optional_gpu_inventory())


def services() -> list[ServiceInfo]:
    """Every servectl service on this host: profile, state, port, GPUs, plan hash and drift."""
    from servectl.service.services import services as list_services

    return list_services(docker=_docker())


def status_watcher() -> Callable[[], WatchView]:
    """For ``status --watch``: a function that takes one refresh (the services, the startup phase of each
    starting one, each card's memory and utilisation); the engine and NVML are opened once, here."""
    from servectl.preflight.request import optional_gpu_inventory
    from servectl.service.services import services as list_services
    from servectl.service.watch import watch_view

    docker, gpus = _docker(), optional_gpu_inventory()

    def refresh() -> WatchView:
        return watch_view(docker=docker, gpus=gpus, list_services=lambda: list_services(docker=docker))

    return refresh


@dataclass(frozen=True)
class Status:
    """What ``servectl status`` shows: the services, and notes on state servectl left (a swap, conflicts)."""

    services: list[ServiceInfo]
    notes: list[str]  # an unfinished swap, conflicts kept stopped


def status() -> Status:
    """Every servectl service on this host, with the notes of an unfinished swap and conflicts kept stopped."""
    from servectl.paths import state_dir
    from servectl.service.journal import status_notes

    return Status(services=services(), notes=status_notes(state_dir=state_dir()))


def swap(
    *,
    target: str | None = None,
    force: Iterable[str] = (),
    wait_s: float | None = None,
    on_phase: Callable[[PhaseEvent], None] | None = None,
    on_report: ReportHook | None = None,
) -> SwapResult:
    """Replace the running service with ``target`` (default: its ``rollback:``), all-or-nothing.

    Args:
        target: the profile to run instead.
        force: preflight check ids to skip.
        wait_s: seconds to wait for another servectl that is changing services (default 10).
        on_phase: called as each phase of the transaction begins, progresses and ends.
        on_report: called with the target's preflight report.

    Raises:
        SwapRolledBack: the target failed and the previous service is back (exit 4).
        SwapFailed: both failed and nothing runs (exit 5).
    """
    from servectl.preflight.request import optional_gpu_inventory
    from servectl.service.swap import swap as swap_services

    return swap_services(
        target=target,
        docker=_docker(),
        gpus=optional_gpu_inventory(),
        preflight=_swap_preflight(on_report),
        force=tuple(force),
        lock_timeout_s=wait_s,
        on_phase=on_phase,
    )


def rollback(
    *,
    force: Iterable[str] = (),
    wait_s: float | None = None,
    on_phase: Callable[[PhaseEvent], None] | None = None,
    on_report: ReportHook | None = None,
) -> SwapResult:
    """Swap back to the profile that ran before the current one (from the history); see :func:`swap`."""
    from servectl.preflight.request import optional_gpu_inventory
    from servectl.service.rollback import rollback as swap_back

    return swap_back(
        docker=_docker(),
        gpus=optional_gpu_inventory(),
        preflight=_swap_preflight(on_report),
        force=tuple(force),
        lock_timeout_s=wait_s,
        on_phase=on_phase,
    )


def rollback_check(*, names: Sequence[str] | None = None) -> list[RollbackCheck]:
    """Prove that each profile's rollback target could start now (profile, image, model, preflight).

    Args:
        names: the profiles whose target to check (default: every profile that has a ``rollback:``).
    """
    from servectl.preflight.request import optional_gpu_inventory
    from servectl.service.rollback import rollback_check as check

    return check(names=names, docker=_docker(), gpus=optional_gpu_inventory())


def recover(*, wait_s: float | None = None) -> RecoverResult:
    """Settle a swap, rollback or up that was killed, from the journal it left: bring back what ran before.

    Args:
        wait_s: seconds to wait for another servectl that is changing services (default 10).
    """
    from servectl.preflight.request import optional_gpu_inventory
    from servectl.service.recover import recover as settle

    return settle(docker=_docker(), gpus=optional_gpu_inventory(), lock_timeout_s=wait_s)


def logs(*, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
    """The log lines of profile (or container) ``name``'s service, secrets redacted; ``follow`` keeps reading."""
    from servectl.service.logs import follow_logs

    return follow_logs(name=name, docker=_docker(), follow=follow, tail=tail)


def doctor() -> DoctorReport:
    """Is this machine set up for servectl: Docker, the GPU runtime, the driver, compose, the state folder, extras.

    Returns:
        One line per part with its fix; ``report.exit_code`` is 3 when a required part fails.
    """
    from servectl.adapters.docker import DockerSdkEngine
    from servectl.adapters.gpu import NvmlInventory
    from servectl.adapters.host import PsutilHostProbe
    from servectl.paths import state_dir
    from servectl.preflight.doctor import run_doctor

    docker = DockerSdkEngine(timeout_s=5.0)  # a hung engine must not hang the check of it
    try:
        return run_doctor(docker=docker, gpus=NvmlInventory(), host=PsutilHostProbe(), state_dir=state_dir())
    finally:
        docker.close()


def adopt(
    *,
    container: str | None = None,
    compose_file: Path | None = None,
    service: str | None = None,
    name: str | None = None,
    out: Path | None = None,
    dry_run: bool = False,
    force: bool = False,
) -> AdoptResult:
    """Write a profile that reproduces a container (``docker inspect``) or service ``service`` of a compose file.

    Args:
        container: name or id of the container to adopt.
        compose_file: with ``service``, adopt that compose service instead (read through the compose CLI).
        service: the compose service.
        name: profile name (default: from the container name).
        out: file to write (default: ``profiles/NAME.yaml``).
        dry_run: build the profile, write nothing.
        force: replace a profile of that name (the old file is kept as ``.bak``).
    """
    from servectl.adapters.conflicts import detect_compose
    from servectl.adapters.docker import DockerSdkEngine
    from servectl.service.adopt import adopt as adopt_container

    compose_config = None
    compose = detect_compose() if compose_file is not None else None
    if compose is not None:

        def compose_config(path: Path) -> dict[str, object]:
            assert compose is not None
            return compose.config(str(path))

    docker = DockerSdkEngine()
    try:
        return adopt_container(
            docker=docker,
            container=container,
            compose_file=compose_file,
            service=service,
            compose_config=compose_config,
            name=name,
            out=out,
            dry_run=dry_run,
            force=force,
        )
    finally:
        docker.close()


def diff_container(*, profile: str, container: str) -> list[str]:
    """What differs between a container (``docker inspect``) and the container profile ``profile`` would create.

    Empty when they match on every field servectl controls (how ``status`` recognises an adopted service).

    Raises:
        UsageError: no such container or profile. ProfileError: the profile does not validate.
    """
    from servectl.adapters.docker import DockerSdkEngine
    from servectl.service.adopted import diff_container as diff

    docker = DockerSdkEngine()
    try:
        return diff(profile=profile, container=container, docker=docker)
    finally:
        docker.close()


def extract_catalog(
    *, image: str, out: Path | None = None, logs: bool = False, python: str | None = None, timeout_s: float = 120.0
) -> ExtractedCatalog:
    """Dump an image's own SGLang parser into a flag catalog (``servectl catalog extract``).

    ``image`` is an image reference or a profile name (its image and ``image.entrypoint``); ``python`` overrides
    the image's Python. The catalog is kept in the user cache by image id, and written to ``out`` too.

    Raises:
        PreflightFailed: the image is not on this host. ImageProbeError: no usable Python or SGLang in it.
    """
    from servectl.preflight.engine_image import extract_catalog as extract
    from servectl.preflight.engine_image import image_target

    target = image_target(image)
    entrypoint = (python, "-m", "sglang.launch_server") if python else target.entrypoint
    docker = _docker()
    try:
        return extract(
            image=target.image, engine=docker, entrypoint=entrypoint, out=out, logs=logs, timeout_s=timeout_s
        )
    finally:
        docker.close()


def flag_catalog(*, name: str) -> FlagCatalog:
    """A flag catalog by what ``engine.catalog`` accepts (shipped name, ``sha256:...``, file), a profile's
    catalog, or an image's extracted one.

    Raises:
        UsageError: nothing by that name.
    """
    from servectl.preflight.engine_image import load_catalog_target

    return load_catalog_target(name)[1]


def diff_catalogs(*, a: str, b: str, profile: str | None = None) -> tuple[str, str, list[FlagChange]]:
    """Flags added, removed or changed from catalog ``a`` to ``b`` (each as :func:`flag_catalog` takes, or an image,
    extracted on the spot when it has no catalog yet); with ``profile``, only the changes to its flags.

    Returns:
        (label of a, label of b, the changes).
    """
    from servectl.preflight.engine_image import load_catalog_target
    from servectl.profile.catalog_diff import diff_catalogs as diff
    from servectl.profile.catalog_diff import flags_affected

    docker = _docker()
    try:
        label_a, cat_a = load_catalog_target(a, engine=docker)
        label_b, cat_b = load_catalog_target(b, engine=docker)
    finally:
        docker.close()
    changes = diff(cat_a, cat_b)
    if profile is not None:
        from servectl.plan.resolve import resolve

        flags = {t.split("=", 1)[0] for t in resolve(profile).plan.engine_argv if t.startswith("--")}
        primary = {opt.primary_flag for f in flags if (opt := cat_a.option(f)) is not None}
        changes = flags_affected(changes, primary | flags)
    return label_a, label_b, changes


def validate(*, names: Sequence[str] | None = None) -> list[Validation]:
    """Validate profiles (all runnable ones when ``names`` is None), each read once: per profile its error, or
    its warnings and a note when its flag catalog may be stale for its image. Never raises for one profile.

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


def validate_in_image(*, name: str, loaded: LoadedProfile | None = None) -> InImageValidation:
    """Profile ``name``'s argv parsed by its image's own SGLang in a throwaway container (``--in-image``).

    Args:
        name: the profile.
        loaded: the profile already loaded by the caller (``validate``'s result), so it is not read again.

    Raises:
        ProfileError: the profile does not validate. PreflightFailed: its image is not on this host.
        ImageProbeError: the image has no usable Python or SGLang.
    """
    from servectl.plan.resolve import Resolved, plan_for, resolve
    from servectl.preflight.engine_image import validate_in_image as validate

    resolved = resolve(name) if loaded is None else Resolved(loaded=loaded, plan=plan_for(loaded))
    docker = _docker()
    try:
        return validate(resolved, engine=docker)
    finally:
        docker.close()


def _swap_preflight(on_report: ReportHook | None) -> Preflight:
    """servectl's full preflight as swap runs it (the replaced service counts as stopped)."""
    from servectl.paths import state_dir
    from servectl.service.swap import profile_preflight

    return profile_preflight(state_dir=state_dir(), on_report=on_report)


def _docker() -> DockerSdkEngine:
    from servectl.adapters.docker import DockerSdkEngine

    return DockerSdkEngine()
