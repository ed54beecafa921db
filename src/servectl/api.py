"""servectl's public functions: each builds a :class:`servectl.host.Host` from the environment, calls one method
and closes it (the Docker client and NVML it opened).

Use them through the package (``servectl.up(name="demo")``; see ``servectl/__init__.py``). To run several
commands on one set of adapters, or to pass fakes (:mod:`servectl.testing`), use the host itself::

    with servectl.from_env() as host:
        host.up(name="demo")

Every function is keyword-only, takes the same parameter names as the method it wraps, and raises
:class:`servectl.errors.ServectlError` subclasses (one line each, with the exit code the CLI would use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.host import Host, ReportHook, Status, from_env

if TYPE_CHECKING:
    from servectl.adapters.plan_cache import DryRun
    from servectl.bench.model import BenchProgressEvent
    from servectl.bench.profile_run import ProfileBenchResult
    from servectl.bench.qualify.model import QualifyProgressEvent
    from servectl.bench.qualify.profile_run import ProfileQualifyResult
    from servectl.plan.compile import LaunchPlan
    from servectl.plan.inventory import ProfileRow, Validation
    from servectl.preflight.doctor import DoctorReport
    from servectl.preflight.model import PreflightReport
    from servectl.profile.catalog import FlagCatalog
    from servectl.profile.catalog_diff import FlagChange
    from servectl.profile.evidence import EvidenceRecord
    from servectl.profile.loader import LoadedProfile
    from servectl.render.files import RenderedFile
    from servectl.service.adopt import AdoptResult
    from servectl.service.catalog import ExtractedCatalog, InImageValidation
    from servectl.service.health import Progress
    from servectl.service.recover import RecoverResult
    from servectl.service.rollback import RollbackCheck
    from servectl.service.runtime import DownResult, UpResult
    from servectl.service.services import ServiceInfo
    from servectl.service.transaction.model import PhaseEvent, SwapResult

__all__ = [
    "Host",
    "Status",
    "adopt",
    "compile_plan",
    "diff_catalogs",
    "diff_container",
    "doctor",
    "down",
    "dry_run",
    "extract_catalog",
    "flag_catalog",
    "from_env",
    "load_profile",
    "logs",
    "profiles",
    "promote",
    "recover",
    "render_profile",
    "rollback",
    "rollback_check",
    "run_preflight",
    "run_profile_bench",
    "run_profile_qualify",
    "services",
    "status",
    "swap",
    "up",
    "validate",
    "validate_in_image",
]


def load_profile(*, name: str) -> LoadedProfile:
    """:meth:`Host.load_profile`: find, merge and validate profile ``name``."""
    with Host() as host:
        return host.load_profile(name=name)


def compile_plan(*, name: str, environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """:meth:`Host.compile_plan`: the launch plan of profile ``name`` (reads ``environ``, default
    ``os.environ``); starts nothing."""
    with Host(environ=environ) as host:
        return host.compile_plan(name=name)


def dry_run(*, name: str, environ: Mapping[str, str] | None = None) -> DryRun:
    """:meth:`Host.dry_run`: what ``up --dry-run`` shows for profile ``name`` (reads ``environ``, default
    ``os.environ``); starts nothing."""
    with Host(environ=environ) as host:
        return host.dry_run(name=name)


def profiles() -> list[ProfileRow]:
    """:meth:`Host.profiles`: every runnable profile on the search path with its key settings."""
    with Host() as host:
        return host.profiles()


def validate(*, names: Sequence[str] | None = None) -> list[Validation]:
    """:meth:`Host.validate`: validate profiles (all runnable ones when ``names`` is None)."""
    with Host() as host:
        return host.validate(names=names)


def render_profile(
    *, name: str, to: str, out: str | None = None, gateway: bool = False, gateway_image: str | None = None
) -> RenderedFile:
    """:meth:`Host.render`: profile ``name`` as a compose file or Kubernetes manifests (written by ``.write()``),
    with the gateway beside it when ``gateway``."""
    with Host() as host:
        return host.render(name=name, to=to, out=out, gateway=gateway, gateway_image=gateway_image)


def promote(*, name: str, evidence_dir: Path, qualification_dir: Path | None = None) -> EvidenceRecord:
    """:meth:`Host.promote`: mark profile ``name`` promoted on its bench and qualification evidence."""
    with Host() as host:
        return host.promote(name=name, evidence_dir=evidence_dir, qualification_dir=qualification_dir)


def run_preflight(*, name: str, force: Iterable[str] = ()) -> PreflightReport:
    """:meth:`Host.preflight`: every preflight check of profile ``name`` on this host; starts nothing."""
    with Host() as host:
        return host.preflight(name=name, force=force)


def up(
    *,
    name: str,
    force: Iterable[str] = (),
    on_phase: Callable[[Progress], None] | None = None,
    on_report: ReportHook | None = None,
    lock_timeout_s: float | None = None,
) -> UpResult:
    """:meth:`Host.up`: validate, preflight and start profile ``name``, then wait until it serves."""
    with Host() as host:
        return host.up(name=name, force=force, on_phase=on_phase, on_report=on_report, lock_timeout_s=lock_timeout_s)


def down(*, name: str | None = None, lock_timeout_s: float | None = None) -> DownResult:
    """:meth:`Host.down`: stop the service of profile ``name`` (default: the only one running)."""
    with Host() as host:
        return host.down(name=name, lock_timeout_s=lock_timeout_s)


def services() -> list[ServiceInfo]:
    """:meth:`Host.services`: every servectl service on this host."""
    with Host() as host:
        return host.services()


def status() -> Status:
    """:meth:`Host.status`: every servectl service, with notes on an unfinished swap and stopped conflicts."""
    with Host() as host:
        return host.status()


def logs(*, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
    """:meth:`Host.logs`: the log lines of profile (or container) ``name``'s service, secrets redacted.

    The host stays open while the lines are read and closes when the iteration ends (or the iterator is closed).
    """
    with Host() as host:
        yield from host.logs(name=name, follow=follow, tail=tail)


def swap(
    *,
    name: str | None = None,
    force: Iterable[str] = (),
    on_phase: Callable[[PhaseEvent], None] | None = None,
    on_report: ReportHook | None = None,
    lock_timeout_s: float | None = None,
) -> SwapResult:
    """:meth:`Host.swap`: replace the running service with profile ``name``, all-or-nothing."""
    with Host() as host:
        return host.swap(name=name, force=force, on_phase=on_phase, on_report=on_report, lock_timeout_s=lock_timeout_s)


def rollback(
    *,
    force: Iterable[str] = (),
    on_phase: Callable[[PhaseEvent], None] | None = None,
    on_report: ReportHook | None = None,
    lock_timeout_s: float | None = None,
) -> SwapResult:
    """:meth:`Host.rollback`: swap back to the profile that ran before the current one."""
    with Host() as host:
        return host.rollback(force=force, on_phase=on_phase, on_report=on_report, lock_timeout_s=lock_timeout_s)


def rollback_check(*, names: Sequence[str] | None = None) -> list[RollbackCheck]:
    """:meth:`Host.rollback_check`: prove that each profile's rollback target could start now."""
    with Host() as host:
        return host.rollback_check(names=names)


def recover(*, lock_timeout_s: float | None = None) -> RecoverResult:
    """:meth:`Host.recover`: settle a swap, rollback or up that was killed, from the journal it left."""
    with Host() as host:
        return host.recover(lock_timeout_s=lock_timeout_s)


def doctor() -> DoctorReport:
    """:meth:`Host.doctor`: is this machine set up for servectl (Docker, GPU runtime, driver, state folder)."""
    with Host() as host:
        return host.doctor()


def adopt(
    *,
    container: str | None = None,
    compose_file: Path | None = None,
    service: str | None = None,
    name: str | None = None,
    out: Path | None = None,
    dry_run: bool = False,
    overwrite: bool = False,
) -> AdoptResult:
    """:meth:`Host.adopt`: write a profile that reproduces a container or a compose service."""
    with Host() as host:
        return host.adopt(
            container=container,
            compose_file=compose_file,
            service=service,
            name=name,
            out=out,
            dry_run=dry_run,
            overwrite=overwrite,
        )


def diff_container(*, name: str, container: str) -> list[str]:
    """:meth:`Host.diff_container`: what differs between a container and the one profile ``name`` would create."""
    with Host() as host:
        return host.diff_container(name=name, container=container)


def flag_catalog(*, name: str) -> FlagCatalog:
    """:meth:`Host.flag_catalog`: a flag catalog by name, file, profile or image."""
    with Host() as host:
        return host.flag_catalog(name=name)


def extract_catalog(
    *, image: str, out: Path | None = None, logs: bool = False, python: str | None = None, timeout_s: float = 120.0
) -> ExtractedCatalog:
    """:meth:`Host.extract_catalog`: dump an image's own SGLang parser into a flag catalog."""
    with Host() as host:
        return host.extract_catalog(image=image, out=out, logs=logs, python=python, timeout_s=timeout_s)


def diff_catalogs(*, a: str, b: str, name: str | None = None) -> tuple[str, str, list[FlagChange]]:
    """:meth:`Host.diff_catalogs`: flags added, removed or changed from catalog ``a`` to ``b``."""
    with Host() as host:
        return host.diff_catalogs(a=a, b=b, name=name)


def validate_in_image(*, name: str) -> InImageValidation:
    """:meth:`Host.validate_in_image`: profile ``name``'s argv parsed by its image's own SGLang."""
    with Host() as host:
        return host.validate_in_image(name=name)


def run_profile_bench(
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
    environ: Mapping[str, str] | None = None,
) -> ProfileBenchResult:
    """:meth:`Host.bench`: benchmark profile ``name``'s running service (or the server at ``url``) and write
    the evidence (``environ``: where the key and the state folder are read, default ``os.environ``)."""
    with Host(environ=environ) as host:
        return host.bench(
            name=name,
            url=url,
            model=model,
            api_key_env=api_key_env,
            prompt_tokens=prompt_tokens,
            concurrency=concurrency,
            repeats=repeats,
            max_tokens=max_tokens,
            warmup=warmup,
            timeout_s=timeout_s,
            seed=seed,
            out_dir=out_dir,
            plot=plot,
            progress=progress,
        )


def run_profile_qualify(
    *,
    name: str | None = None,
    url: str | None = None,
    model: str | None = None,
    suite: str | None = None,
    api_key_env: str | None = None,
    seed: int = 0,
    out_dir: Path | None = None,
    progress: Callable[[QualifyProgressEvent], None] | None = None,
    via_gateway: bool = False,
    api_key_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProfileQualifyResult:
    """:meth:`Host.qualify`: qualify profile ``name``'s running service (or the server at ``url``, or alias
    ``name`` through the gateway with ``via_gateway``) and write ``qualify.json`` (``environ``: where the key
    and the state folder are read, default ``os.environ``)."""
    with Host(environ=environ) as host:
        return host.qualify(
            name=name,
            url=url,
            model=model,
            suite=suite,
            api_key_env=api_key_env,
            seed=seed,
            out_dir=out_dir,
            progress=progress,
            via_gateway=via_gateway,
            api_key_file=api_key_file,
        )
